"""TRITON FP8 attention (``attention_fp8_fwd`` / ``attention_fp8_bwd``) under the interpreter.

- The quantization kernel against torch's own arithmetic (``amax / 448``, ``x / scale``, the
  ``float8_e4m3fn`` cast, which rounds to nearest even): bytes and scales bit-identical, also for
  round-half-even ties, subnormals, an all-zero block, strided input and every input dtype; and its
  dequantized values bit-identical to the reference's ``fake_quant_e4m3_blocks``.
- Forward and backward: SNR against unquantized float64 attention (autograd for the gradients)
  at least the spec's gate, and close to the TORCH reference's FP8 emulation (the same quantization
  of q, k, v, dout and P; the forward differs from it only by quantizing P against the running row
  maximum, the backward only by fp32 vs float64 arithmetic), which a kernel skipping any of the
  quantizations fails.
- Rows that see no key (causal with s_q > s_kv): out 0, lse -inf, dq 0.
- Capability reasons and the tile override's checks.

Why this grid: sequence lengths over 64 put several scale blocks in a tile walk (70, 130) and end
mid-block; 13/29 give s_q != s_kv both ways (bottom-right causal, empty rows); GQA 4->2 and 3->1;
head dims 16 and 24 are padded to the kernels' 32-wide head tile, 32/16 splits d_qk from d_v.
"""

from __future__ import annotations

import pytest
import torch
from attention_math import f64_attention

from turbo_core.dispatch.specs.attention import AttentionFp8BwdArgs, AttentionFp8FwdArgs
from turbo_core.reference import attention as ref
from turbo_core.testing.numerics import snr_db
from turbo_triton.attention import fp8_launch
from turbo_triton.attention.configs import Tile
from turbo_triton.attention.fp8_quant import quantize_blocks

GATE_DB = 20.0  # the spec's (turbo_core.testing.cases.attention.FP8_ATTENTION_SNR_DB)


# -- quantization --------------------------------------------------------------------------------

def _torch_quant(x_bhsd: torch.Tensor):
    """Bytes ``[b, h, s, d]`` (uint8) and scales ``[b, h, blocks]`` by torch's arithmetic."""
    b, h, s, d = x_bhsd.shape
    x = x_bhsd.float()
    blocks = -(-s // 64)
    xp = torch.nn.functional.pad(x, (0, 0, 0, blocks * 64 - s)).view(b, h, blocks, 64, d)
    amax = xp.abs().amax(dim=(-1, -2))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (xp / scale[..., None, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.view(b, h, blocks * 64, d)[:, :, :s].view(torch.uint8), scale


def _check_quant(x_bshd: torch.Tensor):
    b, s, h, d = x_bshd.shape
    x_q, x_qt, scale = quantize_blocks(x_bshd, trans=True)
    want_q, want_s = _torch_quant(x_bshd.permute(0, 2, 1, 3))
    blocks = want_s.shape[-1]
    assert torch.equal(scale[..., :blocks], want_s)
    assert torch.all(scale[..., blocks:] == 1.0)
    got = x_q.view(torch.uint8)
    assert torch.equal(got[:, :, :s, :d], want_q)
    assert torch.all(got[:, :, s:] == 0) and torch.all(got[..., d:] == 0)
    assert torch.equal(x_qt.view(torch.uint8).transpose(-1, -2), got)
    deq = got[:, :, :s, :d].view(torch.float8_e4m3fn).float() * scale.repeat_interleave(64, -1)[:, :, :s, None]
    assert torch.equal(deq, ref.fake_quant_e4m3_blocks(x_bshd.permute(0, 2, 1, 3)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quantize_bit_identical(dtype):
    g = torch.Generator().manual_seed(1)
    # magnitudes over 6 decades along the sequence: blocks with very different scales
    x = torch.randn(2, 130, 3, 24, generator=g) * torch.logspace(-3, 3, 130)[None, :, None, None]
    x[0, 64:128, 1] = 0.0  # an all-zero block: scale 1
    _check_quant(x.to(dtype))


def test_quantize_ties_and_subnormals():
    # amax 448 gives scale 1: the values below are E4M3 round-half-even ties (1.0625 -> 1, 1.1875 -> 1.25,
    # 17 -> 16, 19 -> 20, 1.5 * 2**-9 -> 2**-8) and subnormals, where a half-up or flushing cast differs.
    vals = torch.tensor([448.0, 1.0625, 1.1875, 17.0, 19.0, 1.5 * 2**-9, 2**-9, 0.75 * 2**-9, 2.5 * 2**-9, -2**-7,
                         -1.0625, -19.0, 0.4 * 2**-9, 240.0, 232.0, 248.0])
    x = vals.repeat(64 * 16 // vals.numel()).view(1, 64, 1, 16)
    _check_quant(x)


def test_quantize_strided_input():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 70, 16, generator=g).to(torch.bfloat16).transpose(1, 2)  # [b, s, h, d], bhsd memory
    assert not x.is_contiguous()
    _check_quant(x)


# -- attention -----------------------------------------------------------------------------------

# (b, s_q, s_kv, h_q, h_kv, d_qk, d_v), causal, window
CASES = [
    ((1, 70, 70, 4, 2, 16, 16), False, (-1, -1)),
    ((1, 70, 70, 2, 1, 32, 32), True, (-1, -1)),
    ((1, 29, 130, 3, 1, 32, 16), False, (5, 0)),
    ((2, 29, 13, 3, 1, 24, 24), True, (-1, -1)),
    ((1, 13, 29, 2, 2, 16, 16), False, (3, 2)),
]


@pytest.mark.parametrize("shape,causal,window", CASES, ids=lambda c: str(c).replace(" ", ""))
def test_fp8_attention(shape, causal, window):
    b, s_q, s_k, h_q, h_k, d_qk, d_v = shape
    g = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(b, s_q, h_q, d_qk, generator=g).to(torch.bfloat16)
    k = torch.randn(b, s_k, h_k, d_qk, generator=g).to(torch.bfloat16)
    v = torch.randn(b, s_k, h_k, d_v, generator=g).to(torch.bfloat16)
    dout = torch.randn(b, s_q, h_q, d_v, generator=g).to(torch.bfloat16)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = f64_attention(*leaves, d_qk ** -0.5, causal, window)
    want.backward(dout.double())

    fwd = AttentionFp8FwdArgs(q, k, v, causal=causal, window_size=window)
    assert fp8_launch.can_handle(fwd) is None
    out, lse = fp8_launch.attention_fp8_fwd(fwd)
    assert out.shape == (b, s_q, h_q, d_v) and out.dtype == q.dtype and lse.shape == (b, h_q, s_q)
    emu_out, emu_lse = ref.attention_fp8_fwd(fwd)
    assert snr_db(want.detach(), out) >= GATE_DB
    assert snr_db(emu_out, out) >= 26.0
    finite = torch.isfinite(emu_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse[finite], emu_lse[finite], rtol=0, atol=1e-5)  # both from the unquantized P
    empty = ~finite.transpose(1, 2)[..., None].expand_as(out)
    assert torch.all(out[empty] == 0)

    bwd = AttentionFp8BwdArgs(dout, q, k, v, out, lse, causal=causal, window_size=window)
    grads = fp8_launch.attention_fp8_bwd(bwd)
    emu = ref.attention_fp8_bwd(bwd)
    for name, got, leaf, e in zip(("dq", "dk", "dv"), grads, leaves, emu, strict=True):
        assert got.shape == leaf.shape and got.dtype == q.dtype, name
        assert snr_db(leaf.grad, got) >= GATE_DB, name
        assert snr_db(e, got) >= 40.0, name
    assert torch.all(grads[0][empty[..., :1].expand_as(grads[0])] == 0)


def test_forward_p_quantization_single_tile():
    # With every key in one tile the running maximum is the row maximum m, so the kernel's P_q is
    # e4m3(exp(S - m) * 448) exactly: emulate that in float64 (a kernel that skipped quantizing P,
    # or quantized it at another scale, lands near 30 dB here; fp32 arithmetic gives > 100).
    b, s_q, s_k, h, d = 1, 20, 13, 2, 32
    assert fp8_launch.pick("fwd", "interpreter", d).block_n >= s_k
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(b, s, h, d, generator=g) for s in (s_q, s_k, s_k))
    out, _ = fp8_launch.attention_fp8_fwd(AttentionFp8FwdArgs(q, k, v))
    qd, kd, vd = (ref.fake_quant_e4m3_blocks(t.transpose(1, 2)).double() for t in (q, k, v))
    s = qd @ kd.transpose(-1, -2) * d ** -0.5
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p_q = (p * 448).float().to(torch.float8_e4m3fn).double() / 448
    want = ((p_q @ vd) / p.sum(-1, keepdim=True)).transpose(1, 2)
    assert snr_db(want, out) >= 60.0


def test_fp32_inputs_deterministic():
    g = torch.Generator().manual_seed(5)
    q, k, v, dout = (torch.randn(1, 70, 2, 16, generator=g) for _ in range(4))
    args = AttentionFp8FwdArgs(q, k, v, causal=True, deterministic=True)
    out, lse = fp8_launch.attention_fp8_fwd(args)
    assert out.dtype == torch.float32
    bwd = AttentionFp8BwdArgs(dout, q, k, v, out, lse, causal=True, deterministic=True)
    assert fp8_launch.can_handle(bwd) is None
    first = fp8_launch.attention_fp8_bwd(bwd)
    again = fp8_launch.attention_fp8_bwd(bwd)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = f64_attention(*leaves, 16 ** -0.5, True, (-1, -1))
    want.backward(dout.double())
    assert snr_db(want.detach(), out) >= GATE_DB
    for got, leaf in zip(first, leaves, strict=True):
        assert snr_db(leaf.grad, got) >= GATE_DB


# -- capability and tiles ------------------------------------------------------------------------

def test_can_handle_reasons():
    q = torch.randn(1, 4, 1, 16)
    assert "dropout_p" in fp8_launch.can_handle(AttentionFp8FwdArgs(q, q, q, dropout_p=0.1))
    big = torch.randn(1, 4, 1, 320)
    assert "head dims up to 256" in fp8_launch.can_handle(AttentionFp8FwdArgs(big, big, big))
    f8 = q.to(torch.float8_e4m3fn)
    assert "fp16/bf16/fp32" in fp8_launch.can_handle(AttentionFp8FwdArgs(f8, f8, f8))
    assert fp8_launch._arch_reason("sm90") is None and fp8_launch._arch_reason("gfx950") is None
    assert "gfx942" in fp8_launch._arch_reason("gfx942")
    assert "sm80" in fp8_launch._arch_reason("sm80")


def test_tile_override(monkeypatch):
    monkeypatch.setenv("TURBO_TRITON_ATTN_FP8_TILES", "fwd=64,32,4,2;dkdv=32,64,4,1")
    assert fp8_launch.pick("fwd", "sm90", 128) == Tile(64, 32, 4, 2)
    assert fp8_launch.pick("dkdv", "sm90", 128) == Tile(32, 64, 4, 1)
    assert fp8_launch.pick("dq", "sm90", 128) == fp8_launch._SM90[128]["dq"]
    monkeypatch.setenv("TURBO_TRITON_ATTN_FP8_TILES", "fwd=128,128,8,2")
    with pytest.raises(ValueError, match="block_n must divide 64"):
        fp8_launch.pick("fwd", "sm90", 128)
    monkeypatch.setenv("TURBO_TRITON_ATTN_FP8_TILES", "dkdv=128,64,8,2")
    with pytest.raises(ValueError, match="block_m must divide 64"):
        fp8_launch.pick("dkdv", "sm90", 128)
