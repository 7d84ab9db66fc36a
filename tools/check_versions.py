"""One version for every turbo package: pyproject versions, __version__ strings and the
turbo-core pins in extras and backend dependencies must all agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
core = tomllib.loads((ROOT / "packages/turbo-core/pyproject.toml").read_text())
version = core["project"]["version"]
problems = []
for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")) + sorted(ROOT.glob("examples/*/pyproject.toml")):
    meta = tomllib.loads(pyproject.read_text())["project"]
    pkg_dir = pyproject.parent
    is_example = pkg_dir.parent.name == "examples"
    if not is_example and meta["version"] != version:
        problems.append(f"{pyproject}: version {meta['version']} != {version}")
    for src in pkg_dir.glob("src/*/*.py"):
        if src.name not in ("__init__.py", "_version.py"):
            continue
        m = re.search(r'__version__ = "([^"]+)"', src.read_text())
        if m and m.group(1) != meta["version"]:
            problems.append(f"{src}: __version__ {m.group(1)} != {meta['version']}")
    deps = list(meta.get("dependencies", []))
    for extra in meta.get("optional-dependencies", {}).values():
        deps += extra
    for dep in deps:
        m = re.match(r"(turbo-[a-z]+)\s*==\s*([^\s;,]+)", dep)
        if m and m.group(2) != version:
            problems.append(f"{pyproject}: pins {dep}, expected =={version}")
if problems:
    sys.exit("\n".join(problems))
print(f"ok: every turbo package is version {version}")
