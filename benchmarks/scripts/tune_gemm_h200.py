"""Tune the dense GEMM on the H200 with ``turbo tune gemm`` over the gemm suite's model shapes
(Llama-3.1 8B/70B/405B; forward NT, dgrad NN, wgrad TN; bf16; 8192 tokens), then re-time the
result with ``turbo tune --check``. About 5 minutes with the defaults (``--tune-seconds 180``:
start no new shape after 3 minutes; ``--check-seconds 60``).

Run from the repository root:

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/tune_gemm_h200.py --out sm90.json

First a preflight: ``torch.matmul`` at 8192^3 bf16 timed by the campaign's own timer
(``turbo_core.tuning.campaign.measure_us``); the script stops (exit 1) if that implies more than the
H200's 989 TFLOP/s or less than 100 (expected: about 700). Every row of the tuning then passes the
campaign's sanity guard (``turbo_core.tuning.plausible``): a shape whose fastest time implies more
than the sm90 peak, or twice the run's best baseline throughput, is reported ``invalid`` and is
not written.

Writes ``--out`` (the tuning database), ``<out>.tune.json`` (one row per shape: every timing and
its TFLOP/s, the config gains, rejected configs and why) and ``<out>.check.json`` (the check's
rows), and prints both tables and a summary. Exit status: 0, or 1 when the preflight fails, nothing
was tuned, a shape is invalid, or the check finds a regression or an invalid time.

Candidates: every available gemm backend (TRITON here; TORCH, the float32-upcasting reference, only
with ``--include-reference``; add ``turbo_hipblaslt.plugin`` to TURBO_PLUGINS to compare it too) and,
for TRITON, the sm90 config list of ``turbo_triton/gemm/configs.py`` (``CANDIDATES["sm90"]``)
against its table's choice. A config is kept when it beats the table by more than 1% (``--min-gain``).

``--suite gemm-fp8`` tunes ``gemm_fp8`` instead (``--granularity``, default tensorwise rowwise
blockwise; E4M3; bf16 results), and ``--backends`` restricts the candidates. The HIPBLASLT campaign
(its search space: the rank of cuBLASLt's heuristic algorithm, ``turbo_hipblaslt.tuning``) is

    ... TURBO_PLUGINS=...,turbo_hipblaslt.plugin TURBO_HIPBLASLT_JIT=1 \
    python3 benchmarks/scripts/tune_gemm_h200.py --out hipblaslt_sm90.json --backends HIPBLASLT
    python3 benchmarks/scripts/tune_gemm_h200.py --out hipblaslt_sm90.json --backends HIPBLASLT \
        --suite gemm-fp8 --merge

and ships as ``packages/turbo-hipblaslt/src/turbo_hipblaslt/tuning_db/sm90.json``.

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
    p.add_argument("--tune-seconds", type=float, default=180.0, help="start no new shape after this (default 180)")
    p.add_argument("--check-seconds", type=float, default=60.0, help="start no new check after this (default 60)")
    p.add_argument("--models", nargs="*", default=["llama3.1-8b", "llama3.1-70b", "llama3.1-405b"])
    p.add_argument("--suite", default="gemm", choices=["gemm", "gemm-fp8"])
    p.add_argument("--backends", nargs="*", help="candidate backends (default: every available one)")
    p.add_argument("--granularity", nargs="*", help="gemm-fp8: default tensorwise rowwise blockwise")
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
    if not args.quick and not preflight():
        return 1
    if os.path.exists(args.out) and not args.merge:
        os.remove(args.out)
    base = args.out[:-5] if args.out.endswith(".json") else args.out
    tag = "" if args.suite == "gemm" else f".{args.suite}"
    tune_report, check_report = f"{base}{tag}.tune.json", f"{base}{tag}.check.json"
    common = ["--warmup", str(args.warmup), "--iters", str(args.iters)]
    if args.quick:
        common = ["--quick", "--warmup", "1", "--iters", "3"]

    t0 = time.monotonic()
    argv = ["tune", args.suite, *common, "--min-gain", str(args.min_gain), "--time-limit", str(args.tune_seconds),
            "--out", args.out, "--report", tune_report]
    if not args.quick:
        argv += ["--models", *args.models, "--tokens", str(args.tokens)]
    if args.backends:
        argv += ["--backends", *args.backends]
    if args.granularity:
        argv += ["--granularity", *args.granularity]
    if args.include_reference:
        argv.append("--include-reference")
    print("turbo " + " ".join(argv), flush=True)
    rc_tune = turbo(argv)
    t1 = time.monotonic()
    print(f"tuning took {t1 - t0:.0f} s", flush=True)
    if rc_tune != 0:
        print(f"tune_gemm_h200: turbo tune exited {rc_tune}", file=sys.stderr)
        if rc_tune != 1 or not os.path.exists(args.out):
            return 1

    argv = ["tune", "--check", args.out, *common, "--time-limit", str(args.check_seconds), "--report", check_report]
    print("turbo " + " ".join(argv), flush=True)
    rc_check = turbo(argv)
    print(f"check took {time.monotonic() - t1:.0f} s", flush=True)

    rows = json.load(open(tune_report))
    done = [r for r in rows if r["status"] == "ok"]
    won = sorted(r["tflops"][r["backend"]] for r in done if r.get("tflops"))
    if won:
        print(f"\nTFLOP/s of the chosen kernels: min {won[0]:.4g}, median {won[len(won) // 2]:.4g}, "
              f"max {won[-1]:.4g} (sm90 bf16 peak 989)")
    gains = [g for r in done for g in r["config_gain"].values()]
    print(f"\nsummary: {len(done)}/{len(rows)} shapes tuned; a kernel config kept for {len(gains)}", flush=True)
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
    invalid = [r for r in rows if r["status"].startswith("invalid")]
    if invalid or rc_tune != 0 or rc_check != 0:
        print(f"do not ship it: {len(invalid)} shapes invalid, turbo tune exited {rc_tune}, the check {rc_check}")
        return 1
    print("ship it as packages/<backend package>/src/<module>/tuning_db/sm90.json")
    return 0


def preflight() -> bool:
    """``torch.matmul`` at 8192^3 bf16 NT through the campaign's timer: a plausible TFLOP/s, or False."""
    import torch

    from turbo_core.dispatch.specs.gemm import GemmArgs
    from turbo_core.tuning.campaign import measure_us

    g = torch.Generator(device="cuda").manual_seed(0)
    n = 8192
    sets = [GemmArgs(torch.randn(n, n, device="cuda", generator=g).bfloat16(),
                     torch.randn(n, n, device="cuda", generator=g).bfloat16(), False, True) for _ in range(2)]
    us = measure_us(lambda a: torch.matmul(a.a, a.b.t()), sets, device="cuda", warmup=5, iters=20)
    tf = 2 * n**3 / (us * 1e-6) / 1e12
    ok = 100 <= tf <= 989
    print(f"preflight: torch.matmul 8192^3 bf16 NT by the campaign's timer: {us:.1f} us = {tf:.0f} TFLOP/s "
          f"({'plausible' if ok else 'IMPLAUSIBLE: the timer is broken, stopping'})", flush=True)
    del sets
    torch.cuda.empty_cache()
    return ok


if __name__ == "__main__":
    sys.exit(main())
