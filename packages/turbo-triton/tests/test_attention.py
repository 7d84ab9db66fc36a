"""TRITON flash attention under the interpreter, beyond the conformance suite
(``test_conformance_triton.py`` runs every attention case of turbo-core's suite on TRITON):

- the head dims of the common models (64, 128, 256 and MLA's qk 192 / v 128) at small sequence lengths,
  whose tiles differ from the conformance suite's d=16/24 (BLOCK_D = 64..256, masked head-dim tails
  for 192), against independent float64 math;
- ``deterministic=True``: the backward is bit-identical across runs and agrees with the atomic one;
- a tile larger than the sequence (every key tile masked) and a sequence longer than several tiles
  with a window that leaves full tiles in the middle (the unmasked loop);
- capability reasons for what the kernels decline (dropout, head dims over 256).

Inputs are fp16 (the interpreter's bf16 dot is wrong; bf16 runs upcast there and is covered by the
conformance suite).
"""

from __future__ import annotations

import pytest
import torch
from attention_math import f64_attention

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.testing import assert_close_normwise, assert_close_to_reference
from turbo_triton.attention import launch


def _inputs(b, s_q, s_k, h_q, h_k, d_qk, d_v, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s_q, h_q, d_qk, generator=g).to(dtype)
    k = torch.randn(b, s_k, h_k, d_qk, generator=g).to(dtype)
    v = torch.randn(b, s_k, h_k, d_v, generator=g).to(dtype)
    dout = torch.randn(b, s_q, h_q, d_v, generator=g).to(dtype)
    return q, k, v, dout


def _check(q, k, v, dout, causal=False, window=(-1, -1), deterministic=False):
    scale = q.shape[-1] ** -0.5
    fwd = AttentionFwdArgs(q, k, v, causal=causal, window_size=window)
    out, lse = launch.attention_fwd(fwd)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = f64_attention(*leaves, scale, causal, window)
    want.backward(dout.double())
    assert_close_to_reference(out, want.detach(), dtype=q.dtype, what="out")
    bwd = AttentionBwdArgs(dout, q, k, v, out, lse, causal=causal, window_size=window, deterministic=deterministic)
    grads = launch.attention_bwd(bwd)
    for name, got, leaf in zip(("dq", "dk", "dv"), grads[:3], leaves, strict=True):
        assert got.shape == leaf.shape and got.dtype == q.dtype, name
        assert_close_normwise(got, leaf.grad, dtype=q.dtype, what=name)
    return grads


@pytest.mark.parametrize("d_qk,d_v", [(64, 64), (128, 128), (256, 256), (192, 128)])
def test_model_head_dims(d_qk, d_v):
    q, k, v, dout = _inputs(1, 19, 19, 2, 1, d_qk, d_v)
    _check(q, k, v, dout, causal=True)


def test_full_tiles_inside_a_window():
    # 80 keys = 5 tiles of 16 (the interpreter's tile): with window (40, 8) rows past the first
    # tiles have full key tiles in the middle, run by the unmasked loop.
    q, k, v, dout = _inputs(1, 80, 80, 2, 2, 16, 16)
    _check(q, k, v, dout, window=(40, 8))
    _check(q, k, v, dout, causal=True)


def test_sequence_shorter_than_a_tile():
    q, k, v, dout = _inputs(2, 3, 5, 2, 1, 16, 16)
    _check(q, k, v, dout)
    _check(q, k, v, dout, causal=True)


def test_deterministic_backward_is_bit_identical():
    q, k, v, dout = _inputs(2, 45, 45, 4, 2, 32, 32)
    first = _check(q, k, v, dout, causal=True, deterministic=True)
    again = _check(q, k, v, dout, causal=True, deterministic=True)
    for a, b in zip(first[:3], again[:3], strict=True):
        assert torch.equal(a, b)
    atomic = _check(q, k, v, dout, causal=True, deterministic=False)
    for a, b in zip(first[:3], atomic[:3], strict=True):
        assert_close_to_reference(a, b.double(), dtype=q.dtype)


def test_declines_with_reasons():
    q, k, v, _ = _inputs(1, 4, 4, 1, 1, 16, 16)
    assert "dropout_p=0.0" in launch.can_handle(AttentionFwdArgs(q, k, v, dropout_p=0.1))
    big = torch.zeros(1, 4, 1, 320, dtype=torch.float16)
    assert "head dims up to 256" in launch.can_handle(AttentionFwdArgs(big, big, big))
    assert launch.can_handle(AttentionFwdArgs(q, k, v)) is None
    i8 = q.to(torch.int8)
    assert "fp16/bf16/fp32" in launch.can_handle(AttentionFwdArgs(i8, i8, i8))


def test_warp_specialized_forward_tile(monkeypatch):
    # The tile's warp_specialize flag reaches the forward's unmasked key loop (the 80-key window case
    # has full tiles in the middle); the result is the same float64-checked attention.
    from turbo_triton.attention import configs

    real = configs.pick
    monkeypatch.setattr(configs, "pick", lambda kernel, *a, **k: configs.Tile(16, 16, 4, 1, True)
                        if kernel == "fwd" else real(kernel, *a, **k))
    q, k, v, dout = _inputs(1, 80, 80, 2, 2, 16, 16)
    _check(q, k, v, dout, window=(40, 8))


def test_warp_specialize_only_where_a_kernel_has_it(monkeypatch):
    from turbo_triton.attention import configs

    real = configs.pick
    monkeypatch.setattr(configs, "pick", lambda kernel, *a, **k: configs.Tile(16, 16, 4, 1, True)
                        if kernel == "dq" else real(kernel, *a, **k))
    q, k, v, dout = _inputs(1, 20, 20, 1, 1, 16, 16)
    out, lse = launch.attention_fwd(AttentionFwdArgs(q, k, v))
    with pytest.raises(ValueError, match="no warp-specialized loop"):
        launch.attention_bwd(AttentionBwdArgs(dout, q, k, v, out, lse, deterministic=True))


def test_tile_override_parses_warp_specialize(monkeypatch):
    from turbo_triton.attention import configs

    monkeypatch.setenv("TURBO_TRITON_ATTN_TILES", "fwd=64,64,4,3,1;dq=64,64,4,2")
    assert configs.override("fwd") == configs.Tile(64, 64, 4, 3, True)
    assert configs.override("dq") == configs.Tile(64, 64, 4, 2, False)
    monkeypatch.setenv("TURBO_TRITON_ATTN_TILES", "fwd=64,64,4,3,2")
    with pytest.raises(ValueError, match="warp_specialize 0/1"):
        configs.override("fwd")


def test_short_walk_tiles_on_sm90(monkeypatch):
    # sm90 (the tuned table): d=128 forwards that walk at most 8192 keys take 4-warp 64x64 programs, longer
    # walks the 8-warp 128x128 tile; the d=128 backward takes 4-warp 64x64 tiles at every length; fp32
    # halves the tile.
    from turbo_triton.attention import configs

    monkeypatch.delenv("TURBO_TRITON_ATTN_TILES", raising=False)
    assert configs.pick("fwd", "sm90", 128, 2, 8192) == configs.Tile(64, 64, 4, 3)
    assert configs.pick("fwd", "sm90", 128, 2, 8193) == configs.Tile(128, 128, 8, 3)
    assert configs.pick("fwd", "sm90", 128, 2) == configs.Tile(128, 128, 8, 3)
    assert configs.pick("fwd", "sm90", 64, 2, 4096) == configs.Tile(64, 64, 4, 3)
    assert configs.pick("fwd", "sm90", 64, 2, 8192) == configs.Tile(128, 64, 8, 4)
    assert configs.pick("dkdv", "sm90", 128, 2, 512) == configs.pick("dkdv", "sm90", 128, 2, 16384) \
        == configs.Tile(64, 64, 4, 2)
    assert configs.pick("fwd", "sm90", 128, 4, 1024) == configs.Tile(32, 32, 4, 3)
    assert configs.pick("fwd", "gfx942", 128, 2, 512) == configs.pick("fwd", "gfx942", 128, 2)
    monkeypatch.setenv("TURBO_TRITON_ATTN_TILES", "fwd=128,64,8,3")
    assert configs.pick("fwd", "sm90", 128, 2, 512) == configs.Tile(128, 64, 8, 3)


def test_mla_tiles_on_sm90(monkeypatch):
    # sm90: MLA (q/k 192, v 128) has its own backward tiles; a 192-wide v, or no v width given, takes
    # d=256's; archs without an MLA entry take their 256 tiles.
    from turbo_triton.attention import configs

    monkeypatch.delenv("TURBO_TRITON_ATTN_TILES", raising=False)
    assert configs.pick("dkdv", "sm90", 192, 2, 4096, d_v=128) == configs.Tile(32, 64, 4, 2)
    assert configs.pick("dq", "sm90", 192, 2, 4096, d_v=128) == configs.Tile(64, 32, 4, 2)
    assert configs.pick("dq", "sm90", 192, 2, 4096, d_v=192) == configs.pick("dq", "sm90", 256, 2) \
        == configs.pick("dq", "sm90", 192, 2) == configs.Tile(128, 32, 8, 2)
    assert configs.pick("fwd", "sm90", 256, 2, 512) == configs.Tile(64, 64, 4, 3)
    assert configs.pick("dkdv", "gfx942", 192, 2, d_v=128) == configs.pick("dkdv", "gfx942", 256, 2)
    assert configs.pick("dkdv", "sm90", 192, 4, d_v=128) == configs.Tile(16, 32, 4, 2)  # fp32 halves
