"""liger-kernel as a peer provider of ``turbo bench norm`` / ``activation``: a fake ``liger_kernel``
in ``sys.modules`` (plain torch math with the real classes' call signatures, recording how it was
called) checks the plumbing: rows timed and checked against float64 math of what liger computes,
its note carried into the rows and the report, declined rows naming why (no such class; GEGLU's
tanh form; liger-kernel not importable)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from turbo_core.bench import dataset
from turbo_core.cli import main

CALLS: list[tuple] = []


def _norm(x, w, eps, offset):
    s = x.float()
    return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * (offset + w.float())).to(x.dtype)


class _RMSNorm:  # liger: LigerRMSNormFunction.apply(X, W, eps, offset, casting_mode, in_place, row_mode)
    @staticmethod
    def apply(x, w, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
        CALLS.append(("rms_norm", casting_mode, in_place))
        return _norm(x, w, eps, offset)


class _FusedAdd:  # liger: LigerFusedAddRMSNormFunction.apply(X, R, W, eps, offset, casting_mode, in_place)
    @staticmethod
    def apply(x, r, w, eps, offset=0.0, casting_mode="llama", in_place=False):
        CALLS.append(("fused_add", casting_mode, in_place))
        s = (x.float() + r.float()).to(x.dtype)
        return _norm(s, w, eps, offset), s


class _SiLUMul:  # liger: LigerSiLUMulFunction.apply(a, b) = silu(a) * b
    scale = 1.0

    @classmethod
    def apply(cls, a, b):
        CALLS.append(("swiglu", tuple(a.shape), a.is_contiguous() and b.is_contiguous()))
        return (F.silu(a.float()) * b.float() * cls.scale).to(a.dtype)


@pytest.fixture
def fake_liger(monkeypatch):
    """liger_kernel 0.0-fake: RMSNorm, fused add + RMSNorm, SiLU-mul; no fused gate-up SwiGLU."""
    CALLS.clear()
    _SiLUMul.scale = 1.0
    pkg = types.ModuleType("liger_kernel")
    pkg.__version__ = "0.0-fake"
    pkg.__path__ = []
    ops = types.ModuleType("liger_kernel.ops")
    ops.__path__ = []
    mods = {"liger_kernel": pkg, "liger_kernel.ops": ops}
    for name, attr, cls in (("rms_norm", "LigerRMSNormFunction", _RMSNorm),
                            ("fused_add_rms_norm", "LigerFusedAddRMSNormFunction", _FusedAdd),
                            ("swiglu", "LigerSiLUMulFunction", _SiLUMul)):
        mod = types.ModuleType(f"liger_kernel.ops.{name}")
        setattr(mod, attr, cls)
        mods[mod.__name__] = mod
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    import importlib.metadata as md

    real = md.version
    monkeypatch.setattr(md, "version", lambda d: (_ for _ in ()).throw(md.PackageNotFoundError(d))
                        if d == "liger-kernel" else real(d))


def _rows(tmp_path, suite, *providers):
    data = tmp_path / suite
    assert main(["bench", suite, "--quick", "--providers", "torch", *providers, "--record", str(data)]) == 0
    return data, dataset.load(data)


def test_norm_rows_through_a_fake_liger(tmp_path, fake_liger):
    data, rows = _rows(tmp_path, "norm", "liger")
    liger = [r for r in rows if r["provider"] == "liger"]
    assert {(r["op"], r["pass"]) for r in liger} == {("rmsnorm", "fwd"), ("rmsnorm", "bwd"), ("rmsnorm_residual", "fwd")}
    for r in liger:
        torch_row = next(t for t in rows if t["case"] == r["case"] and t["provider"] == "torch")
        assert r["status"] == "ok" and r["max_rel_err"] < 1e-2, r
        assert r["bytes"] == torch_row["bytes"] and r["ratio"] == pytest.approx(torch_row["median_ms"] / r["median_ms"])
        assert r["note"].startswith("liger-kernel 0.0-fake: ") and "casting_mode='gemma'" in r["note"]
    assert ("rms_norm", "gemma", True) in CALLS and ("fused_add", "gemma", False) in CALLS
    bwd = next(r for r in liger if r["pass"] == "bwd")
    assert "in_place=True" in bwd["note"]

    assert main(["bench", "report", "--data", str(data), "--out", str(tmp_path / "perf.md"), "--no-plots"]) == 0
    page = (tmp_path / "perf.md").read_text()
    assert "`liger`" in page and "- `liger`: liger-kernel 0.0-fake: LigerRMSNormFunction" in page


def test_activation_rows_and_declines_through_a_fake_liger(tmp_path, fake_liger):
    _, rows = _rows(tmp_path, "activation", "liger", "liger:gate_up")
    for r in rows:
        if r["provider"] == "torch":
            continue
        if r["op"] == "geglu":
            assert r["provider"] == "liger" and "tanh approximation" in r["status"], r
        elif r["provider"] == "liger:gate_up":
            assert r["status"].startswith("declined: liger_kernel.ops.swiglu.LigerFusedGateUpSiLUMulFunction not found")
        else:  # checked against float64 silu(a) * b (no probs), on the case's bytes
            assert r["status"] == "ok" and r["max_rel_err"] < 1e-2, r
            assert "no probs" in r["note"] and "separate contiguous" in r["note"]
    assert len([r for r in rows if r["provider"] == "liger" and r["status"] == "ok"]) == 2  # swiglu fwd, bwd
    f = next(c for c in CALLS if c[0] == "swiglu")
    assert f[1] == (32, 80) and f[2]  # a, b: two contiguous [T, F] tensors


def test_a_wrong_liger_result_shows_in_the_error(tmp_path, fake_liger):
    _SiLUMul.scale = 1.5
    _, rows = _rows(tmp_path, "activation", "liger")
    fwd = next(r for r in rows if r["provider"] == "liger" and r["op"] == "swiglu" and r["pass"] == "fwd")
    assert fwd["max_rel_err"] == pytest.approx(0.5, rel=2e-2)


def test_declined_rows_when_liger_is_not_importable(tmp_path, monkeypatch):
    for name in ("liger_kernel", "liger_kernel.ops", "liger_kernel.ops.rms_norm", "liger_kernel.ops.swiglu",
                 "liger_kernel.ops.fused_add_rms_norm"):
        monkeypatch.setitem(sys.modules, name, None)
    for suite in ("norm", "activation"):
        _, rows = _rows(tmp_path, suite, "liger")
        liger = [r for r in rows if r["provider"] == "liger"]
        assert liger and all(r["status"].startswith("declined: ") for r in liger)
        want = "declined: liger-kernel not importable (ModuleNotFoundError"
        assert all(r["status"].startswith(want) for r in liger if r["op"] != "geglu"), liger
        assert all(r["status"] == "ok" for r in rows if r["provider"] == "torch")
