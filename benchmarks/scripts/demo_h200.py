"""Run ``turbo demo`` on the GPU for every FP8 recipe (bf16 model) and collect the JSON reports.

Run from the repo root with
`PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin python3 benchmarks/scripts/demo_h200.py --out <file>`

Each recipe runs in-process through ``turbo_core.cli.main.main(["demo", ...])``; a failure is
recorded with its traceback and the next recipe still runs. ``--out`` gets
``{recipe: {"rc": int, "report": <demo JSON> | None, "error": str | None}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import traceback

from turbo_core.cli.main import main


def _one(recipe: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "demo.json")
        try:
            rc = main(["demo", "--steps", str(steps), "--fp8", recipe, "--device", "cuda", "--json", path])
        except Exception:
            return {"rc": -1, "report": None, "error": traceback.format_exc()}
        report = json.load(open(path)) if os.path.exists(path) else None
        return {"rc": rc, "report": report, "error": None}


def _cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    results = {}
    for recipe in ("none", "tensorwise", "rowwise", "blockwise"):
        print(f"=== turbo demo --fp8 {recipe}", flush=True)
        results[recipe] = _one(recipe, args.steps)
        if results[recipe]["error"]:
            print(results[recipe]["error"], flush=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    print({k: v["rc"] for k, v in results.items()})


if __name__ == "__main__":
    _cli()
