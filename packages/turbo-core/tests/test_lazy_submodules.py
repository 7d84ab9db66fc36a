"""``import turbo_core`` makes ``turbo_core.ops``, ``turbo_core.modules`` and ``turbo_core.testing``
reachable as attributes, importing none of them until first accessed (a fresh interpreter, so nothing
imported them before)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import turbo_core
names = ("turbo_core.ops", "turbo_core.modules", "turbo_core.testing")
before = [n for n in names if n in sys.modules]
listed = [n for n in ("ops", "modules", "testing") if n in dir(turbo_core)]
import torch
a, b = torch.randn(3, 4), torch.randn(4, 5)
y = turbo_core.ops.gemm(a, b)
after_ops = [n for n in names if n in sys.modules]
err = float((y.double() - a.double() @ b.double()).abs().max())
layer = turbo_core.modules.Linear(4, 2)
suite = turbo_core.testing.assert_close_to_reference
try:
    turbo_core.no_such_thing
    missing = None
except AttributeError as exc:
    missing = str(exc)
print(json.dumps({"before": before, "listed": listed, "after_ops": after_ops, "err": err,
                  "linear": type(layer).__module__, "suite": suite.__module__,
                  "same": turbo_core.ops is sys.modules["turbo_core.ops"], "missing": missing}))
"""


def test_submodules_are_attributes_imported_on_first_access():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["before"] == []  # import turbo_core imports none of them
    assert seen["listed"] == ["ops", "modules", "testing"]  # dir() shows them
    assert "turbo_core.ops" in seen["after_ops"] and "turbo_core.testing" not in seen["after_ops"]
    assert seen["err"] < 1e-5  # turbo_core.ops.gemm is the op: a @ b (fp32, against float64 math)
    assert seen["linear"].startswith("turbo_core.modules")
    assert seen["suite"] == "turbo_core.testing.numerics"
    assert seen["same"] is True
    assert seen["missing"] == "module 'turbo_core' has no attribute 'no_such_thing'"
