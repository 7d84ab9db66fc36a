"""FP8 GEMM and grouped FP8 GEMM benchmarks on the GPU machine: the ``turbo bench`` suites
``gemm-fp8`` and ``grouped-gemm-fp8`` at full model shapes, JSON out.

A thin wrapper over ``turbo_core.bench.suites.gemm_fp8.run`` / ``grouped_gemm_fp8.run``: every case
has its operands quantized once outside the timed region; providers are ``bf16:torch.matmul`` /
``bf16:torch._grouped_mm`` (the bf16 reference), the PyTorch FP8 baseline of the granularity
(``torch._scaled_mm`` tensorwise/rowwise, ``F.scaled_mm`` 1x128/128x128 blockwise and MX,
``torch._scaled_grouped_mm`` rowwise) and ``turbo:<BACKEND>`` for every available backend (a
backend without FP8 kernels, e.g. TRITON before they land, is a ``declined: ...`` row). Baselines
that cannot run are ``skipped: <reason>`` rows. Ratios: ``ratio`` to the FP8 baseline of the same
granularity, ``bf16_ratio`` to bf16; accuracy against float64 on the dequantized operands.

The work is cut into chunks (one suite x model x pass each) and the JSON is rewritten after every
chunk, so a run cut short (``--max-minutes``, the device's per-command limit) keeps what it
measured; run the rest with ``--models``/``--passes``/``--suites``.

Usage (repository root, no install needed; torch 2.11 + triton 3.6 on the H200):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/fp8_bench_h200.py --out fp8_bench.json [--suites gemm-fp8 grouped-gemm-fp8] \\
      [--models llama3.1-8b ...] [--granularities tensorwise rowwise blockwise mx] [--passes fwd wgrad] \\
      [--format E4M3|E5M2|HYBRID] [--max-minutes 8] [--include-reference] [--quick --device cpu]

Expected run time on the H200 (a rough guess, first Triton compiles included): gemm-fp8 ~1-2 min
per Llama model and pass over four granularities (405B the longest), grouped-gemm-fp8 ~2-3 min in
all. Exit status 0 when every chunk ran (rows may still be declined/skipped/error: read them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

from turbo_core.bench import report, runner
from turbo_core.bench.models import DENSE, QUICK
from turbo_core.bench.suites import gemm_fp8, grouped_gemm_fp8
from turbo_core.bench.suites.grouped_gemm import MOE
from turbo_core.bench.suites.grouped_gemm import QUICK as MOE_QUICK

SUITES = {"gemm-fp8": (gemm_fp8, DENSE, QUICK), "grouped-gemm-fp8": (grouped_gemm_fp8, MOE, MOE_QUICK)}
PASSES = ("fwd", "dgrad", "wgrad")
T0 = time.time()


def log(*args) -> None:
    print(f"[{time.time() - T0:6.0f}s]", *args, flush=True)


class Progress:
    """The runner's progress protocol (add_task/advance), as log lines."""

    def __init__(self, label: str):
        self.label, self.done, self.total = label, 0, 0

    def add_task(self, name: str, total: int) -> int:
        self.total = total
        return 0

    def advance(self, task: int) -> None:
        self.done += 1
        if self.done == self.total or self.done % 8 == 0:
            log(f"  {self.label}: {self.done}/{self.total} cases")


def environment(device: str) -> dict:
    env = runner.environment(device)
    env["argv"] = sys.argv
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["driver"] = None
    from turbo_core.plugins.host import get_host

    registry = get_host().registry
    env["backends"] = {name: registry.backend(name).unavailable_reason() or "available"
                       for name in registry.backend_names()}
    env["fp8_kernels"] = {p: [k.backend for k in registry.kernels_for(p)]
                          for p in ("gemm_fp8", "grouped_gemm_fp8", "grouped_gemm_fp8_variable_k")}
    return env


def save(path: str, env: dict, rows: list[dict], chunks: list[dict]) -> None:
    with open(path, "w") as fh:
        json.dump({"environment": env, "chunks": chunks, "rows": rows, "summary": report.summary(rows)}, fh,
                  indent=1, default=str)


def print_summary(rows: list[dict]) -> None:
    """Plain text (rich may be missing on the GPU machine): geomean ratios, then rows that did not run."""
    print("\nsuite | provider | pass | granularity | cases | geomean ratio to the FP8 baseline | geomean vs bf16")
    for s in report.summary(rows):
        g, b = s["geomean_ratio"], s.get("geomean_bf16_ratio")
        cells = [s["suite"], s["provider"], s["pass"], s.get("granularity", "-"), str(s["cases"]),
                 f"{g:.3f}" if g else "-", f"{b:.3f}" if b else "-"]
        print(" | ".join(cells))
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        if r["status"] != "ok":
            seen[(r["provider"], r["status"])] = seen.get((r["provider"], r["status"]), 0) + 1
    for (p, status), n in seen.items():
        print(f"{p}: {status} ({n} rows)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--suites", nargs="*", default=list(SUITES), choices=list(SUITES))
    p.add_argument("--models", nargs="*", help="default: every model of each suite")
    p.add_argument("--passes", nargs="*", default=list(PASSES), choices=list(PASSES))
    p.add_argument("--granularities", nargs="*", help="default: tensorwise rowwise blockwise (+ mx)")
    p.add_argument("--format", default="E4M3", choices=["E4M3", "E5M2", "HYBRID"])
    p.add_argument("--tokens", type=int, default=None, help="default 8192 (32 with --quick)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--include-reference", action="store_true", help="also time the TORCH reference backend")
    p.add_argument("--quick", action="store_true", help="tiny shapes (a CPU smoke run of this script)")
    p.add_argument("--device", default=None, choices=["cuda", "cpu"])
    p.add_argument("--max-minutes", type=float, default=8.0, help="start no chunk after this many minutes")
    args = p.parse_args()

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    env = environment(device)
    log("environment:", json.dumps(env, default=str))
    rows: list[dict] = []
    chunks: list[dict] = []
    deadline = T0 + 60 * args.max_minutes
    complete = True
    for name in args.suites:
        suite, full, tiny = SUITES[name]
        models = [m for m in (tiny if args.quick else full) if not args.models or m in args.models]
        for model in models:
            for pass_ in args.passes:
                chunk = {"suite": name, "model": model, "pass": pass_}
                if time.time() > deadline:
                    log(f"deadline: not run {chunk}")
                    chunks.append({**chunk, "status": "not run (deadline)"})
                    complete = False
                    continue
                log(f"{name} {model} {pass_}")
                t = time.time()
                try:
                    got = suite.run(quick=args.quick, tokens=args.tokens, models=[model], providers=None,
                                    include_reference=args.include_reference, warmup=args.warmup,
                                    iters=args.iters, device=device, progress=Progress(f"{name} {model} {pass_}"),
                                    granularities=args.granularities, fp8_format=args.format, passes=[pass_])
                    status = "ok"
                except Exception as exc:  # a chunk that fails is recorded; the others still run
                    got, status = [], f"error: {type(exc).__name__}: {exc}"
                    complete = False
                    log(status)
                rows += got
                chunks.append({**chunk, "status": status, "seconds": round(time.time() - t, 1), "rows": len(got)})
                if device == "cuda":
                    torch.cuda.empty_cache()
                save(args.out, env, rows, chunks)
    print_summary(rows)
    log(f"wrote {args.out} ({len(rows)} rows)")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
