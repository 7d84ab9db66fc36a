"""Tune the dense GEMM on the H200 with ``turbo tune gemm`` over the gemm suite's model shapes
(Llama-3.1 8B/70B/405B; forward NT, dgrad NN, wgrad TN; bf16; 8192 tokens), then re-time the
result with ``turbo tune --check``. About 5-6 minutes.

Run from the repository root:

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/tune_gemm_h200.py --out sm90.json

Writes ``--out`` (the tuning database), ``<out>.tune.json`` (one row per shape: every timing, the
config gains, rejected configs and why) and ``<out>.check.json`` (the check's rows), and prints both
tables and a summary. Exit status: 0, or 1 when the check finds a regression or nothing was tuned.

Candidates: every available gemm backend (TRITON here; TORCH, the float32-upcasting reference, only
with ``--include-reference``; add ``turbo_hipblaslt.plugin`` to TURBO_PLUGINS to compare it too) and,
for TRITON, the sm90 config list of ``turbo_triton/gemm/configs.py`` (``CANDIDATES["sm90"]``)
against its table's choice. A config is kept when it beats the table by more than 1% (``--min-gain``).

To ship the result: copy it to ``packages/turbo-triton/src/turbo_triton/tuning_db/sm90.json``.
``turbo_core.tuning`` loads every ``tuning_db/*.json`` beside a loaded plugin module
(``turbo_triton/plugin.py``) as package data; the entries apply on sm90 with triton 3.6.x and
turbo-triton 0.1.x (``TURBO_TUNING_VERSIONS`` relaxes that).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the tuning database to write (replaced unless --merge)")
    p.add_argument("--tune-seconds", type=float, default=250.0, help="start no new shape after this (default 250)")
    p.add_argument("--check-seconds", type=float, default=60.0, help="start no new check after this (default 60)")
    p.add_argument("--models", nargs="*", default=["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"])
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--min-gain", type=float, default=0.01)
    p.add_argument("--include-reference", action="store_true", help="also time the TORCH reference backend")
    p.add_argument("--merge", action="store_true", help="merge into an existing --out instead of replacing it")
    p.add_argument("--quick", action="store_true", help="tiny shapes: a dry run of this script (any device)")
    args = p.parse_args()

    import torch

    from turbo_core.cli.main import main as turbo

    if not args.quick and not torch.cuda.is_available():
        print("tune_gemm_h200: no GPU visible (use --quick for a dry run)", file=sys.stderr)
        return 2
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(f"GPU {props.name} sm{props.major}{props.minor}, torch {torch.__version__}", flush=True)
    if os.path.exists(args.out) and not args.merge:
        os.remove(args.out)
    base = args.out[:-5] if args.out.endswith(".json") else args.out
    tune_report, check_report = f"{base}.tune.json", f"{base}.check.json"
    common = ["--warmup", str(args.warmup), "--iters", str(args.iters)]
    if args.quick:
        common = ["--quick", "--warmup", "1", "--iters", "3"]

    t0 = time.monotonic()
    argv = ["tune", "gemm", *common, "--min-gain", str(args.min_gain), "--time-limit", str(args.tune_seconds),
            "--out", args.out, "--report", tune_report]
    if not args.quick:
        argv += ["--models", *args.models, "--tokens", str(args.tokens)]
    if args.include_reference:
        argv.append("--include-reference")
    print("turbo " + " ".join(argv), flush=True)
    rc_tune = turbo(argv)
    t1 = time.monotonic()
    print(f"tuning took {t1 - t0:.0f} s", flush=True)
    if rc_tune != 0:
        print(f"tune_gemm_h200: turbo tune exited {rc_tune}", file=sys.stderr)
        return 1

    argv = ["tune", "--check", args.out, *common, "--time-limit", str(args.check_seconds), "--report", check_report]
    print("turbo " + " ".join(argv), flush=True)
    rc_check = turbo(argv)
    print(f"check took {time.monotonic() - t1:.0f} s", flush=True)

    rows = json.load(open(tune_report))
    done = [r for r in rows if r["status"] == "ok"]
    gains = [g for r in done for g in r["config_gain"].values()]
    print(f"\nsummary: {len(done)}/{len(rows)} shapes tuned; a TRITON config kept for {len(gains)}", flush=True)
    if gains:
        geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
        print(f"  table config time / tuned config time, where kept: geomean {geo:.3f}x, "
              f"min {min(gains):.3f}x, max {max(gains):.3f}x")
    rejected = sum(len(r["rejected"]) for r in rows)
    if rejected:
        print(f"  {rejected} candidate configs rejected (errors or wrong results; see {tune_report})")
    for r in rows:
        if r["status"] != "ok":
            print(f"  {r['shape']}: {r['status']}")
    print(f"database: {args.out}; rows: {tune_report}, {check_report}")
    print("ship it as packages/turbo-triton/src/turbo_triton/tuning_db/sm90.json")
    return 1 if rc_check != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
