"""``turbo bench <suite> [--quick] [--record [DIR]] [--out FILE] ...`` runs a suite (``train --hf``:
the Hugging Face models of :mod:`turbo_core.bench.hf_train`);
``turbo bench report [--data DIR] [--out FILE]`` writes the performance page from the dataset.

A suite run exits 1, after its table and files, when no turbo provider measured a case (the message
names each installed backend that cannot run here and why: Triton on a CPU needs ``TRITON_INTERPRET=1``);
``--providers`` without a ``turbo:`` provider asks for none."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import sys

from turbo_core.bench.suites import SUITES

#: Suites named with a hyphen on the command line (module ``turbo_core.bench.suites.<name with _>``).
FP8_SUITES = ("gemm-fp8", "grouped-gemm-fp8")
#: Options only some suites take: (option dest, the suite's keyword argument).
SUITE_OPTIONS = (("granularities", "granularities"), ("fp8_format", "fp8_format"), ("passes", "passes"),
                 ("operands", "operands"), ("profile_top", "profile_top"), ("world", "world"),
                 ("micro_batches", "micro_batches"))
#: The suites that start their own ranks (``--world``).
RANK_SUITES = ("moe-dispatch", "async-tp", "cp-attention")
#: The suites that take each option (for the error naming an option a suite lacks).
OPTION_SUITES = {"granularities": FP8_SUITES, "fp8_format": FP8_SUITES,
                 "passes": (*FP8_SUITES, "attention", "cp-attention"), "operands": ("gemm-fp8",),
                 "profile_top": ("host", "train"), "world": RANK_SUITES, "micro_batches": ("train",)}
#: ``--passes`` choices: GEMM passes (FP8 suites) and attention passes.
GEMM_PASSES = ("fwd", "dgrad", "wgrad")
#: Defaults shared with :mod:`turbo_core.bench.dataset` and :mod:`turbo_core.bench.markdown` (kept
#: as literals here so that ``turbo --help`` does not import torch).
DATA_DIR = "benchmarks/data"
REPORT_OUT = "docs/performance.md"


#: Option dest -> (its flag, whether it is a switch), filled by :func:`add_parser`.
FLAGS: dict[str, tuple[str, bool]] = {}


def _option(p: argparse.ArgumentParser, flag: str, **kw) -> None:
    action = p.add_argument(flag, **kw)
    FLAGS[action.dest] = (flag, kw.get("action") == "store_true")


#: Every name the ``suite`` argument takes, as the dataset and the docs spell it.
SUITE_NAMES = tuple(dict.fromkeys([*SUITES, *FP8_SUITES, "report"]))


def suite_name(text: str) -> str:
    """The suite ``text`` names, with ``-`` and ``_`` interchangeable (``grouped-gemm`` is
    ``grouped_gemm``, ``linear_fp8`` is ``linear-fp8``); anything else is returned as it is, for
    argparse to refuse with the list of choices."""
    spelled = {name.replace("_", "-"): name for name in SUITE_NAMES}
    return spelled.get(text.replace("_", "-"), text)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark suites: turbo backends beside the PyTorch baselines")
    p.add_argument("suite", nargs="?", default="gemm", type=suite_name, choices=SUITE_NAMES,
                   help="which suite (default gemm; '-' and '_' are interchangeable); report: docs/performance.md "
                        "from the dataset")
    _option(p, "--quick", action="store_true", help="tiny shapes; runs on the CPU for smoke tests")
    _option(p, "--record", nargs="?", const=DATA_DIR, metavar="DIR",
               help=f"append the rows, with the commit, date, device and versions, to DIR/<suite>.jsonl "
                    f"(default DIR: {DATA_DIR})")
    _option(p, "--out", metavar="FILE",
               help=f"a suite: write JSON (provenance + rows + summary) to FILE; report: the page to write "
                    f"(default {REPORT_OUT}; its plots go to the folder of the same name)")
    _option(p, "--data", default=DATA_DIR, metavar="DIR", help=f"report: the dataset to read (default {DATA_DIR})")
    _option(p, "--no-plots", action="store_true", help="report: markdown only")
    _option(p, "--tokens", type=int, nargs="+", default=None, metavar="N",
               help="tokens per micro-batch, one run of the suite per value (default: the suite's; 8192 for "
                    "GEMMs, 16384 for norm/activation; moe: 4096 and 16384; attention: batch x seq, 16384; train: the "
                    "sequence, batch 1; cp-attention: the total sequence over all ranks, batch 1, 32k 64k 128k)")
    _option(p, "--models", nargs="*", help="restrict to these models (default: all of the suite)")
    _option(p, "--providers", nargs="*",
               help="restrict to these providers, e.g. torch turbo:TRITON (FP8 suites: bf16:torch.matmul, "
                    "torch._scaled_mm, F.scaled_mm, bf16:torch._grouped_mm, torch._scaled_grouped_mm; attention: "
                    "sdpa:cudnn sdpa:flash turbo:TRITON turbo:TRITON:deterministic; norm/activation: liger liger:gate_up "
                    "when liger-kernel is importable)")
    _option(p, "--hf", action="store_true",
               help="train: Hugging Face Transformers models (unpatched, Liger-Kernel's patch, turbo's apply_turbo) "
                    "instead of the demo decoder; needs turbo-core[hf]")
    _option(p, "--include-reference", action="store_true", help="also time the TORCH reference backend")
    _option(p, "--autograd-threads", choices=["on", "off"],
               help="run every backward of the suite on the autograd engine's device threads (on: torch's "
                    "default) or on the calling thread (off: torch.autograd.set_multithreading_enabled(False)); "
                    "rows then carry autograd_threads (default: torch's setting, unrecorded)")
    _option(p, "--warmup", type=int, default=10)
    _option(p, "--rounds", type=int, default=1,
               help="gemm, grouped_gemm, FP8 GEMM suites: time each case's providers this many times in turn "
                    "(A B, A B, ...) and report the median round, so GPU clock drift hits every provider alike")
    _option(p, "--iters", type=int, default=50)
    _option(p, "--device", choices=["cuda", "cpu"], help="default: cuda when present (cpu with --quick)")
    _option(p, "--granularities", nargs="*",
               help="FP8 suites: tensorwise rowwise blockwise mx (default: all that this torch supports)")
    _option(p, "--format", dest="fp8_format", choices=["E4M3", "E5M2", "HYBRID"],
               help="FP8 suites: operand format (default E4M3; HYBRID: gradients E5M2)")
    _option(p, "--passes", nargs="*", choices=list(dict.fromkeys([*GEMM_PASSES, "bwd"])),
               help="FP8 suites (fwd dgrad wgrad), attention and cp-attention (fwd bwd): restrict to these passes "
                    "(default all)")
    _option(p, "--operands", choices=["pass", "k-major"],
               help="gemm-fp8: the turbo providers' operand storage: the pass's own (default; backends that "
                    "need K-major operands time their re-layout) or the baseline's K-major tensors (GEMM alone)")
    _option(p, "--profile-top", type=int, metavar="N",
               help="host: also profile each turbo call with cProfile and record its N functions of most own "
                    "time (rows' host_profile: function, us per call under the profiler); train: one more step "
                    "of each provider under torch.profiler, its N kernels of most device time (rows' profile)")
    _option(p, "--micro-batches", type=int, metavar="N",
               help="train: N forward + backward passes (gradient accumulation) before each optimizer step, every "
                    "timed step and loss-run step alike (default 1: one micro-batch a step)")
    _option(p, "--world", type=int, metavar="N",
               help=f"{', '.join(RANK_SUITES)}: the number of ranks the suite starts, one GPU each (default: the "
                    "visible GPUs, at most 8; 2 gloo ranks on the CPU)")
    p.set_defaults(bench_defaults={dest: p.get_default(dest) for dest in FLAGS})


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
            flag = FLAGS[dest][0]
            raise ValueError(f"{flag} applies to {', '.join(OPTION_SUITES[dest])}, not to {args.suite}")
        if kw in ("profile_top", "micro_batches") and value < 1:
            raise ValueError(f"{FLAGS[dest][0]}: expected a count >= 1, got {value}")
        if kw == "granularities":
            suite.granularities_of(value)  # names checked before any case runs
        if kw == "passes":
            allowed = getattr(suite, "PASSES", GEMM_PASSES)
            bad = [v for v in value if v not in allowed]
            if bad:
                raise ValueError(f"--passes: {args.suite} has no pass {', '.join(bad)} (it has {', '.join(allowed)})")
        extra[kw] = value
    return extra


def command_line(args) -> list[str]:
    """The command, rebuilt from the parsed options that differ from their defaults (what the rows
    were measured with, whichever way the command was called)."""
    words = ["turbo", "bench", args.suite]
    for dest, (flag, switch) in FLAGS.items():
        value = getattr(args, dest, None)
        if value is None or value == args.bench_defaults.get(dest):
            continue
        if switch:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return words


def run_report(args) -> int:
    """``turbo bench report``: the performance page (and, with matplotlib, its plots)."""
    from rich.console import Console

    from turbo_core.bench.markdown import write_performance

    console = Console(stderr=True)
    try:
        written = write_performance(args.data, args.out or REPORT_OUT, plots_wanted=not args.no_plots)
    except ValueError as exc:
        console.print(f"turbo bench report: {exc}", soft_wrap=True, markup=False)
        return 2
    if written.plots_skipped:
        console.print(f"plots skipped: {written.plots_skipped}", soft_wrap=True, markup=False)
    for path in written.files:
        console.print(f"wrote {path}", soft_wrap=True, markup=False)
    return 0


def run(args) -> int:
    if args.suite == "report":
        return run_report(args)
    if args.rounds < 1:
        print(f"turbo bench: --rounds: expected a count >= 1, got {args.rounds}", file=sys.stderr)
        return 2

    import torch
    from rich.console import Console
    from rich.progress import Progress

    from turbo_core.bench import dataset, runner
    from turbo_core.bench.console import print_tables, summary

    device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    iters, warmup = (3, 1) if args.quick else (args.iters, args.warmup)
    runner.ROUNDS = args.rounds
    console = Console(stderr=True)
    if args.hf and args.suite != "train":
        console.print(f"turbo bench: --hf applies to train, not to {args.suite}")
        return 2
    suite = importlib.import_module("turbo_core.bench.hf_train") if args.hf else suite_module(args.suite)
    try:
        extra = suite_options(args, suite)
    except ValueError as exc:
        console.print(f"turbo bench: {exc}")
        return 2
    if "world" in extra:
        from turbo_core.bench.ranks import world_error

        why = world_error(device, extra["world"])
        if why is not None:
            console.print(f"turbo bench: --world {extra['world']}: {why}", soft_wrap=True, markup=False)
            return 2
    rows: list[dict] = []
    threads = contextlib.nullcontext()
    if args.autograd_threads is not None:
        threads = torch.autograd.set_multithreading_enabled(args.autograd_threads == "on")
    with Progress(console=console, transient=True) as progress, threads:
        for tokens in args.tokens or [None]:
            try:
                rows += suite.run(quick=args.quick, tokens=tokens, models=args.models, providers=args.providers,
                                  include_reference=args.include_reference, warmup=warmup, iters=iters,
                                  device=device, progress=progress, **extra)
            except ValueError as exc:  # a setting the suite refuses before any case runs
                console.print(f"turbo bench {args.suite}: {exc}", soft_wrap=True, markup=False)
                return 2
    if args.autograd_threads is not None:
        rows = [{**r, "autograd_threads": args.autograd_threads} for r in rows]
    getattr(suite, "print_table", print_tables)(rows, Console())
    if args.record is not None or args.out is not None:
        run_fields = dataset.provenance(device, command_line(args))
        if args.record is not None:
            for path in dataset.append(rows, run_fields, args.record):
                console.print(f"appended to {path} (run {run_fields['run']})", soft_wrap=True, markup=False)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump({"run": run_fields, "rows": rows, "summary": summary(rows)}, fh, indent=1)
            console.print(f"wrote {args.out}", soft_wrap=True, markup=False)
    if no_turbo_ran(rows, args.providers):
        from turbo_core.cli.inventory import why_none_ran

        for line in why_none_ran("turbo bench"):
            console.print(line, soft_wrap=True, markup=False)
        return 1
    return 0


def no_turbo_ran(rows: list[dict], providers: list[str] | None) -> bool:
    """Whether a turbo provider (``turbo:...``) was asked for, by default or by ``--providers``, and none
    measured a case."""
    asked = providers is None or any(p.startswith("turbo") for p in providers)
    return asked and not any(str(r.get("provider", "")).startswith("turbo") and r.get("status") == "ok"
                             for r in rows)

