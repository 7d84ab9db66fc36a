"""``turbo bench [suite] [--quick] [--out FILE] ...``."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark suites: turbo backends beside the PyTorch baselines")
    p.add_argument("suite", nargs="?", default="gemm", choices=["gemm"], help="which suite (default gemm)")
    p.add_argument("--quick", action="store_true", help="tiny shapes; runs on the CPU for smoke tests")
    p.add_argument("--out", help="write JSON (environment + rows) to this file")
    p.add_argument("--tokens", type=int, default=8192, help="M of the forward GEMMs (tokens per micro-batch)")
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
    tokens = 32 if args.quick and args.tokens == 8192 else args.tokens
    iters, warmup = (3, 1) if args.quick else (args.iters, args.warmup)
    console = Console(stderr=True)
    env = runner.environment(device)
    env["argv"] = ["turbo", *sys.argv[1:]]
    with Progress(console=console, transient=True) as progress:
        rows = runner.run_gemm(quick=args.quick, tokens=tokens, models=args.models, providers=args.providers,
                               include_reference=args.include_reference, warmup=warmup, iters=iters,
                               device=device, progress=progress)
    from turbo_core.bench.report import print_tables, summary

    print_tables(rows, Console())
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"environment": env, "rows": rows, "summary": summary(rows)}, fh, indent=1)
        console.print(f"wrote {args.out}")
    return 0
