"""``turbo backends [--wide | --json | --matrix [--markdown] | --primitives --markdown]``.

Default: one line per backend, fitted to the terminal (80 columns in a pipe). ``--wide``: the full
table (every primitive with its precision and variants, the full reasons, the notes). ``--json``: the
rows of :func:`turbo_core.cli.inventory.backend_rows`. ``--matrix``: primitive x backend, ``x`` where
the backend registers a kernel (also where it cannot run here). ``--primitives --markdown``: the kernel
contract of every primitive, generated from the specs (what ``docs/plugin-guide.md`` holds).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from turbo_core.cli.inventory import backend_rows
from turbo_core.plugins.host import get_host

#: Width of ``--wide`` when stdout is not a terminal and COLUMNS is not set.
WIDE_PIPE_COLUMNS = 200


def add_parser(sub) -> None:
    p = sub.add_parser("backends", help="list every backend: package, version, status, primitives per family")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="the full table: every primitive, the full reasons")
    view.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    view.add_argument("--matrix", action="store_true", help="primitive x backend: which backend registers what")
    view.add_argument("--primitives", action="store_true",
                      help="with --markdown: every primitive's kernel contract (args fields, options), from the specs")
    p.add_argument("--markdown", action="store_true", help="--matrix or --primitives as a markdown table")


def _failures(console: Console) -> None:
    failed = get_host().failures()
    for rec in failed:
        console.print(f"plugin {rec.name} ({rec.source}) failed at {rec.stage}: {rec.error}", style="yellow",
                      markup=False)
    if failed:
        console.print("run [bold]turbo doctor[/bold] for details")


def _wide(rows: list[dict]) -> None:
    table = Table(title="turbo backends", show_lines=True)
    for col in ("backend", "package", "version", "status", "primitives"):
        table.add_column(col, overflow="fold")
    for row in rows:
        status = "[green]available[/green]" if row["available"] else f"[red]unavailable[/red]: {escape(row['reason'])}"
        prims = "\n".join(
            f"{p} ({d['precision']}{': ' + ', '.join(d['variants']) if d['variants'] else ''})"
            for p, d in row["primitives"].items()
        )
        if row["notes"]:
            prims = f"{prims}\n[dim]{escape(row['notes'])}[/dim]" if prims else f"[dim]{escape(row['notes'])}[/dim]"
        prims = prims or "(no kernels registered)"
        table.add_row(row["name"], row["package"], row["version"], status, prims)
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    console = Console(width=WIDE_PIPE_COLUMNS if piped else None)
    console.print(table)
    _failures(console)


def run(args) -> int:
    from turbo_core.cli import backend_table, primitive_docs

    if args.markdown and not (args.matrix or args.primitives):
        print("turbo backends: --markdown goes with --matrix or --primitives", file=sys.stderr)
        return 2
    if args.primitives:
        if not args.markdown:
            print("turbo backends: --primitives is markdown only: add --markdown", file=sys.stderr)
            return 2
        sys.stdout.write(primitive_docs.markdown())
        return 0
    rows = backend_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if args.wide:
        _wide(rows)
        return 0
    if args.matrix:
        print("\n".join(backend_table.matrix_lines(rows, markdown=args.markdown)))
        return 0
    print("\n".join(backend_table.compact_lines(rows, shutil.get_terminal_size().columns)))
    _failures(Console(stderr=True, soft_wrap=True))
    return 0
