"""Checks every backend package runs on its own plugin: discovered, listed, cheap to import."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def backend_row(name: str, env: dict[str, str] | None = None) -> dict:
    """The ``turbo backends --json`` row of a backend, from a fresh process (a real discovery
    through the installed entry points). ``env`` replaces the child's environment variables of
    those names. Raises ``AssertionError`` when it is not listed."""
    child_env = dict(os.environ)
    child_env.update(env or {})
    out = subprocess.run(
        [sys.executable, "-m", "turbo_core.cli", "backends", "--json"],
        check=True, capture_output=True, text=True, env=child_env,
    ).stdout
    rows = json.loads(out)
    for row in rows:
        if row["name"] == name:
            return row
    raise AssertionError(f"backend {name} not listed by turbo backends: {[r['name'] for r in rows]}")


def imported_modules_after(code: str) -> set[str]:
    """Top-level module names imported by a fresh interpreter after running ``code``."""
    script = f"{code}\nimport sys, json\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))
