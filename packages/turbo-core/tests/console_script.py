"""Running the installed ``turbo`` console script in a subprocess, as a user's shell would."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path


def turbo_script() -> str:
    """The ``turbo`` script installed beside this interpreter (pip puts it in the same bin folder)."""
    found = shutil.which("turbo", path=str(Path(sys.executable).parent))
    assert found, f"no turbo console script beside {sys.executable}: is turbo-core installed here?"
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without turbo settings, TRITON_INTERPRET and COLUMNS (so the output is
    what a pipe gets), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TURBO_", "PRIMUS_TURBO_")) and k not in ("TRITON_INTERPRET", "COLUMNS")}
    env.update(extra)
    return env


def other_plugins() -> str:
    """The installed entry points of backend packages other than turbo-core, comma-separated (for
    ``TURBO_DISABLE_PLUGINS``: the child then sees the same backends in every nox session)."""
    eps = importlib.metadata.entry_points(group="turbo.backends")
    return ",".join(sorted({ep.name for ep in eps if not ep.value.startswith("turbo_core.")}))


def turbo(*argv: str, env: dict[str, str] | None = None, timeout: float = 240, cwd=None) -> subprocess.CompletedProcess:
    """``turbo argv...`` with stdout and stderr captured (pipes, as in ``turbo ... | less``)."""
    return subprocess.run([turbo_script(), *argv], env=clean_env() if env is None else env, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)
