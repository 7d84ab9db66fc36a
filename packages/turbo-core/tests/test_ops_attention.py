"""Flash attention: ``flash_attn_func``, ``flash_attn_varlen_func``, ``flash_attn_fp8_func`` and the
``Attention`` module: conformance cases on TORCH (forward and backward against float64 math),
validation messages, edge cases, backward pinned to the forward's backend, opcheck of the four
custom ops, and torch.compile(fullgraph=True, backend="aot_eager")."""

from __future__ import annotations

import types

import pytest
import torch
from spy_backend import install_spy_backend

from turbo_core import BackendError, GlobalBackendManager, use_backend
from turbo_core.dispatch import call
from turbo_core.dispatch.specs.attention import ATTENTION_FWD, AttentionBwdArgs, AttentionFwdArgs
from turbo_core.modules import Attention, TurboAttention
from turbo_core.ops import flash_attn_fp8_func, flash_attn_func, flash_attn_varlen_func
from turbo_core.testing.cases.attention import dense_reference, varlen_reference


def _qkv(b=2, s_q=5, s_kv=7, h_q=4, h_kv=2, d_qk=8, d_v=8, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s_q, h_q, d_qk, generator=g).to(dtype)
    k = torch.randn(b, s_kv, h_kv, d_qk, generator=g).to(dtype)
    v = torch.randn(b, s_kv, h_kv, d_v, generator=g).to(dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def _cu(*lengths):
    offs = [0]
    for n in lengths:
        offs.append(offs[-1] + n)
    return torch.tensor(offs, dtype=torch.int32)


def _ref_grads(q, k, v, dout, sink=None, **kw):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s64 = sink.detach().double().requires_grad_() if sink is not None else None
    scale = kw.get("softmax_scale") or q.shape[-1] ** -0.5
    out, lse = dense_reference(*leaves, scale, kw.get("causal", False), kw.get("window_size", (-1, -1)), s64)
    out.backward(dout.double())
    return out, lse, [t.grad for t in leaves], (s64.grad if s64 is not None else None)


# The shared conformance cases run against TORCH in test_conformance_torch.py.

# -- validation ----------------------------------------------------------------------------------

def test_validation_dense_names_the_argument():
    q, k, v = _qkv()
    bad = [
        (ValueError, "^q: expected a 4-D tensor", lambda: flash_attn_func(q[0], k, v)),
        (TypeError, "^k: expected the dtype of q", lambda: flash_attn_func(q, k.half(), v)),
        (TypeError, "^q: expected dtype in", lambda: flash_attn_func(q.double(), k.double(), v.double())),
        (ValueError, r"^k: the number of query heads \(3\)", lambda: flash_attn_func(q[:, :, :3], k, v)),
        (ValueError, "^k: expected the head dim of q", lambda: flash_attn_func(q[..., :6], k, v)),
        (ValueError, "^v: expected the batch, sequence and head dims of k", lambda: flash_attn_func(q, k, v[:, :6])),
        (ValueError, "^k: expected the batch size of q", lambda: flash_attn_func(q, k[:1], v[:1])),
        (ValueError, "^k: expected a tensor on cpu", lambda: flash_attn_func(q, k.to("meta"), v)),
        (ValueError, "^window_size: expected values >= -1", lambda: flash_attn_func(q, k, v, window_size=(-2, 0))),
        (TypeError, "^window_size: expected a pair of ints", lambda: flash_attn_func(q, k, v, window_size=(3,))),
        (TypeError, "^window_size: expected a pair of ints", lambda: flash_attn_func(q, k, v, window_size=(1.5, 0))),
        (ValueError, r"^sink: expected shape \(4,\)", lambda: flash_attn_func(q, k, v, sink=torch.zeros(2))),
        (TypeError, "^sink: expected dtype in", lambda: flash_attn_func(q, k, v, sink=torch.zeros(4).bfloat16())),
        (ValueError, r"^dropout_p: expected a float in \[0, 1\)", lambda: flash_attn_func(q, k, v, dropout_p=1.5)),
        (TypeError, "^softmax_scale: expected None or a finite float",
         lambda: flash_attn_func(q, k, v, softmax_scale="0.1")),
        (TypeError, "^softmax_scale: expected None or a finite float",
         lambda: flash_attn_func(q, k, v, softmax_scale=float("nan"))),
        (TypeError, "^causal: expected a bool", lambda: flash_attn_func(q, k, v, causal="yes")),
        (TypeError, "^deterministic: expected a bool", lambda: flash_attn_func(q, k, v, deterministic=1)),
        (ValueError, "^bias: attention bias is not supported", lambda: flash_attn_func(q, k, v, bias=torch.zeros(1))),
        (ValueError, "^alibi_slopes: ALiBi is not supported",
         lambda: flash_attn_func(q, k, v, alibi_slopes=torch.zeros(4))),
        (ValueError, "^return_attn_probs: not supported", lambda: flash_attn_func(q, k, v, return_attn_probs=True)),
        (TypeError, "^q: expected a torch.Tensor", lambda: flash_attn_func(q.tolist(), k, v)),
    ]
    for exc, msg, fn in bad:
        with pytest.raises(exc, match=msg):
            fn()


def test_validation_varlen_names_the_argument():
    q = torch.randn(12, 4, 8)
    k = v = torch.randn(10, 2, 8)
    cq, ck = _cu(5, 7), _cu(4, 6)
    ok = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=7, max_seqlen_k=6)

    def run(**kw):
        return flash_attn_varlen_func(q, k, v, **{**ok, **kw})

    bad = [
        (ValueError, "^q: expected a 3-D tensor", lambda: flash_attn_varlen_func(q[None], k, v, cq, ck, 7, 6)),
        (ValueError, "^cu_seqlens_q: required", lambda: run(cu_seqlens_q=None)),
        (TypeError, r"^cu_seqlens_q: expected dtype in \(int32\)", lambda: run(cu_seqlens_q=cq.long())),
        (ValueError, "^cu_seqlens_k: expected a 1-D tensor", lambda: run(cu_seqlens_k=ck[None])),
        (ValueError, r"^cu_seqlens_q: expected cu_seqlens\[0\] == 0", lambda: run(cu_seqlens_q=cq + 1)),
        (ValueError, "^cu_seqlens_q: expected non-decreasing offsets",
         lambda: run(cu_seqlens_q=torch.tensor([0, 8, 5], dtype=torch.int32))),
        (ValueError, r"^cu_seqlens_k: the last offset \(11\) exceeds the 10 packed tokens",
         lambda: run(cu_seqlens_k=_cu(5, 6))),
        (ValueError, r"^max_seqlen_q: 6 is shorter than the longest sequence \(7\)", lambda: run(max_seqlen_q=6)),
        (ValueError, "^max_seqlen_k: expected an int >= 0, got -1", lambda: run(max_seqlen_k=-1)),
        (ValueError, "^cu_seqlens_k: expected the shape of cu_seqlens_q", lambda: run(cu_seqlens_k=_cu(4, 3, 3))),
        (ValueError, "^cu_seqlens_k: expected a tensor on cpu", lambda: run(cu_seqlens_k=ck.to("meta"))),
        (ValueError, "^v: expected the batch, sequence and head dims of k",
         lambda: flash_attn_varlen_func(q, k, v[:9], cq, ck, 7, 6)),
    ]
    for exc, msg, fn in bad:
        with pytest.raises(exc, match=msg):
            fn()


def test_validation_never_reads_device_values():
    """Off the CPU the validator checks metadata only (reading cu_seqlens would be a host sync):
    meta tensors, whose values cannot be read, pass."""
    q = torch.empty(12, 4, 8, device="meta")
    k = torch.empty(10, 2, 8, device="meta")
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    ATTENTION_FWD.check_args(AttentionFwdArgs(q, k, k, cu, cu, 7, 6))


def test_primitive_validation_of_backward_and_strides():
    q, k, v = _qkv()
    out, lse = call("attention_fwd", AttentionFwdArgs(q, k, v))
    with pytest.raises(ValueError, match=r"^lse: expected shape \(2, 4, 5\)"):
        call("attention_bwd", AttentionBwdArgs(out, q, k, v, out, lse.transpose(1, 2)))
    with pytest.raises(ValueError, match=r"^dout: expected shape \(2, 5, 4, 8\)"):
        call("attention_bwd", AttentionBwdArgs(out[:, :4], q, k, v, out, lse))
    with pytest.raises(TypeError, match="^lse: expected dtype in"):
        call("attention_bwd", AttentionBwdArgs(out, q, k, v, out, lse.double()))
    strided = torch.randn(2, 5, 4, 16)[..., ::2]
    with pytest.raises(ValueError, match="^q: expected unit stride in the last"):
        call("attention_fwd", AttentionFwdArgs(strided, k, v))
    with pytest.raises(ValueError, match="^cu_seqlens_q: given with 4-D"):
        call("attention_fwd", AttentionFwdArgs(q, k, v, _cu(5, 5), _cu(7, 7)))


def test_dropout_is_declined_by_the_reference():
    q, k, v = _qkv()
    with pytest.raises(BackendError, match="dropout_p=0.0 only"):
        flash_attn_func(q, k, v, dropout_p=0.1)


def test_fp8_validation():
    q, k, v = _qkv(d_qk=16, d_v=16)
    with pytest.raises(ValueError, match="^fp8_config: .*BLOCKWISE"):
        flash_attn_fp8_func(q, k, v, fp8_config=types.SimpleNamespace(granularity="TENSORWISE"))
    with pytest.raises(ValueError, match="^fp8_config: .*block_size 64"):
        flash_attn_fp8_func(q, k, v, fp8_config=types.SimpleNamespace(granularity="BLOCKWISE", block_size=128))
    with pytest.raises(ValueError, match="^fp8_config: .*E4M3 only"):
        flash_attn_fp8_func(q, k, v, fp8_config=types.SimpleNamespace(granularity="BLOCKWISE", format="E5M2"))
    with pytest.raises(ValueError, match="^q: expected a 4-D tensor"):
        flash_attn_fp8_func(q[0], k, v)
    with pytest.raises(ValueError, match="^bias:"):
        flash_attn_fp8_func(q, k, v, bias=torch.zeros(1))


def _fq_e4m3(x):
    """Per (batch, head, 64-row block) E4M3 fake quantization of x [b, s, h, d], block by block."""
    out = torch.empty(x.shape, dtype=torch.float64)
    for b in range(x.shape[0]):
        for h in range(x.shape[2]):
            for r0 in range(0, x.shape[1], 64):
                blk = x[b, r0:r0 + 64, h].float()
                amax = blk.abs().max()
                scale = amax / 448 if amax > 0 else torch.tensor(1.0)
                out[b, r0:r0 + 64, h] = ((blk / scale).to(torch.float8_e4m3fn).float() * scale).double()
    return out


def test_fp8_numerics_are_the_documented_ones():
    """fp32 in, fp32 out: the FP8 path equals float64 math on the documented quantization (and is
    measurably different from exact attention)."""
    q, k, v = _qkv(b=1, s_q=70, s_kv=100, h_q=2, h_kv=1, d_qk=16, d_v=16, seed=3, grad=True)
    dout = torch.randn(1, 70, 2, 16)
    out = flash_attn_fp8_func(q, k, v, causal=True)
    out.backward(dout)
    qh, kh, vh, doh = (_fq_e4m3(t.detach()) for t in (q, k, v, dout))
    scale = 16 ** -0.5
    vis = torch.ones(70, 100, dtype=torch.bool).tril(diagonal=30)
    for h in range(2):
        s = (qh[0, :, h] @ kh[0, :, 0].t() * scale).masked_fill(~vis, float("-inf"))
        p = torch.softmax(s, dim=-1)
        p8 = (p.float() * 448).to(torch.float8_e4m3fn).double() / 448
        torch.testing.assert_close(out[0, :, h].double(), p8 @ vh[0, :, 0], rtol=1e-5, atol=1e-5)
        dp = doh[0, :, h] @ vh[0, :, 0].t()
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        torch.testing.assert_close(q.grad[0, :, h].double(), ds @ kh[0, :, 0] * scale, rtol=1e-4, atol=1e-4)
    exact = flash_attn_func(q.detach(), k.detach(), v.detach(), causal=True)
    assert (out - exact).abs().max() > 1e-3


# -- semantics and edge cases --------------------------------------------------------------------

def test_fully_masked_rows_give_zero_out_and_minus_inf_lse():
    # s_q = 9 > s_kv = 4 with bottom-right causal: query rows 0..4 see no key.
    q, k, v = _qkv(b=1, s_q=9, s_kv=4, grad=True)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert torch.all(out[:, :5] == 0) and torch.all(torch.isneginf(lse[:, :, :5]))
    assert torch.isfinite(lse[:, :, 5:]).all()
    assert not lse.requires_grad
    out.square().sum().backward()
    assert torch.all(q.grad[:, :5] == 0) and torch.isfinite(q.grad).all()
    # With a sink those rows attend to the sink only: out stays 0, lse = sink.
    sink = torch.randn(4)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True, sink=sink)
    assert torch.all(out[:, :5] == 0)
    torch.testing.assert_close(lse[0, :, :5], sink[:, None].expand(4, 5))


def test_empty_batch_sequences_and_varlen():
    q, k, v = _qkv(b=0, grad=True)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (0, 5, 4, 8) and lse.shape == (0, 4, 5)
    out.sum().backward()
    assert q.grad.shape == q.shape
    q, k, v = _qkv(b=2, s_q=0, s_kv=0, grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    out.sum().backward()
    assert out.shape == (2, 0, 4, 8) and k.grad.shape == k.shape
    q, k = torch.randn(0, 4, 8, requires_grad=True), torch.randn(0, 2, 8, requires_grad=True)
    out, lse = flash_attn_varlen_func(q, k, k, _cu(), _cu(), 0, 0, return_lse=True)
    assert out.shape == (0, 4, 8) and lse.shape == (4, 0)


def test_varlen_rows_past_the_last_offset_are_empty():
    q, k = torch.randn(9, 2, 8, requires_grad=True), torch.randn(6, 2, 8)
    out, lse = flash_attn_varlen_func(q, k, k, _cu(3, 4), _cu(2, 4), 4, 4, return_lse=True)
    assert torch.all(out[7:] == 0) and torch.all(torch.isneginf(lse[:, 7:]))
    want, want_lse = varlen_reference(q.double(), k.double(), k.double(), (3, 4), (2, 4), 8 ** -0.5,
                                      False, (-1, -1), None)
    torch.testing.assert_close(out[:7].double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lse[:, :7].double(), want_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d_qk,d_v", [(64, 64), (128, 128), (256, 256), (192, 128)])
def test_head_dims(d_qk, d_v):
    q, k, v = _qkv(b=1, s_q=6, s_kv=9, h_q=2, h_kv=1, d_qk=d_qk, d_v=d_v, dtype=torch.bfloat16, grad=True)
    dout = torch.randn(1, 6, 2, d_v).bfloat16()
    out = flash_attn_func(q, k, v, causal=True)
    out.backward(dout)
    want, _, grads, _ = _ref_grads(q, k, v, dout, causal=True)
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    for got, ref in zip((q.grad, k.grad, v.grad), grads, strict=True):
        torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("layout", ["sbhd", "bhsd", "strided-d"])
def test_strided_views_keep_q_layout(layout):
    torch.manual_seed(4)
    if layout == "sbhd":
        q, k, v = (torch.randn(5, 2, h, 8).transpose(0, 1) for h in (4, 2, 2))
    elif layout == "bhsd":
        q, k, v = (torch.randn(2, h, 5, 8).transpose(1, 2) for h in (4, 2, 2))
    else:
        q, k, v = (torch.randn(2, 5, h, 16)[..., ::2] for h in (4, 2, 2))
    q.requires_grad_()
    out = flash_attn_func(q, k, v, causal=True)
    want, _, grads, _ = _ref_grads(q, k, v, torch.ones(2, 5, 4, 8), causal=True)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    if layout == "sbhd":
        assert out.transpose(0, 1).is_contiguous()
    elif layout == "bhsd":
        assert out.transpose(1, 2).is_contiguous()
    else:
        assert out.is_contiguous()
    out.sum().backward()
    torch.testing.assert_close(q.grad.double(), grads[0], rtol=1e-4, atol=1e-4)


def test_return_lse_and_deterministic_backward():
    q, k, v = _qkv(grad=True)
    sink = torch.randn(4, requires_grad=True)
    assert isinstance(flash_attn_func(q, k, v), torch.Tensor)
    grads = []
    for _ in range(2):
        for t in (q, k, v, sink):
            t.grad = None
        out, lse = flash_attn_func(q, k, v, causal=True, sink=sink, deterministic=True, return_lse=True)
        assert lse.shape == (2, 4, 5) and lse.dtype == torch.float32
        out.square().sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v, sink)])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_sink_without_grad_and_lse_only_use():
    q, k, v = _qkv(grad=True)
    out, lse = flash_attn_func(q, k, v, return_lse=True, sink=torch.randn(4))
    out.sum().backward()
    assert q.grad is not None


# -- backward pinned to the forward's backend ----------------------------------------------------

def _spy_plugin(monkeypatch, use_plugins, primitives):
    from turbo_core.reference import attention

    return install_spy_backend(monkeypatch, use_plugins, name="ATTNSPY", reference=attention, primitives=primitives)


def test_backward_runs_on_the_forward_backend(monkeypatch, use_plugins):
    calls = _spy_plugin(monkeypatch, use_plugins, ["attention_fwd", "attention_bwd"])
    q, k, v = _qkv(grad=True)
    GlobalBackendManager.set_attn_backend("ATTNSPY")
    out = flash_attn_func(q, k, v, causal=True)
    GlobalBackendManager.set_attn_backend("TORCH")  # changing the setting must not move the backward
    out.sum().backward()
    assert calls == ["attention_fwd", "attention_bwd"]
    with use_backend("TORCH"):
        out = flash_attn_func(q, k, v)
    GlobalBackendManager.set_attn_backend("ATTNSPY")
    out.sum().backward()  # outside the block: the backward still runs on TORCH
    assert calls == ["attention_fwd", "attention_bwd"]


def test_backward_refuses_to_swap_backend(monkeypatch, use_plugins):
    _spy_plugin(monkeypatch, use_plugins, ["attention_fwd"])
    q, k, v = _qkv(grad=True)
    GlobalBackendManager.set_attn_backend("ATTNSPY")
    out = flash_attn_func(q, k, v)
    GlobalBackendManager.set_attn_backend(None)
    with pytest.raises(BackendError, match="ATTNSPY has no kernel for attention_bwd.*backend of its forward"):
        out.sum().backward()


# -- custom ops ----------------------------------------------------------------------------------

def test_opcheck_custom_ops():
    q, k, v = _qkv(s_q=5, s_kv=7, d_v=6)
    sink = torch.randn(4)
    dense = (q, k, v, None, None, 0, 0, 0.35, True, 3, -1, sink, 0.0, False)
    torch.library.opcheck(torch.ops.turbo.attention_fwd.default, dense)
    torch.library.opcheck(torch.ops.turbo.attention_fwd.default, (q, k, v, None, None, 0, 0, 0.35, False, -1, -1,
                                                                  None, 0.0, True))
    out, lse = torch.ops.turbo.attention_fwd(*dense)
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.turbo.attention_bwd.default, (dout, q, k, v, out, lse, *dense[3:]))

    qv, kv, vv = torch.randn(21, 3, 8), torch.randn(18, 1, 8), torch.randn(18, 1, 8)
    cq, ck = _cu(1, 7, 13), _cu(3, 7, 8)
    varlen = (qv, kv, vv, cq, ck, 13, 8, 0.35, True, -1, -1, None, 0.0, False)
    torch.library.opcheck(torch.ops.turbo.attention_fwd.default, varlen)
    out, lse = torch.ops.turbo.attention_fwd(*varlen)
    torch.library.opcheck(torch.ops.turbo.attention_bwd.default,
                          (torch.randn_like(out), qv, kv, vv, out, lse, *varlen[3:]))

    fp8 = (q, k, v, 0.35, True, -1, -1, 0.0, False)
    torch.library.opcheck(torch.ops.turbo.attention_fp8_fwd.default, fp8)
    out, lse = torch.ops.turbo.attention_fp8_fwd(*fp8)
    torch.library.opcheck(torch.ops.turbo.attention_fp8_bwd.default, (dout, q, k, v, out, lse, *fp8[3:]))


# -- torch.compile -------------------------------------------------------------------------------

def _compiled(fn):
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


def test_compile_fullgraph_dense_forward_backward():
    q, k, v = _qkv(b=2, s_q=6, s_kv=9, h_q=3, h_kv=1, grad=True)
    sink = torch.randn(3, requires_grad=True)

    def fn(q, k, v, sink):
        out, lse = flash_attn_func(q, k, v, causal=True, window_size=(4, -1), sink=sink, return_lse=True)
        return out, lse

    out, lse = _compiled(fn)(q, k, v, sink)
    dout = torch.randn_like(out)
    out.backward(dout)
    want, want_lse, grads, dsink = _ref_grads(q, k, v, dout, sink, causal=True, window_size=(4, -1))
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-4)
    for got, ref in zip((q.grad, k.grad, v.grad, sink.grad), (*grads, dsink), strict=True):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4)


def test_compile_fullgraph_sbhd_view():
    torch.manual_seed(5)
    q = torch.randn(5, 2, 4, 8).transpose(0, 1).requires_grad_()
    k, v = (torch.randn(7, 2, 2, 8).transpose(0, 1) for _ in range(2))
    out = _compiled(lambda q, k, v: flash_attn_func(q, k, v, causal=True))(q, k, v)
    assert out.transpose(0, 1).is_contiguous()
    out.sum().backward()
    want, _, grads, _ = _ref_grads(q, k, v, torch.ones(2, 5, 4, 8), causal=True)
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q.grad.double(), grads[0], rtol=1e-4, atol=1e-4)


def test_compile_fullgraph_same_tensor_as_q_k_v():
    x = torch.randn(2, 6, 2, 8, requires_grad=True)
    out = _compiled(lambda x: flash_attn_func(x, x, x, causal=True))(x)
    out.square().sum().backward()
    x64 = x.detach().double().requires_grad_()
    want, _ = dense_reference(x64, x64, x64, 8 ** -0.5, True, (-1, -1), None)
    want.square().sum().backward()
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-4)


def test_compile_fullgraph_varlen_forward_backward():
    torch.manual_seed(6)
    q = torch.randn(21, 4, 8, requires_grad=True)
    k = torch.randn(21, 2, 8, requires_grad=True)
    v = torch.randn(21, 2, 8, requires_grad=True)
    cu = _cu(1, 7, 13)
    fn = _compiled(lambda q, k, v, cu: flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, causal=True))
    out = fn(q, k, v, cu)
    out.square().sum().backward()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want, _ = varlen_reference(*leaves, (1, 7, 13), (1, 7, 13), 8 ** -0.5, True, (-1, -1), None)
    want.square().sum().backward()
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    for got, ref in zip((q.grad, k.grad, v.grad), leaves, strict=True):
        torch.testing.assert_close(got.double(), ref.grad, rtol=1e-4, atol=1e-4)


def test_compile_dynamic_varlen_two_packings():
    """dynamic=True: symbolic token counts and max_seqlen (validated again with real values at run time)."""
    fn = torch.compile(lambda q, k, cu, m: flash_attn_varlen_func(q, k, k, cu, cu, m, m, causal=True),
                       fullgraph=True, backend="aot_eager", dynamic=True)
    for lens in [(1, 7, 13), (2, 5, 9, 4)]:
        q = torch.randn(sum(lens), 4, 8, requires_grad=True)
        k = torch.randn(sum(lens), 2, 8)
        out = fn(q, k, _cu(*lens), max(lens))
        out.sum().backward()
        want, _ = varlen_reference(q.double(), k.double(), k.double(), lens, lens, 8 ** -0.5, True, (-1, -1), None)
        torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
        assert q.grad.shape == q.shape


def test_compile_fullgraph_fp8_matches_eager():
    q, k, v = _qkv(b=1, s_q=70, s_kv=70, h_q=2, h_kv=1, d_qk=16, d_v=16, dtype=torch.bfloat16, grad=True)
    eager = flash_attn_fp8_func(q, k, v, causal=True)
    eager.sum().backward()
    want = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    out = _compiled(lambda q, k, v: flash_attn_fp8_func(q, k, v, causal=True))(q, k, v)
    out.sum().backward()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    for got, ref in zip((q.grad, k.grad, v.grad), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_module_compiles_fullgraph():
    mod = Attention(causal=True, window_size=(3, 0))
    q, k, v = _qkv(grad=True)
    sink = torch.randn(4, requires_grad=True)
    out = _compiled(mod)(q, k, v, sink=sink)
    out.sum().backward()
    want, _, grads, dsink = _ref_grads(q, k, v, torch.ones(2, 5, 4, 8), sink, causal=True, window_size=(3, 0))
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sink.grad.double(), dsink, rtol=1e-4, atol=1e-4)


# -- module --------------------------------------------------------------------------------------

def test_module_matches_functional_and_repr():
    assert TurboAttention is Attention
    q, k, v = _qkv(grad=True)
    mod = Attention(softmax_scale=0.2, causal=True, return_lse=True)
    out, lse = mod(q, k, v)
    want, want_lse = flash_attn_func(q, k, v, softmax_scale=0.2, causal=True, return_lse=True)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)
    assert "causal=True" in repr(mod) and "softmax_scale=0.2" in repr(mod)
    assert list(mod.parameters()) == [] and mod.state_dict() == {}
    fp8 = Attention(fp8_config=types.SimpleNamespace(granularity="BLOCKWISE", block_size=64))
    torch.testing.assert_close(fp8(q, k, v), flash_attn_fp8_func(q, k, v), rtol=0, atol=0)
    # dropout is a training-mode thing: eval() runs dropout_p = 0 (served by the reference).
    assert Attention(dropout_p=0.1).eval()(q, k, v).shape == (2, 5, 4, 8)


def test_module_validation():
    with pytest.raises(ValueError, match="^alibi_slopes:"):
        Attention(alibi_slopes=torch.zeros(4))
    with pytest.raises(ValueError, match="^return_attn_probs:"):
        Attention(return_attn_probs=True)
    with pytest.raises(ValueError, match="^window_size:"):
        Attention(window_size=(-3, 0))
    with pytest.raises(ValueError, match="^dropout_p:"):
        Attention(dropout_p=2.0)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="^sink: not supported with fp8_config"):
        Attention(fp8_config=types.SimpleNamespace(granularity="BLOCKWISE"))(q, k, v, sink=torch.zeros(4))
    with pytest.raises(ValueError, match="^bias:"):
        Attention()(q, k, v, bias=torch.zeros(1))
