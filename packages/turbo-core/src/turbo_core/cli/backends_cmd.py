"""``turbo backends [--json]``."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from turbo_core.cli.inventory import backend_rows
from turbo_core.plugins.host import get_host


def add_parser(sub) -> None:
    p = sub.add_parser("backends", help="list every backend: package, version, availability, primitives")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args) -> int:
    rows = backend_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="turbo backends", show_lines=True)
    for col in ("backend", "package", "version", "status", "primitives"):
        table.add_column(col, overflow="fold")
    for row in rows:
        status = "[green]available[/green]" if row["available"] else f"[red]unavailable[/red]: {row['reason']}"
        prims = "\n".join(
            f"{p} ({d['precision']}{': ' + ', '.join(d['variants']) if d['variants'] else ''})"
            for p, d in row["primitives"].items()
        )
        if row["notes"]:
            prims = f"{prims}\n[dim]{row['notes']}[/dim]" if prims else f"[dim]{row['notes']}[/dim]"
        prims = prims or "(no kernels registered)"
        table.add_row(row["name"], row["package"], row["version"], status, prims)
    console = Console()
    console.print(table)
    failed = get_host().failures()
    for rec in failed:
        console.print(f"[yellow]plugin {rec.name} ({rec.source}) failed at {rec.stage}: {rec.error}[/yellow]")
    if failed:
        console.print("run [bold]turbo doctor[/bold] for details")
    return 0
