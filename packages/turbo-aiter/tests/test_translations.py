"""The pure translations and the capability checks (per arch, per dtype), on metadata only."""

from __future__ import annotations

import pytest
import torch

from turbo_aiter import attention, attention_args, gemm_fp4, gemm_fp8, library, rmsnorm
from turbo_core.dispatch.specs.attention import AttentionFwdArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, GemmFp8Args
from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs


def test_padded_head_dim():
    assert [attention_args.padded_head_dim(d) for d in (1, 7, 8, 9, 64, 250)] == [8, 8, 8, 16, 64, 256]


def test_pad_and_unpad_head_dim_are_exact():
    t = torch.randn(2, 3, 5, dtype=torch.float64)
    p = attention_args.pad_head_dim(t, 8)
    assert p.shape == (2, 3, 8) and torch.equal(p[..., :5], t) and torch.all(p[..., 5:] == 0)
    assert attention_args.unpad_head_dim(p, 5).shape == t.shape
    assert attention_args.pad_head_dim(t, 5) is t
    with pytest.raises(ValueError, match="cannot pad"):
        attention_args.pad_head_dim(t, 4)


def test_mask_args():
    assert attention_args.aiter_mask_args(True, (-1, 7)) == (True, -1, 0)  # causal drops the right window
    assert attention_args.aiter_mask_args(True, (3, -1)) == (True, 3, 0)
    assert attention_args.aiter_mask_args(False, (2, 1)) == (False, 2, 1)


def test_window_rewrite_declined_only_when_it_changes_the_mask():
    f = attention_args.window_decline_reason
    assert f(False, (-1, 4), s_q=10, s_kv=8) is None  # right < s_kv: not rewritten
    assert f(False, (-1, 9), s_q=10, s_kv=8) is None  # right >= s_q - 1: every key visible anyway
    assert "seqlen_q=12" in f(False, (-1, 9), s_q=12, s_kv=8)
    assert f(True, (-1, 9), s_q=12, s_kv=8) is None  # causal ignores the right window
    assert f(False, (100, -1), s_q=12, s_kv=8) is None  # the left side is always safe


def test_clear_unowned_rows():
    rows = torch.full((5, 2, 3), 7.0)
    lse = torch.full((2, 5), 7.0)
    attention_args.clear_unowned_rows(torch.tensor([0, 1, 3], dtype=torch.int32), rows=rows, lse=lse)
    assert torch.all(rows[:3] == 7) and torch.all(rows[3:] == 0)
    assert torch.all(lse[:, :3] == 7) and torch.all(lse[:, 3:] == float("-inf"))


def test_preshuffle_weight_matches_the_index_formula():
    from fake_aiter import FakeAiter

    b = torch.randint(0, 256, (32, 64), dtype=torch.uint8)
    s = gemm_fp4.preshuffle_weight(b)
    assert s.shape == b.shape and not torch.equal(s, b)
    assert torch.equal(FakeAiter.unshuffle_weight(s), b)
    with pytest.raises(ValueError, match="N % 16"):
        gemm_fp4.preshuffle_weight(b[:8])


def test_shuffle_scales_pads_and_matches_the_index_formula():
    from fake_aiter import FakeAiter

    sc = torch.randint(0, 256, (37, 5), dtype=torch.uint8)
    s = gemm_fp4.shuffle_scales(sc)
    assert s.shape == (256, 8)
    assert torch.equal(FakeAiter.unshuffle_scales(s, 37, 5), sc)
    assert gemm_fp4.out_rows(1) == 256 and gemm_fp4.out_rows(256) == 256 and gemm_fp4.out_rows(257) == 512


def test_rowwise_scales_reshape_per_layout():
    a = torch.zeros(4, 3, dtype=torch.float8_e4m3fnuz)  # trans_a: stored [K, M] = [4, 3]
    b = torch.zeros(5, 4, dtype=torch.float8_e4m3fnuz)  # trans_b: stored [N, K]
    sa, sb = torch.arange(3.0).view(1, 3), torch.arange(5.0).view(5, 1)
    xs, ws = gemm_fp8.rowwise_scales(GemmFp8Args(a, sa, b, sb, True, True, torch.bfloat16, "ROWWISE"))
    assert xs.shape == (3, 1) and ws.shape == (1, 5)
    assert torch.equal(xs.view(-1), sa.view(-1)) and torch.equal(ws.view(-1), sb.view(-1))


def test_blockwise_tile_scales_of_a_expand_to_rows():
    a = torch.zeros(130, 256, dtype=torch.float8_e4m3fn)
    b = torch.zeros(256, 128, dtype=torch.float8_e4m3fn)  # stored [K, N]: tiles [2, 1]
    sa = torch.tensor([[1.0, 2.0], [3.0, 4.0]])  # 128x128 tiles of a
    sb = torch.tensor([[5.0], [6.0]])
    xs, ws = gemm_fp8.blockwise_operands(GemmFp8Args(a, sa, b, sb, False, False, torch.bfloat16, "BLOCKWISE", 128))
    assert xs.shape == (130, 2) and torch.equal(xs[127], sa[0]) and torch.equal(xs[128], sa[1])
    assert torch.equal(ws, torch.tensor([[5.0, 6.0]]))


def _fp8_args(dtype, gran="ROWWISE", out_dtype=torch.bfloat16, k=256, bs=None, out=None):
    a, b = torch.zeros(4, k, dtype=dtype), torch.zeros(8, k, dtype=dtype)
    if gran == "ROWWISE":
        sa, sb = torch.ones(4, 1), torch.ones(8, 1)
    elif gran == "BLOCKWISE":
        sa, sb = torch.ones(4, -(-k // 128)), torch.ones(1, -(-k // 128))
    else:
        sa, sb = torch.ones(()), torch.ones(())
    return GemmFp8Args(a, sa, b, sb, False, True, out_dtype, gran, bs, out=out)


def test_gemm_fp8_declines_name_arch_and_dtype():
    f = gemm_fp8.decline_reason
    assert f(_fp8_args(torch.float8_e4m3fnuz), "gfx942") is None
    assert f(_fp8_args(torch.float8_e4m3fn), "gfx950") is None
    assert "float8_e4m3fnuz operands on gfx942" in f(_fp8_args(torch.float8_e4m3fn), "gfx942")
    assert "float8_e4m3fn operands on gfx950" in f(_fp8_args(torch.float8_e5m2), "gfx950")
    assert "arch gfx90a" in f(_fp8_args(torch.float8_e4m3fn), "gfx90a")
    assert "not TENSORWISE" in f(_fp8_args(torch.float8_e4m3fn, "TENSORWISE"), "gfx950")
    assert "bf16/fp16, not torch.float32" in f(_fp8_args(torch.float8_e4m3fn, out_dtype=torch.float32), "gfx950")
    assert "beta" in f(_fp8_args(torch.float8_e4m3fn, out=torch.zeros(4, 8)), "gfx950")
    assert f(_fp8_args(torch.float8_e4m3fn, "BLOCKWISE", bs=128), "gfx950") is None
    assert "blocks of 128" in f(_fp8_args(torch.float8_e4m3fn, "BLOCKWISE", bs=64, k=256), "gfx950")
    assert "K=200" in f(_fp8_args(torch.float8_e4m3fn, "BLOCKWISE", bs=128, k=200), "gfx950")
    assert "K=20 " in f(_fp8_args(torch.float8_e4m3fn, k=20), "gfx950")


def test_gemm_fp8_declines_b_in_1x128_blocks():
    a, b = torch.zeros(4, 256, dtype=torch.float8_e4m3fn), torch.zeros(8, 256, dtype=torch.float8_e4m3fn)
    args = GemmFp8Args(a, torch.ones(4, 2), b, torch.ones(8, 2), False, True, torch.bfloat16, "BLOCKWISE", 128)
    assert "128x128 tiles" in gemm_fp8.decline_reason(args, "gfx950")


def test_gemm_fp4_declines():
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    f4 = torch.float4_e2m1fn_x2
    a, b = torch.zeros(4, 64, dtype=torch.uint8).view(f4), torch.zeros(32, 64, dtype=torch.uint8).view(f4)
    args = GemmFp4Args(a, torch.zeros(4, 4, dtype=torch.uint8), b, torch.zeros(32, 4, dtype=torch.uint8),
                       out_dtype=torch.bfloat16)
    assert gemm_fp4.decline_reason(args, "gfx950") is None
    assert "gfx950 only (this is gfx942" in gemm_fp4.decline_reason(args, "gfx942")
    fp16 = GemmFp4Args(args.a, args.a_scale_inv, args.b, args.b_scale_inv, out_dtype=torch.float16)
    assert "writes bf16" in gemm_fp4.decline_reason(fp16, "gfx950")
    odd_n = GemmFp4Args(args.a, args.a_scale_inv, b[:8], args.b_scale_inv[:8], out_dtype=torch.bfloat16)
    assert "N=8" in gemm_fp4.decline_reason(odd_n, "gfx950")


def test_attention_declines():
    q = torch.zeros(1, 4, 2, 8, dtype=torch.bfloat16)
    ok = AttentionFwdArgs(q, q, q)
    assert attention.decline_reason(ok, "gfx942") is None and attention.decline_reason(ok, "gfx950") is None
    assert "fp16/bf16" in attention.decline_reason(AttentionFwdArgs(q.float(), q.float(), q.float()), "gfx942")
    assert "sink" in attention.decline_reason(AttentionFwdArgs(q, q, q, sink=torch.zeros(2)), "gfx950")
    assert "dropout" in attention.decline_reason(AttentionFwdArgs(q, q, q, dropout_p=0.1), "gfx950")
    big = torch.zeros(1, 4, 2, 257, dtype=torch.bfloat16)
    assert "257 > 256" in attention.decline_reason(AttentionFwdArgs(big, big, big), "gfx950")
    assert "arch None" in attention.decline_reason(ok, None)


def test_rmsnorm_declines():
    x = torch.zeros(2, 8, dtype=torch.bfloat16)
    assert rmsnorm.decline_reason(RmsNormFwdArgs(x, torch.ones(8, dtype=torch.bfloat16)), "gfx942") is None
    assert "fp16/bf16" in rmsnorm.decline_reason(RmsNormFwdArgs(x.float(), None), "gfx942")
    assert "gamma in x's dtype" in rmsnorm.decline_reason(RmsNormFwdArgs(x, torch.ones(8)), "gfx950")
    zc = RmsNormFwdArgs(x, torch.ones(8, dtype=torch.bfloat16), zero_centered=True)
    assert "zero_centered" in rmsnorm.decline_reason(zc, "gfx950")


def test_cpu_tensors_declined_by_every_check():
    x = torch.zeros(2, 8, dtype=torch.bfloat16)
    assert "ROCm GPU tensors only (got cpu)" in rmsnorm.can_handle(RmsNormFwdArgs(x, None))
    q = torch.zeros(1, 4, 2, 8, dtype=torch.bfloat16)
    assert "ROCm GPU tensors only" in attention.can_handle(AttentionFwdArgs(q, q, q))
    assert "ROCm GPU tensors only" in gemm_fp8.can_handle(_fp8_args(torch.float8_e4m3fn))


@pytest.mark.skipif(bool(torch.version.hip), reason="ROCm torch: aiter may load here")
def test_load_without_rocm_raises_with_the_reason_and_caches_it():
    library.reset()
    try:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="needs a ROCm build of torch"):
                library.load()
    finally:
        library.reset()
