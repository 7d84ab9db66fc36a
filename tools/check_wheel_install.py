"""Run by `nox -s wheels` inside the fresh venv: the installed turbo distributions and the backends
`turbo backends --json` lists must be exactly the expected ones (argv[1], comma-separated)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

expected_backends = set(sys.argv[1].split(","))
dists = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].startswith("turbo-"))
want_dists = sorted({"turbo-core"} | {f"turbo-{b.lower()}" for b in expected_backends - {"TORCH"}})
print("turbo distributions installed:", dists)
if dists != want_dists:
    sys.exit(f"expected exactly {want_dists}, got {dists}")
turbo = Path(sys.executable).with_name("turbo")
rows = json.loads(subprocess.run([str(turbo), "backends", "--json"], check=True,
                                 capture_output=True, text=True).stdout)
names = {r["name"] for r in rows}
for r in rows:
    print(f"  {r['name']:<8} {r['package']} {r['version']}: "
          + ("available" if r["available"] else f"unavailable: {r['reason']}"))
if names != expected_backends:
    sys.exit(f"turbo backends lists {sorted(names)}, expected {sorted(expected_backends)}")
print("ok: exactly", sorted(expected_backends))
