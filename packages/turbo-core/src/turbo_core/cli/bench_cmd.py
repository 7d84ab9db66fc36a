"""``turbo bench [suite] [--quick] [--out FILE] ...``."""

from __future__ import annotations

import importlib
import json

from turbo_core.bench.suites import SUITES


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark suites: turbo backends beside the PyTorch baselines")
    p.add_argument("suite", nargs="?", default="gemm", choices=list(SUITES), help="which suite (default gemm)")
    p.add_argument("--quick", action="store_true", help="tiny shapes; runs on the CPU for smoke tests")
    p.add_argument("--out", help="write JSON (environment + rows) to this file")
    p.add_argument("--tokens", type=int, default=None,
                   help="tokens per micro-batch (default: the suite's; 8192 for GEMMs, 16384 for norm/activation)")
    p.add_argument("--models", nargs="*", help="restrict to these models (default: all of the suite)")
    p.add_argument("--providers", nargs="*", help="restrict to these providers, e.g. torch turbo:TRITON")
    p.add_argument("--include-reference", action="store_true", help="also time the TORCH reference backend")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when present (cpu with --quick)")


def run(args) -> int:
    import sys

    import torch
    from rich.console import Console
    from rich.progress import Progress

    from turbo_core.bench import runner

    device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    iters, warmup = (3, 1) if args.quick else (args.iters, args.warmup)
    console = Console(stderr=True)
    env = runner.environment(device)
    env["argv"] = ["turbo", *sys.argv[1:]]
    suite = importlib.import_module(f"turbo_core.bench.suites.{args.suite}")
    with Progress(console=console, transient=True) as progress:
        rows = suite.run(quick=args.quick, tokens=args.tokens, models=args.models, providers=args.providers,
                         include_reference=args.include_reference, warmup=warmup, iters=iters,
                         device=device, progress=progress)
    from turbo_core.bench.report import print_tables, summary

    getattr(suite, "print_table", print_tables)(rows, Console())
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"environment": env, "rows": rows, "summary": summary(rows)}, fh, indent=1)
        console.print(f"wrote {args.out}")
    return 0
