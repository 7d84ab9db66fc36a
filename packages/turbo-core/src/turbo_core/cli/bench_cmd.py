"""``turbo bench [suite] [--quick] [--out FILE] ...`` and ``turbo bench report [FILE ...] [--out-dir DIR]``."""

from __future__ import annotations

import importlib
import inspect
import json

from turbo_core.bench.suites import SUITES

#: Suites named with a hyphen on the command line (module ``turbo_core.bench.suites.<name with _>``).
FP8_SUITES = ("gemm-fp8", "grouped-gemm-fp8")
#: Options only some suites take: (option dest, the suite's keyword argument).
SUITE_OPTIONS = (("granularities", "granularities"), ("fp8_format", "fp8_format"), ("passes", "passes"),
                 ("operands", "operands"))
#: The suites that take each option (for the error naming an option a suite lacks).
OPTION_SUITES = {"granularities": FP8_SUITES, "fp8_format": FP8_SUITES, "passes": (*FP8_SUITES, "attention"),
                 "operands": ("gemm-fp8",)}
#: ``--passes`` choices: GEMM passes (FP8 suites) and attention passes.
GEMM_PASSES = ("fwd", "dgrad", "wgrad")
#: ``turbo bench report``: the result files read and the directory written when none are named.
REPORT_INPUTS = "benchmarks/results/*.json"
REPORT_DIR = "benchmarks/report"


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark suites: turbo backends beside the PyTorch baselines")
    p.add_argument("suite", nargs="?", default="gemm", choices=list(dict.fromkeys([*SUITES, *FP8_SUITES, "report"])),
                   help="which suite (default gemm); report: markdown tables and plots from result files")
    p.add_argument("files", nargs="*", metavar="FILE",
                   help=f"report: the JSON result files (default {REPORT_INPUTS})")
    p.add_argument("--out-dir", default=REPORT_DIR, help=f"report: where to write (default {REPORT_DIR})")
    p.add_argument("--no-plots", action="store_true", help="report: markdown only")
    p.add_argument("--quick", action="store_true", help="tiny shapes; runs on the CPU for smoke tests")
    p.add_argument("--out", help="write JSON (environment + rows) to this file")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens per micro-batch (default: the suite's; 8192 for GEMMs, 16384 for norm/activation; "
                        "moe: 4096 and 16384; attention: batch x seq, 16384)")
    p.add_argument("--models", nargs="*", help="restrict to these models (default: all of the suite)")
    p.add_argument("--providers", nargs="*",
                   help="restrict to these providers, e.g. torch turbo:TRITON (FP8 suites: bf16:torch.matmul, "
                        "torch._scaled_mm, F.scaled_mm, bf16:torch._grouped_mm, torch._scaled_grouped_mm; attention: "
                        "sdpa:cudnn sdpa:flash turbo:TRITON turbo:TRITON:deterministic; norm/activation: liger liger:gate_up "
                        "when liger-kernel is importable)")
    p.add_argument("--include-reference", action="store_true", help="also time the TORCH reference backend")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1,
                   help="gemm, grouped_gemm, FP8 GEMM suites: time each case's providers this many times in turn "
                        "(A B, A B, ...) and report the median round, so GPU clock drift hits every provider alike")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when present (cpu with --quick)")
    p.add_argument("--granularities", nargs="*",
                   help="FP8 suites: tensorwise rowwise blockwise mx (default: all that this torch supports)")
    p.add_argument("--format", dest="fp8_format", choices=["E4M3", "E5M2", "HYBRID"],
                   help="FP8 suites: operand format (default E4M3; HYBRID: gradients E5M2)")
    p.add_argument("--passes", nargs="*", choices=list(dict.fromkeys([*GEMM_PASSES, "bwd"])),
                   help="FP8 suites (fwd dgrad wgrad) and attention (fwd bwd): restrict to these passes (default all)")
    p.add_argument("--operands", choices=["pass", "k-major"],
                   help="gemm-fp8: the turbo providers' operand storage: the pass's own (default; backends that "
                        "need K-major operands time their re-layout) or the baseline's K-major tensors (GEMM alone)")


def suite_module(name: str):
    return importlib.import_module(f"turbo_core.bench.suites.{name.replace('-', '_')}")


def suite_options(args, suite) -> dict:
    """The suite-specific options given on the command line; an error naming an option the suite lacks."""
    params = inspect.signature(suite.run).parameters
    extra = {}
    for dest, kw in SUITE_OPTIONS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if kw not in params:
            flag = "--format" if dest == "fp8_format" else f"--{dest}"
            raise ValueError(f"{flag} applies to {', '.join(OPTION_SUITES[dest])}, not to {args.suite}")
        if kw == "granularities":
            suite.granularities_of(value)  # names checked before any case runs
        if kw == "passes":
            allowed = getattr(suite, "PASSES", GEMM_PASSES)
            bad = [v for v in value if v not in allowed]
            if bad:
                raise ValueError(f"--passes: {args.suite} has no pass {', '.join(bad)} (it has {', '.join(allowed)})")
        extra[kw] = value
    return extra


def run_report(args) -> int:
    """``turbo bench report``: README.md, one page per suite and, with matplotlib, the plots."""
    import glob

    from rich.console import Console

    from turbo_core.bench.markdown import write_report

    console = Console(stderr=True)
    files = args.files or sorted(glob.glob(REPORT_INPUTS))
    if not files:
        console.print(f"turbo bench report: no result files given and none match {REPORT_INPUTS}", markup=False)
        return 2
    try:
        written = write_report(files, args.out_dir, plots=not args.no_plots)
    except ValueError as exc:
        console.print(f"turbo bench report: {exc}", soft_wrap=True, markup=False)
        return 2
    for src in written.sources:
        if src.skipped:
            console.print(f"skipped {src.path}: {src.skipped}", soft_wrap=True, markup=False)
    if written.plots_skipped:
        console.print(f"plots skipped: {written.plots_skipped}", soft_wrap=True, markup=False)
    for path in written.files:
        console.print(f"wrote {path}", soft_wrap=True, markup=False)
    return 0


def run(args) -> int:
    import sys

    if args.suite == "report":
        return run_report(args)
    if args.files:
        print(f"turbo bench {args.suite}: unexpected arguments {' '.join(args.files)} (files are for `turbo bench report`)",
              file=sys.stderr)
        return 2

    import torch
    from rich.console import Console
    from rich.progress import Progress

    from turbo_core.bench import runner

    device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    iters, warmup = (3, 1) if args.quick else (args.iters, args.warmup)
    if args.rounds < 1:
        print(f"turbo bench: --rounds: expected a count >= 1, got {args.rounds}", file=sys.stderr)
        return 2
    runner.ROUNDS = args.rounds
    console = Console(stderr=True)
    env = runner.environment(device)
    env["argv"] = ["turbo", *sys.argv[1:]]
    suite = suite_module(args.suite)
    try:
        extra = suite_options(args, suite)
    except ValueError as exc:
        console.print(f"turbo bench: {exc}")
        return 2
    with Progress(console=console, transient=True) as progress:
        rows = suite.run(quick=args.quick, tokens=args.tokens, models=args.models, providers=args.providers,
                         include_reference=args.include_reference, warmup=warmup, iters=iters,
                         device=device, progress=progress, **extra)
    from turbo_core.bench.report import print_tables, summary

    getattr(suite, "print_table", print_tables)(rows, Console())
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"environment": env, "rows": rows, "summary": summary(rows)}, fh, indent=1)
        console.print(f"wrote {args.out}")
    return 0
