"""The turbo-deepep plugin: discovered through its entry point, two backends listed honestly
(DEEP_EP available wherever torch.distributed is; DEEP_EP_BUFFER unavailable without a DeepEP-like
module, with the reason), cheap to import, and chosen for a multi-rank call without any setting."""

import json
import subprocess
import sys

import pytest
import torch

import turbo_deepep
from turbo_core.testing import imported_modules_after


@pytest.fixture(scope="module")
def rows():
    """Both rows of ``turbo backends --json`` from one fresh process (a real entry-point discovery)."""
    out = subprocess.run([sys.executable, "-m", "turbo_core.cli", "backends", "--json"], check=True,
                         capture_output=True, text=True).stdout
    found = {r["name"]: r for r in json.loads(out)}
    return {name: found[name] for name in ("DEEP_EP", "DEEP_EP_BUFFER")}


def test_listed_through_entry_point(rows):
    for row in rows.values():
        assert row["package"] == "turbo-deepep"
        assert row["version"] == turbo_deepep.__version__
        assert row["plugin"] == "deep_ep"  # the installed entry point, not TURBO_PLUGINS


def test_registers_dispatch_and_combine(rows):
    for row in rows.values():
        assert set(row["primitives"]) == {"moe_dispatch", "moe_combine"}
    assert "not implemented" not in rows["DEEP_EP"]["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_deepep" in mods
    assert not {"triton", "aiter", "deep_ep", "uccl", "uccl_ep"} & mods


def test_availability(rows):
    assert torch.distributed.is_available()
    assert rows["DEEP_EP"]["available"] is True and rows["DEEP_EP"]["reason"] is None
    buf = rows["DEEP_EP_BUFFER"]
    try:
        import deep_ep  # noqa: F401
    except ImportError:
        assert buf["available"] is False
        assert buf["reason"].startswith("no module with DeepEP's Buffer API is importable (deep_ep: ")


def test_the_adapter_is_tried_first():
    from turbo_core.plugins.host import get_host

    order = [k.backend for k in get_host().registry.kernels_for("moe_dispatch")]
    assert order.index("DEEP_EP_BUFFER") < order.index("DEEP_EP")
