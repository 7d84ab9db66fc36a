"""``turbo doctor [--json]``: the platform, each plugin's load status, the tuning databases in use,
notes and problems. Exit status 0 when it finds no problem, 2 when a turbo setting of the environment
is bad (the one-line error every other command stops with), 1 for any other problem (a plugin that
failed to load, an unreadable tuning database). Notes (no GPU here) are facts, not problems."""

from __future__ import annotations

import json
import os

from rich.console import Console
from rich.table import Table

from turbo_core._version import __version__
from turbo_core.cli import settings_check
from turbo_core.cli.inventory import backend_rows
from turbo_core.platform import describe_process
from turbo_core.plugins.host import get_host
from turbo_core.tuning import active


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="explain the platform and any plugin or configuration problem")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")


def collect() -> dict:
    """The report: ``settings_problems`` (bad turbo settings of the environment) are also the first
    entries of ``problems``."""
    host = get_host()
    proc = describe_process()
    env = {k: v for k, v in os.environ.items() if k.startswith(("TURBO_", "PRIMUS_TURBO_"))}
    settings = settings_check.problems()
    problems = list(settings)
    for rec in host.records:
        if rec.status == "failed":
            problems.append(f"plugin {rec.name} ({rec.source}) failed at {rec.stage}: {rec.error}")
    rows = backend_rows()
    tuning = _tuning(problems)
    notes = []
    if not proc["gpus"]:
        notes.append("no GPU: only the CPU backends (TORCH, Triton under TRITON_INTERPRET=1) can run")
    return {
        "turbo_core": __version__,
        "platform": proc,
        "plugins": [r.as_dict() for r in host.records],
        "backends": [{k: r[k] for k in ("name", "package", "version", "available", "reason")} for r in rows],
        "environment": env,
        "tuning": tuning,
        "notes": notes,
        "settings_problems": settings,
        "problems": problems,
    }


def exit_status(report: dict) -> int:
    """2 for a bad setting, 1 for any other problem, 0 for none."""
    if report["settings_problems"]:
        return 2
    return 1 if report["problems"] else 0


def _tuning(problems: list[str]) -> dict:
    """The tuning databases dispatch consults (turbo_core.tuning.active.info, without the per-entry
    stale list: its count); an unreadable database is a problem."""
    try:
        info = active.info()
    except ValueError as exc:  # a malformed TURBO_TUNING_DB
        problems.append(str(exc))
        return {"error": str(exc)}
    problems.extend(f"tuning database: {err}" for err in info["errors"])
    return {"enabled": info["enabled"], "sources": info["sources"], "entries": info["entries"],
            "stale": len(info["stale"]), "policy": info["policy"], "user_file": info["user_file"]}


def run(args) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
        return exit_status(report)
    console = Console()
    proc = report["platform"]
    console.print(f"[bold]turbo-core[/bold] {report['turbo_core']}")
    console.print(f"torch {proc['torch']}  triton {proc['triton'] or 'not installed'}  "
                  f"CUDA {proc['cuda'] or '-'}  ROCm/HIP {proc['hip'] or '-'}")
    if proc["gpus"]:
        for gpu in proc["gpus"]:
            console.print(f"GPU {gpu['index']}: {gpu['name']} ({gpu['kind']}, {gpu['arch']})")
    else:
        console.print("GPU: no GPU" + (f" ({proc['gpu_error']})" if proc.get("gpu_error") else ""))
    table = Table(title="plugins")
    for col in ("plugin", "source", "status", "backends / error"):
        table.add_column(col, overflow="fold")
    for rec in report["plugins"]:
        detail = ", ".join(rec["backends"]) if rec["status"] == "loaded" else (rec["error"] or "")
        if rec["status"] == "failed":
            detail = f"{rec['stage']}: {detail}"
        table.add_row(rec["name"], rec["source"], rec["status"], detail)
    console.print(table)
    for row in report["backends"]:
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        console.print(f"  {row['name']:<10} {row['package']} {row['version']}: {state}")
    tuning = report["tuning"]
    if "error" not in tuning:
        where = ", ".join(tuning["sources"]) or "none"
        state = "" if tuning["enabled"] else " (off: TURBO_TUNING=0)"
        console.print(f"tuning databases{state}: {where}; {tuning['entries']} entries in use, "
                      f"{tuning['stale']} skipped as stale (tuned with other library versions; policy {tuning['policy']})")
    if report["environment"]:
        console.print("environment: " + ", ".join(f"{k}={v}" for k, v in sorted(report["environment"].items())))
    for note in report["notes"]:
        console.print(f"note: {note}", markup=False)
    if report["problems"]:
        console.print("[bold yellow]problems:[/bold yellow]")
        for p in report["problems"]:
            console.print(f"  - {p}", markup=False)
    else:
        console.print("no problems found")
    return exit_status(report)
