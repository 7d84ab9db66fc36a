"""Sparse MLA: ``sparse_mla_func`` and ``SparseMLAFunc`` on TORCH against float64 math (the
conformance kit's dense formulation), argument validation before any kernel, backend selection
through ``set_sparse_attn_backend`` and ``TURBO_SPARSE_ATTN_BACKEND``, the backward pinned to the
forward's backend, opcheck of the custom ops and torch.compile(fullgraph=True, backend="aot_eager")."""

from __future__ import annotations

import pytest
import torch
from spy_backend import install_spy_backend

import turbo_core.ops as ops
from turbo_core import BackendError, GlobalBackendManager, use_backend
from turbo_core.dispatch import call, select
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs
from turbo_core.ops import SparseMLAFunc, sparse_mla_func
from turbo_core.testing.cases.sparse_mla import gathered_reference, make_indices, reference


def _inputs(t=6, h=3, num_kv=10, topk=5, d=24, seed=0, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, h, d, generator=g).to(dtype).requires_grad_(grad)
    kv = torch.randn(num_kv, 1, d, generator=g).to(dtype).requires_grad_(grad)
    idx = torch.randint(-1, num_kv, (t, topk), generator=g, dtype=torch.int32)
    return q, kv, idx


def _ref(q, kv, idx, sink=None, rank=16, scale=None):
    q64 = q.detach().double().requires_grad_()
    kv64 = kv.detach().double().reshape(kv.shape[0], -1).requires_grad_()
    s64 = sink.detach().double().requires_grad_() if sink is not None else None
    out, lse = reference(q64, kv64, idx.long(), s64, rank, scale if scale is not None else q.shape[-1] ** -0.5)
    return out, lse, (q64, kv64, s64)


# -- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, exc, match", [
    (dict(q=torch.randn(6, 3, 24, dtype=torch.float64)), TypeError, "q: expected dtype in"),
    (dict(q=torch.randn(6, 24)), ValueError, "q: expected a 3-D tensor"),
    (dict(kv=torch.randn(10, 2, 24)), ValueError, r"kv: expected \[num_kv, d_qk\] or \[num_kv, 1, d_qk\]"),
    (dict(kv=torch.randn(10, 1, 20)), ValueError, r"kv: expected the head dim of q \(24\)"),
    (dict(kv=torch.randn(10, 1, 24).half()), TypeError, r"kv: expected the dtype of q \(float32\)"),
    (dict(topk_indices=torch.zeros(6, 5)), TypeError, "topk_indices: expected dtype in"),
    (dict(topk_indices=torch.zeros(5, 5, dtype=torch.int32)), ValueError, r"topk_indices: expected \[T, topk\] with T = 6"),
    (dict(attn_sink=torch.zeros(3, dtype=torch.float64)), TypeError, "attn_sink: expected dtype in"),
    (dict(attn_sink=torch.zeros(4)), ValueError, r"attn_sink: expected shape \(3,\)"),
    (dict(kv_lora_rank=25), ValueError, r"kv_lora_rank: expected at most the head dim of q \(24\)"),
    (dict(kv_lora_rank=0), ValueError, "kv_lora_rank: expected an int >= 1"),
    (dict(kv_lora_rank=16.0), TypeError, "kv_lora_rank: expected an int"),
    (dict(scale=float("nan")), TypeError, "scale: expected None or a finite float"),
    (dict(return_lse=1), TypeError, "return_lse: expected a bool"),
])
def test_validation_names_the_argument_before_any_kernel(monkeypatch, change, exc, match):
    import turbo_core.dispatch.launch.sparse_mla as launch

    def no_kernel(*a, **k):
        raise AssertionError("a kernel ran before validation")

    monkeypatch.setattr(launch, "call", no_kernel)
    monkeypatch.setattr(launch, "call_with_backend", no_kernel)
    q, kv, idx = _inputs(grad=True)
    kw = dict(q=q, kv=kv, topk_indices=idx, attn_sink=None, kv_lora_rank=16, scale=None, return_lse=False)
    kw.update(change)
    with pytest.raises(exc, match=match):
        sparse_mla_func(**kw)


def test_primitive_validation_of_the_backward():
    q, kv, idx = _inputs()
    out = torch.zeros(6, 3, 16)
    lse = torch.zeros(6, 3)
    with pytest.raises(ValueError, match=r"dout: expected shape \(6, 3, 16\)"):
        call("sparse_mla_bwd", SparseMlaBwdArgs(torch.zeros(6, 3, 24), q, kv, out, lse, idx, kv_lora_rank=16))
    with pytest.raises(TypeError, match="lse: expected dtype in"):
        call("sparse_mla_bwd", SparseMlaBwdArgs(out, q, kv, out, lse.double(), idx, kv_lora_rank=16))
    with pytest.raises(ValueError, match=r"lse: expected shape \(6, 3\)"):
        call("sparse_mla_bwd", SparseMlaBwdArgs(out, q, kv, out, lse.t(), idx, kv_lora_rank=16))
    strided = torch.zeros(6, 5, 2, dtype=torch.int32)[..., 0]
    with pytest.raises(ValueError, match="topk_indices: expected unit stride in the last dim"):
        call("sparse_mla_fwd", SparseMlaFwdArgs(q, kv, strided, kv_lora_rank=16))
    # the op makes such a view contiguous (as flash attention does) and gives the same result
    torch.testing.assert_close(sparse_mla_func(q, kv, strided, kv_lora_rank=16),
                               sparse_mla_func(q, kv, strided.contiguous(), kv_lora_rank=16))


# -- numerics ------------------------------------------------------------------------------------

def test_rows_that_select_nothing_give_zero_out_and_lse_minus_inf_or_the_sink():
    q, kv, idx = _inputs(grad=True)
    idx[1] = -1
    idx[4] = torch.tensor([10, 11, -5, -1, 99], dtype=torch.int32)  # every entry outside [0, 10)
    out, lse = sparse_mla_func(q, kv, idx, kv_lora_rank=16, return_lse=True)
    assert torch.equal(out[[1, 4]], torch.zeros(2, 3, 16)) and bool((lse[[1, 4]] == float("-inf")).all())
    out.sum().backward()
    assert torch.equal(q.grad[[1, 4]], torch.zeros(2, 3, 24))
    sink = torch.randn(3)
    out, lse = sparse_mla_func(q, kv, idx, attn_sink=sink, kv_lora_rank=16, return_lse=True)
    assert torch.equal(out[1], torch.zeros(3, 16)) and torch.equal(lse[1], sink)


def test_forward_backward_match_float64_with_sink_scale_and_2d_kv():
    q, kv, idx = _inputs(grad=True)
    kv2 = kv.detach()[:, 0].clone().requires_grad_()
    sink = torch.randn(3, requires_grad=True)
    out, lse = sparse_mla_func(q, kv2, idx, attn_sink=sink, kv_lora_rank=16, scale=0.2, return_lse=True)
    want, want_lse, (q64, kv64, s64) = _ref(q, kv2, idx, sink, 16, 0.2)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    dout = torch.randn_like(out)
    out.backward(dout)
    want.backward(dout.double())
    assert kv2.grad.shape == kv2.shape
    for got, ref in ((q.grad, q64.grad), (kv2.grad, kv64.grad), (sink.grad, s64.grad)):
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_the_two_float64_oracles_agree():
    # the conformance kit's dense formulation (counts of each selected row) and the gathered one
    g = torch.Generator().manual_seed(5)
    q = torch.randn(9, 3, 20, generator=g, dtype=torch.float64).requires_grad_()
    kv = torch.randn(11, 20, generator=g, dtype=torch.float64).requires_grad_()
    idx = make_indices(9, 11, 7, "repeats", g)
    idx[2] = -1
    idx[5, :3] = torch.tensor([11, -4, 40])
    sink = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_()
    dout = torch.randn(9, 3, 16, generator=g, dtype=torch.float64)
    out, lse = reference(q, kv, idx, sink, 16, 0.3)
    out.backward(dout)
    got = gathered_reference(q.detach(), kv.detach(), idx, sink.detach(), dout, 16, 0.3, block=4)
    for a, b in zip((out, lse, q.grad, kv.grad, sink.grad), got, strict=True):
        torch.testing.assert_close(a.detach(), b, rtol=1e-12, atol=1e-12)


def test_no_grad_path_and_lse_is_not_differentiable():
    q, kv, idx = _inputs()
    out = sparse_mla_func(q, kv, idx, kv_lora_rank=16)
    assert not out.requires_grad and out.shape == (6, 3, 16)
    q.requires_grad_()
    out, lse = sparse_mla_func(q, kv, idx, kv_lora_rank=16, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    assert kv.grad is None
    out.sum().backward()
    assert q.grad is not None and kv.grad is None


def test_sparse_mla_func_class_takes_primus_turbo_arguments():
    q, kv, idx = _inputs(grad=True)
    out, lse = SparseMLAFunc.apply(q, kv, idx, None, 16, None, True, True)
    assert ops.SparseMLAFunc is SparseMLAFunc and "sparse_mla_func" in ops.__all__
    torch.testing.assert_close(out, sparse_mla_func(q, kv, idx, kv_lora_rank=16))
    out.sum().backward()
    assert q.grad.shape == q.shape and kv.grad.shape == kv.shape


# -- selection -----------------------------------------------------------------------------------

def _spy_plugin(monkeypatch, use_plugins, primitives):
    from turbo_core.reference import sparse_mla

    return install_spy_backend(monkeypatch, use_plugins, name="MLASPY", reference=sparse_mla, primitives=primitives)


def test_set_sparse_attn_backend_and_the_environment_select_both_primitives(monkeypatch, use_plugins):
    calls = _spy_plugin(monkeypatch, use_plugins, ["sparse_mla_fwd", "sparse_mla_bwd"])
    q, kv, idx = _inputs()
    fwd = SparseMlaFwdArgs(q, kv, idx, kv_lora_rank=16)
    fwd_prim = get_primitive("sparse_mla_fwd")
    assert fwd_prim.family == "sparse_attn" and get_primitive("sparse_mla_bwd").family == "sparse_attn"
    assert select(fwd_prim, fwd).backend == "TORCH"
    GlobalBackendManager.set_sparse_attn_backend("MLASPY")
    assert GlobalBackendManager.get_sparse_attn_backend().backend == "MLASPY"
    assert select(fwd_prim, fwd).backend == "MLASPY"
    GlobalBackendManager.set_sparse_attn_backend(None)
    assert GlobalBackendManager.get_sparse_attn_backend() is None
    for var in ("TURBO_SPARSE_ATTN_BACKEND", "PRIMUS_TURBO_SPARSE_ATTN_BACKEND"):
        monkeypatch.setenv(var, "mlaspy")
        assert select(fwd_prim, fwd).backend == "MLASPY"
        monkeypatch.delenv(var)
    monkeypatch.setenv("TURBO_SPARSE_ATTN_BACKEND", "fp8:MLASPY")  # not the primitives' precision
    q.requires_grad_()
    sparse_mla_func(q, kv, idx, kv_lora_rank=16).sum().backward()
    assert calls == []
    monkeypatch.setenv("TURBO_SPARSE_ATTN_BACKEND", "bf16:MLASPY")  # BF16_FP16_FP32, which fp32 inputs are
    sparse_mla_func(q, kv, idx, kv_lora_rank=16).sum().backward()
    assert calls == ["sparse_mla_fwd", "sparse_mla_bwd"]


def test_backward_runs_on_the_forward_backend(monkeypatch, use_plugins):
    calls = _spy_plugin(monkeypatch, use_plugins, ["sparse_mla_fwd", "sparse_mla_bwd"])
    q, kv, idx = _inputs(grad=True)
    GlobalBackendManager.set_sparse_attn_backend("MLASPY")
    out = sparse_mla_func(q, kv, idx, kv_lora_rank=16)
    GlobalBackendManager.set_sparse_attn_backend("TORCH")  # changing the setting must not move the backward
    out.sum().backward()
    assert calls == ["sparse_mla_fwd", "sparse_mla_bwd"]


def test_backward_refuses_to_swap_backend(monkeypatch, use_plugins):
    _spy_plugin(monkeypatch, use_plugins, ["sparse_mla_fwd"])
    q, kv, idx = _inputs(grad=True)
    with use_backend("MLASPY"):
        out = sparse_mla_func(q, kv, idx, kv_lora_rank=16)
    with pytest.raises(BackendError, match="MLASPY has no kernel for sparse_mla_bwd.*backend of its forward"):
        out.sum().backward()


# -- custom ops and torch.compile ----------------------------------------------------------------

def test_opcheck_custom_ops():
    q, kv, idx = _inputs()
    sink = torch.randn(3)
    for args in ((q, kv, idx, sink, 16, 0.3), (q, kv[:, 0], idx.long(), None, 24, 0.2)):
        torch.library.opcheck(torch.ops.turbo.sparse_mla_fwd.default, args)
        out, lse = torch.ops.turbo.sparse_mla_fwd(*args)
        torch.library.opcheck(torch.ops.turbo.sparse_mla_bwd.default,
                              (torch.randn_like(out), args[0], args[1], out, lse, *args[2:]))


def test_compile_fullgraph_forward_backward():
    q, kv, idx = _inputs(grad=True)
    sink = torch.randn(3, requires_grad=True)
    fn = torch.compile(lambda q, kv, idx, s: sparse_mla_func(q, kv, idx, s, kv_lora_rank=16, return_lse=True),
                       fullgraph=True, backend="aot_eager")
    out, lse = fn(q, kv, idx, sink)
    dout = torch.randn_like(out)
    out.backward(dout)
    want, want_lse, (q64, kv64, s64) = _ref(q, kv, idx, sink, 16)
    want.backward(dout.double())
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=1e-5)
    for got, ref in ((q.grad, q64.grad), (kv.grad[:, 0], kv64.grad), (sink.grad, s64.grad)):
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
