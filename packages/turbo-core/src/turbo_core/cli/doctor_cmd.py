"""``turbo doctor [--json]``: the platform, each plugin's load status, the tuning databases in use,
and problems."""

from __future__ import annotations

import json
import os

from rich.console import Console
from rich.table import Table

from turbo_core._version import __version__
from turbo_core.cli.inventory import backend_rows
from turbo_core.dispatch.catalog import primitive_names
from turbo_core.dispatch.env import backend_env_names
from turbo_core.dispatch.manager import FAMILIES, GlobalBackendManager
from turbo_core.platform import describe_process
from turbo_core.plugins.host import get_host
from turbo_core.tuning import active


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="explain the platform and any plugin or configuration problem")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")


def _env_problems() -> tuple[dict, list[str]]:
    """Every turbo-related environment variable that is set, and the ones with bad values."""
    shown = {k: v for k, v in os.environ.items() if k.startswith(("TURBO_", "PRIMUS_TURBO_"))}
    problems = []
    scopes = list(dict.fromkeys([*FAMILIES, *primitive_names()]))
    for scope in scopes:
        if not any(name in os.environ for name in backend_env_names(scope)):
            continue
        try:
            GlobalBackendManager._lookup_env([scope], None)
        except ValueError as exc:
            problems.append(str(exc))
    try:
        GlobalBackendManager.auto_tune_enabled()
    except ValueError as exc:
        problems.append(str(exc))
    return shown, problems


def collect() -> dict:
    host = get_host()
    proc = describe_process()
    env, problems = _env_problems()
    for rec in host.records:
        if rec.status == "failed":
            problems.append(f"plugin {rec.name} ({rec.source}) failed at {rec.stage}: {rec.error}")
    rows = backend_rows()
    tuning = _tuning(problems)
    if not proc["gpus"]:
        problems.append("no GPU: only the CPU backends (TORCH, Triton under TRITON_INTERPRET=1) can run")
    return {
        "turbo_core": __version__,
        "platform": proc,
        "plugins": [r.as_dict() for r in host.records],
        "backends": [{k: r[k] for k in ("name", "package", "version", "available", "reason")} for r in rows],
        "environment": env,
        "tuning": tuning,
        "problems": problems,
    }


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
        return 0
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
    if report["problems"]:
        console.print("[bold yellow]problems:[/bold yellow]")
        for p in report["problems"]:
            console.print(f"  - {p}")
    else:
        console.print("no problems found")
    return 0
