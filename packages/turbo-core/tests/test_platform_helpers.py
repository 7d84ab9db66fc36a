"""Primus-Turbo's platform helpers: ``turbo_core.utils`` (capability, ``is_gfx*``), the
``check_*_support`` functions and the lazily resolved dtypes ``float8_e4m3``, ``float8_e5m2`` and
``float4_e2m1fn_x2``, on fake platforms (every architecture) and on this machine's CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import turbo_core
from turbo_core import low_precision as lp
from turbo_core import utils
from turbo_core.platform import Platform

ARCHS = {  # platform -> (capability, fnuz, gfx942, gfx950, gfx1250, fp8, ocp, mxfp8, mxfp4)
    ("rocm", "gfx90a"): ((9, 0), False, False, False, False, False, False, False, False),
    ("rocm", "gfx942"): ((9, 4), True, True, False, False, True, False, False, False),
    ("rocm", "gfx950"): ((9, 5), False, False, True, False, True, True, True, True),
    ("rocm", "gfx1250"): ((12, 5), False, False, False, True, True, True, True, True),
    ("cuda", "sm80"): ((8, 0), False, False, False, False, False, False, False, False),
    ("cuda", "sm89"): ((8, 9), False, False, False, False, True, True, False, False),
    ("cuda", "sm90"): ((9, 0), False, False, False, False, True, True, False, False),
    ("cuda", "sm100"): ((10, 0), False, False, False, False, True, True, True, True),
    ("cuda", "sm121"): ((12, 1), False, False, False, False, True, True, True, True),
}
CHECKS = (lp.check_fp8_support, lp.check_fp8_ocp_support, lp.check_mxfp8_support, lp.check_mxfp4_support)


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make every helper see one GPU of the given platform (``platform_of`` of a cuda device)."""

    def install(kind: str, arch: str | None) -> None:
        fake = Platform(kind, arch, f"fake {arch}", 0)
        cpu = Platform("cpu")
        for module in (utils, lp):
            monkeypatch.setattr(module, "platform_of", lambda d: fake if d is not None and d.type == "cuda" else cpu)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        for name in ("float8_e4m3", "float8_e5m2", "float4_e2m1fn_x2"):
            monkeypatch.delitem(lp.__dict__, name, raising=False)

    yield install
    for name in ("float8_e4m3", "float8_e5m2", "float4_e2m1fn_x2"):
        lp.__dict__.pop(name, None)  # resolved under the fake: forget it


@pytest.mark.parametrize("kind, arch", list(ARCHS))
def test_helpers_on_each_architecture(fake_gpu, kind, arch):
    cap, fnuz, g942, g950, g1250, *support = ARCHS[(kind, arch)]
    fake_gpu(kind, arch)
    assert utils.get_device_compute_capability() == cap
    assert utils.get_device_compute_capability("cuda:0") == cap == utils.get_device_compute_capability(0)
    assert (utils.is_gfx942(), utils.is_gfx950(), utils.is_gfx1250()) == (g942, g950, g1250)
    for check, want in zip(CHECKS, support, strict=True):
        ok, reason = check()
        assert ok is want and check("cuda:0") == (ok, reason)
        assert (reason == "") is want
        if not want:
            assert f"this GPU has {cap}" in reason
    e4m3 = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    e5m2 = torch.float8_e5m2fnuz if fnuz else torch.float8_e5m2
    assert lp.float8_e4m3 is e4m3 and lp.float8_e5m2 is e5m2
    assert turbo_core.float8_e4m3 is e4m3 and turbo_core.float8_e5m2 is e5m2
    assert lp.float4_e2m1fn_x2 is torch.float4_e2m1fn_x2 is turbo_core.float4_e2m1fn_x2
    # the dtypes are the ones turbo's ops use on that device
    assert lp.float8_e4m3 is lp.float8_e4m3_dtype("cuda:0") and lp.float8_e5m2 is lp.fp8_dtype_for("E5M2", "cuda:0")


def test_the_dtypes_stay_fixed_once_read(fake_gpu, monkeypatch):
    fake_gpu("rocm", "gfx942")
    assert lp.float8_e4m3 is torch.float8_e4m3fnuz
    for module in (utils, lp):  # another GPU from now on: the value read first stays, as at import in Primus
        monkeypatch.setattr(module, "platform_of", lambda d: Platform("rocm", "gfx950", "fake", 0))
    assert lp.float8_e4m3 is torch.float8_e4m3fnuz and "float8_e4m3" in vars(lp)
    assert lp.platform_dtype("float8_e4m3") is torch.float8_e4m3fn  # the uncached resolution sees the change


def test_cpu_gets_ocp_fp8_fp4_and_no_hardware_support(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert utils.resolve_device(None) == torch.device("cpu")
    assert utils.get_device_compute_capability() == (0, 0) == utils.get_device_compute_capability("cpu")
    assert not (utils.is_gfx942() or utils.is_gfx950() or utils.is_gfx1250())
    for check in CHECKS:
        ok, reason = check()
        assert ok is False and reason.startswith("no GPU") and "reference backend TORCH" in reason
    assert lp.platform_dtype("float8_e4m3") is torch.float8_e4m3fn
    assert lp.platform_dtype("float8_e5m2") is torch.float8_e5m2
    assert lp.platform_dtype("float4_e2m1fn_x2") is torch.float4_e2m1fn_x2
    with pytest.raises(RuntimeError, match="^get_num_cus: no GPU"):
        utils.get_num_cus()


def test_capability_parsing_and_bad_devices():
    cap = utils.capability_of
    assert cap(Platform("rocm", "gfx942")) == (9, 4) and cap(Platform("rocm", "gfx90a")) == (9, 0)
    assert cap(Platform("rocm", "gfx1100")) == (11, 0) and cap(Platform("rocm", None)) == (0, 0)
    assert cap(Platform("rocm", "gfxzz")) == (0, 0) and cap(Platform("cuda", "sm75")) == (7, 5)
    assert cap(Platform("cpu")) == (0, 0)
    for bad, err in ((True, TypeError), (1.0, TypeError), (-1, ValueError)):
        with pytest.raises(err, match="^device: "):
            utils.get_device_compute_capability(bad)
    assert utils.build_ck() is False  # turbo-ck is not installed in this environment
    with pytest.raises(AttributeError, match="no attribute 'float8_e4m4'"):
        turbo_core.float8_e4m4  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'float8_e4m4'"):
        lp.float8_e4m4  # noqa: B018
    assert {"float8_e4m3", "float4_e2m1fn_x2"} <= set(dir(turbo_core)) & set(dir(lp))


def test_import_touches_no_gpu_and_the_first_read_resolves():
    """In a fresh process, with the CUDA entry points replaced by recorders: importing turbo_core
    (and low_precision, utils, stream) calls none of them; reading ``float8_e4m3`` does."""
    script = (
        "import json, torch\n"
        "calls = []\n"
        "def rec(name, result):\n"
        "    def f(*a, **k):\n"
        "        calls.append(name)\n"
        "        return result\n"
        "    return f\n"
        "torch.cuda.is_available = rec('is_available', False)\n"
        "torch.cuda.current_device = rec('current_device', 0)\n"
        "torch.cuda.get_device_properties = rec('get_device_properties', None)\n"
        "import turbo_core, turbo_core.low_precision, turbo_core.utils, turbo_core.stream\n"
        "from turbo_core import *\n"
        "at_import = list(calls)\n"
        "value = str(turbo_core.float8_e4m3)\n"
        "from turbo_core import float8_e5m2\n"
        "print(json.dumps({'at_import': at_import, 'after': calls, 'e4m3': value, 'e5m2': str(float8_e5m2),\n"
        "                  'cuda_init': torch.cuda.is_initialized()}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["at_import"] == [] and report["cuda_init"] is False
    assert report["after"] == ["is_available", "is_available"]  # one resolution per name
    assert (report["e4m3"], report["e5m2"]) == ("torch.float8_e4m3fn", "torch.float8_e5m2")
