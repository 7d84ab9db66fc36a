"""``import turbo_core`` stays cheap: no plugin discovery, no Triton, no torch.compile machinery, no
op module or custom-op launcher, none of the tooling (the import rules themselves are import-linter
contracts in the root pyproject.toml; this checks what actually loads)."""

from __future__ import annotations

import json
import subprocess
import sys

from turbo_core.cli import demo_cmd
from turbo_core.demo.model import FP8_RECIPES

TOOLING = ("turbo_core.accuracy", "turbo_core.bench", "turbo_core.cli", "turbo_core.demo", "turbo_core.testing")


def test_import_turbo_core_loads_no_plugin_no_triton_and_no_tooling():
    script = (
        "import json, sys\n"
        "import turbo_core\n"
        "from turbo_core.plugins import host\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'host': host._host is not None}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    modules = set(report["modules"])
    assert report["host"] is False  # no plugin discovered
    assert "triton" not in modules
    assert "torch._dynamo" not in modules
    assert not [m for m in modules if m.startswith(("turbo_core.ops", "turbo_core.dispatch.launch"))]
    assert not [m for m in modules if m.startswith(TOOLING)]
    # the tuning keys of gemm and gemm_fp8 are registered by importing turbo_core.dispatch
    assert "turbo_core.dispatch.tuning_keys" in modules


def test_the_turbo_parser_imports_no_op_and_offers_the_demo_recipes():
    script = (
        "import json, sys\n"
        "from turbo_core.cli.main import _parser\n"
        "_parser()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [m for m in modules if m.startswith(("turbo_core.ops", "turbo_core.demo", "triton"))]
    assert demo_cmd.FP8_RECIPES == FP8_RECIPES
