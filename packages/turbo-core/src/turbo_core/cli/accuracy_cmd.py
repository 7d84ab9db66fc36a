"""``turbo accuracy [--quick] [--families ...] [--out FILE] [--markdown FILE] ...``: every available
backend against float64 math, with the pass/fail gates of the tests (``turbo_core.testing.numerics``).
Exit status 1 when any row fails its gate or when no backend ran a case (the message then names each
installed backend that cannot run here and why: Triton on a CPU needs ``TRITON_INTERPRET=1``), 2 on bad
options."""

from __future__ import annotations

import sys

import torch
from rich.console import Console
from rich.progress import Progress

from turbo_core.accuracy import build_cases, run_cases
from turbo_core.accuracy.cases import FAMILIES, FORMATS
from turbo_core.accuracy.report import failures, markdown, print_table, write_json
from turbo_core.backend import normalize_backend_name
from turbo_core.bench.runner import environment
from turbo_core.cli.inventory import why_none_ran


def add_parser(sub) -> None:
    p = sub.add_parser("accuracy", help="compare every backend with float64 math: SNR, max abs/rel error, gates")
    p.add_argument("--quick", action="store_true", help="tiny shapes; runs on the CPU in seconds")
    p.add_argument("--families", nargs="*", choices=FAMILIES, help="op families (default all)")
    p.add_argument("--formats", nargs="*", choices=FORMATS, help="FP8 formats (default all)")
    p.add_argument("--models", nargs="*",
                   help="models of the bench shape tables (default llama3.1-8b qwen3-30b-a3b; 'all' for every one)")
    p.add_argument("--tokens", type=int, default=None, help="tokens per micro-batch (default 4096; --quick 32)")
    p.add_argument("--backends", nargs="*", help="restrict to these backends (e.g. TRITON HIPBLASLT)")
    p.add_argument("--include-reference", action="store_true", help="also check the TORCH reference backend")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when present (cpu with --quick)")
    p.add_argument("--out", help="write JSON (environment, summary, rows) to this file")
    p.add_argument("--markdown", help="write a markdown table to this file")


def run(args) -> int:
    console = Console(stderr=True)
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    if args.tokens is not None and args.tokens < 1:
        console.print(f"turbo accuracy: --tokens: expected a positive count, got {args.tokens}")
        return 2
    try:
        cases = build_cases(quick=args.quick, families=args.families, models=args.models, tokens=args.tokens,
                            formats=args.formats)
        backends = [normalize_backend_name(b) for b in args.backends] if args.backends else None
    except ValueError as exc:
        console.print(f"turbo accuracy: {exc}")
        return 2
    with Progress(console=console, transient=True) as progress:
        rows = run_cases(cases, device=device, include_reference=args.include_reference, backends=backends,
                         progress=progress)
    print_table(rows, Console(soft_wrap=True))
    if args.out:
        env = environment(device)
        env["argv"] = ["turbo", *sys.argv[1:]]
        write_json(args.out, rows, env)
        console.print(f"wrote {args.out}")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown(rows))
        console.print(f"wrote {args.markdown}")
    if not any(r["status"] == "ok" for r in rows):
        for line in why_none_ran("turbo accuracy"):
            console.print(line, markup=False, soft_wrap=True)
        return 1
    return 1 if failures(rows) else 0
