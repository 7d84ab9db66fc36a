"""``turbo tune gemm|gemm-fp8 [--quick] [--shapes ...] [--out FILE] ...`` and ``turbo tune --check FILE``.

``turbo tune gemm`` searches the backend choice and, for backends that offer one (TRITON's tile
configs, HIPBLASLT's algorithm indices), a kernel-config space for each shape of the gemm suite,
and writes the winners to a tuning database
(``turbo_core.tuning``; an existing ``--out`` file is merged into, the new results winning). Use it
with ``TURBO_TUNING_DB=FILE``. ``turbo tune --check FILE`` re-times the stored choices against what
the heuristics pick and exits 1 on a regression. On the CPU, ``--quick`` tunes tiny shapes on TORCH
and TRITON (with ``TRITON_INTERPRET=1``). Exit status 2 on bad options.

A shape whose fastest time implies more than the device can do (``turbo_core.tuning.plausible``:
the arch's peak, or twice the run's best baseline throughput) is reported ``invalid`` and not
written; ``turbo tune`` then exits 1 (after writing the valid shapes), as ``--check`` does.

``turbo tune gemm-fp8`` does the same for ``gemm_fp8`` at the granularities of ``--granularity``
(default TENSORWISE, ROWWISE and BLOCKWISE; operands quantized as the FP8 Linear quantizes them,
bf16 results), timing the GEMM only, on the same quantized operands for every candidate.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
from rich.console import Console
from rich.table import Table

from turbo_core import __version__
from turbo_core.backend import normalize_backend_name
from turbo_core.bench.runner import available_backends, environment
from turbo_core.low_precision import as_format
from turbo_core.platform import platform_of
from turbo_core.tuning import keys
from turbo_core.tuning.db import TuningDB
from turbo_core.tuning.keys import arch_of

SUITES = ("gemm", "gemm-fp8")
PRIMITIVES = {"gemm": "gemm", "gemm-fp8": "gemm_fp8"}


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="offline tuning: backend choice and kernel configs per shape -> a tuning database")
    p.add_argument("suite", nargs="?", choices=SUITES,
                   help="what to tune (gemm: the gemm suite's shapes; gemm-fp8: the same shapes as FP8 GEMMs)")
    p.add_argument("--check", metavar="FILE", help="re-time FILE's stored choices against the heuristics")
    p.add_argument("--quick", action="store_true", help="tiny shapes, few configs and iterations (CPU smoke runs)")
    p.add_argument("--shapes", nargs="*", metavar="MxNxK[:LAYOUT]",
                   help="tune these shapes instead of the suite's (layout NN/NT/TN/TT, default NT)")
    p.add_argument("--models", nargs="*", help="restrict the suite to these models")
    p.add_argument("--tokens", type=int, default=None, help="tokens per micro-batch (default 8192; --quick 32)")
    p.add_argument("--passes", nargs="*", choices=["fwd", "dgrad", "wgrad"],
                   help="only the suite's shapes of these passes (default all)")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16", help="gemm: the operand dtype")
    p.add_argument("--granularity", nargs="*", metavar="G",
                   help="gemm-fp8: tensorwise, rowwise, blockwise (default: all three)")
    p.add_argument("--format", default="E4M3", choices=["E4M3", "E5M2", "HYBRID"],
                   help="gemm-fp8: the FP8 format (HYBRID: gradients E5M2)")
    p.add_argument("--backends", nargs="*", help="candidate backends (default: every available one; TORCH on the "
                                                 "CPU or with --include-reference)")
    p.add_argument("--include-reference", action="store_true", help="also time the TORCH reference backend on a GPU")
    p.add_argument("--no-configs", action="store_true", help="tune the backend choice only")
    p.add_argument("--max-configs", type=int, default=None, help="try at most this many configs per backend")
    p.add_argument("--min-gain", type=float, default=0.01,
                   help="keep a tuned config only if it beats the heuristics by this fraction (default 0.01)")
    p.add_argument("--confirm", type=int, default=None,
                   help="rounds of the confirmation step: a winning config or backend is re-timed against what it "
                        "beat, alternating, and kept only if it still wins (default 2; --quick 0; 0: off)")
    p.add_argument("--threshold", type=float, default=0.03,
                   help="--check: a stored choice slower than the heuristics by more than this fraction regresses")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per timing (default 5; --quick 1)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per timing (default 20; --quick 3)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="seconds: start no new shape after this (the finished ones are written)")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when present (cpu with --quick)")
    p.add_argument("--out", help="the database to write (default turbo-tuning-<arch>.json; merged if it exists)")
    p.add_argument("--report", help="write the rows (tune or check) as JSON to this file")


def _write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def run(args) -> int:
    console = Console(stderr=True)
    if args.suite is None and not args.check:
        console.print("turbo tune: give what to tune (gemm, gemm-fp8) or --check FILE")
        return 2
    if args.suite is not None and args.check:
        console.print("turbo tune: --check re-times an existing database; do not also name a suite")
        return 2
    for name in ("warmup", "iters", "max_configs", "tokens", "confirm"):
        v = getattr(args, name)
        low = 0 if name in ("warmup", "confirm") else 1
        if v is not None and v < low:
            want = "a count >= 0" if low == 0 else "a positive count"
            console.print(f"turbo tune: --{name.replace('_', '-')}: expected {want}, got {v}")
            return 2
    if not 0 <= args.min_gain < 1 or not args.threshold >= 0:
        console.print(f"turbo tune: --min-gain must be in [0, 1) and --threshold >= 0 "
                      f"(got {args.min_gain}, {args.threshold})")
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        console.print("turbo tune: --device cuda: no GPU is visible")
        return 2
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    iters = args.iters if args.iters is not None else (3 if args.quick else 20)
    if args.check:
        return _run_check(args, console, device, warmup, iters)
    return _run_tune(args, console, device, warmup, iters)


def _arch(device: str) -> str:

    return arch_of(platform_of(torch.device(device)))


def _meta(device: str, arch: str) -> dict:

    return {"arch": arch, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": ["turbo", *sys.argv[1:]], "turbo_core": __version__, "environment": environment(device)}


def _run_tune(args, console, device: str, warmup: int, iters: int) -> int:
    from turbo_core.bench import campaign  # the benchmark suites and every op: only `turbo tune` pays



    arch = _arch(device)
    primitive = PRIMITIVES[args.suite]
    try:
        if args.suite == "gemm-fp8":
            cases = campaign.gemm_fp8_cases(arch=arch, granularities=args.granularity,
                                            fmt=as_format(args.format, "--format"), device=device, quick=args.quick,
                                            shapes=args.shapes, models=args.models, tokens=args.tokens,
                                            passes=args.passes)
        else:
            if args.granularity:
                raise ValueError("--granularity: only for gemm-fp8")
            cases = campaign.gemm_cases(arch=arch, dtype=keys.dtype_of(args.dtype), device=device, quick=args.quick,
                                        shapes=args.shapes, models=args.models, tokens=args.tokens,
                                        passes=args.passes)
        available = available_backends(primitive, include_reference=device == "cpu" or args.include_reference)
        if args.backends:
            backends = [normalize_backend_name(b, argument="--backends") for b in args.backends]
            missing = [b for b in backends if b not in available_backends(primitive)]
            if missing:
                raise ValueError(f"--backends: {', '.join(missing)} not available here "
                                 f"(available: {', '.join(available_backends(primitive)) or 'none'})")
        else:
            backends = available
    except ValueError as exc:
        console.print(f"turbo tune: {exc}")
        return 2
    if not cases:
        console.print("turbo tune: no shapes (unknown --models?)")
        return 2
    out = args.out or f"turbo-tuning-{arch}.json"
    console.print(f"turbo tune {args.suite}: {len(cases)} shapes on {arch}, backends {', '.join(backends) or 'none'}, "
                  f"{warmup}+{iters} calls per timing")
    db, rows = campaign.tune(
        cases, backends=backends, device=device, warmup=warmup, iters=iters, configs=not args.no_configs,
        max_configs=args.max_configs if args.max_configs is not None else (2 if args.quick else None),
        min_gain=args.min_gain, time_limit=args.time_limit, progress=lambda label: console.print(f"  {label}"),
        confirm=args.confirm if args.confirm is not None else (0 if args.quick else 2),
    )
    table = Table(title=f"turbo tune {args.suite} ({arch})")
    for col in ("shape", "heuristic", "tuned", "times (us)", "vs heuristic", "config gain", "status"):
        table.add_column(col)
    for r in rows:
        tf = r.tflops
        times = ", ".join(f"{b} {_us(t)}" + (f" ({tf[b]:,.0f} TFLOP/s)" if b in tf else "")
                          for b, t in r.times_us.items())
        gain = ", ".join(f"{b} {g:.3f}x" for b, g in r.config_gain.items()) or "-"
        table.add_row(r.label, r.heuristic or "-", r.backend or "-", times or "-",
                      f"{r.speedup:.3f}x" if r.speedup else "-", gain, r.status)
    Console().print(table)
    if args.report:
        _write_json(args.report, [_tune_row_json(r) for r in rows])
    invalid = [r for r in rows if r.status.startswith("invalid")]
    for r in invalid:
        console.print(f"turbo tune: {r.label}: {r.status}")
    if not len(db):
        console.print("turbo tune: nothing was tuned" + (f" ({len(invalid)} shapes invalid)" if invalid else ""))
        return 1
    merged = TuningDB()
    if os.path.exists(out):
        try:
            merged = TuningDB.load(out)
        except (OSError, ValueError) as exc:
            console.print(f"turbo tune: --out: cannot merge into {out}: {exc}")
            return 2
    merged.merge(db)
    merged.save(out, _meta(device, arch))
    console.print(f"wrote {len(db)} tuned shapes to {out} ({len(merged)} in the file); "
                  f"use it with TURBO_TUNING_DB={out}")
    if invalid:
        console.print(f"turbo tune: {len(invalid)} shapes invalid (timing fault), not written")
        return 1
    return 0


def _tune_row_json(r) -> dict:
    return {"shape": r.label, "key": r.key.to_json(), "status": r.status, "heuristic": r.heuristic,
            "backend": r.backend, "times_us": r.times_us, "heuristic_time_us": r.heuristic_time_us,
            "speedup": r.speedup, "config_gain": r.config_gain, "rejected": r.rejected, "flops": r.flops,
            "tflops": r.tflops, "baseline_us": r.baseline_us,
            "fastest": None if r.fastest is None else {"what": r.fastest[0], "us": r.fastest[1]}}


def _run_check(args, console, device: str, warmup: int, iters: int) -> int:
    from turbo_core.bench import campaign  # the benchmark suites and every op: only `turbo tune` pays


    try:
        db = TuningDB.load(args.check)
    except (OSError, ValueError) as exc:
        console.print(f"turbo tune: --check: {exc}")
        return 2
    rows = campaign.check(db, device=device, warmup=warmup, iters=iters, threshold=args.threshold,
                          time_limit=args.time_limit, progress=lambda label: console.print(f"  {label}"))
    table = Table(title=f"turbo tune --check {args.check}")
    for col in ("entry", "stored", "heuristic", "stored (us)", "heuristic (us)", "ratio", "status"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.label, r.what, r.heuristic or "-", _us(r.stored_us), _us(r.heuristic_us),
                      f"{r.ratio:.3f}x" if r.ratio else "-", r.status)
    Console().print(table)
    if args.report:
        _write_json(args.report, [{"entry": r.label, "stored": r.what, "status": r.status, "stored_us": r.stored_us,
                                   "heuristic_us": r.heuristic_us, "heuristic": r.heuristic, "ratio": r.ratio,
                                   "flops": r.flops}
                                  for r in rows])
    bad = [r for r in rows if r.status in ("regression", "wrong") or r.status.startswith(("error", "invalid"))]
    checked = [r for r in rows if not r.status.startswith("skipped")]
    invalid = [r for r in rows if r.status.startswith("invalid")]
    for r in invalid:
        console.print(f"turbo tune --check: {r.label} {r.what}: {r.status}")
    console.print(f"turbo tune --check: {len(checked)} checked, {len(bad)} regressed, wrong or invalid "
                  f"({len(invalid)} invalid), {sum(r.status == 'stale' for r in rows)} stale, "
                  f"{len(rows) - len(checked)} skipped")
    return 1 if bad else 0
