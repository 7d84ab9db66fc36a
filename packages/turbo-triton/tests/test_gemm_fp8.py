"""The TRITON gemm_fp8 kernel directly (interpreter): every granularity, layout, FP8 pairing,
output dtype, trans_c and accumulate-into-out, against the reference's float64 dequantized math."""

import itertools

import pytest
import torch

from turbo_core.dispatch.specs.gemm_fp8 import GEMM_FP8, GemmFp8Args, cdiv
from turbo_core.low_precision import E8M0_DTYPE
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
from turbo_triton.gemm_fp8.launch import can_handle, gemm_fp8, kernel_path

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
PAIRS = {"e4m3": (E4, E4), "e5m2": (E5, E5), "hybrid": (E4, E5)}


def _fp8(shape, dtype, gen):
    return (torch.randn(*shape, generator=gen) * 3).to(dtype)


def _scales(shape, gen):
    return torch.rand(shape, generator=gen) + 0.25


def _operands(gran, m, n, k, ta, tb, pair, gen, bs=16, a_2d=False, b_2d=True):
    da, db = PAIRS[pair]
    a = _fp8((k, m) if ta else (m, k), da, gen)
    b = _fp8((n, k) if tb else (k, n), db, gen)
    if gran == "TENSORWISE":
        sa, sb = _scales((), gen), _scales((), gen)
    elif gran == "ROWWISE":
        sa = _scales((1, m) if ta else (m, 1), gen)
        sb = _scales((n, 1) if tb else (1, n), gen)
    elif gran == "BLOCKWISE":
        kb = cdiv(k, bs)
        if a_2d:
            sa = _scales((cdiv(a.shape[0], bs), cdiv(a.shape[1], bs)), gen)
        else:
            sa = _scales((kb, m) if ta else (m, kb), gen)
        if b_2d:
            sb = _scales((cdiv(b.shape[0], bs), cdiv(b.shape[1], bs)), gen)
        else:
            sb = _scales((n, kb) if tb else (kb, n), gen)
    else:  # MX, NT
        sa = torch.randint(120, 134, (m, k // 32), generator=gen, dtype=torch.uint8).view(E8M0_DTYPE)
        sb = torch.randint(120, 134, (n, k // 32), generator=gen, dtype=torch.uint8).view(E8M0_DTYPE)
    return a, sa, b, sb


def _check(args, rtol=2e-2):
    GEMM_FP8.check_args(args)
    assert can_handle(args) is None
    assert kernel_path(args) == "pointer"
    want = reference(GemmFp8Args(args.a, args.a_scale_inv, args.b, args.b_scale_inv, args.trans_a, args.trans_b,
                                 torch.float64, args.granularity, args.block_size, args.trans_c))
    got = gemm_fp8(args)
    assert got.dtype == args.result_dtype
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=rtol * want.abs().max().item())
    return got, want


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
@pytest.mark.parametrize("pair", list(PAIRS))
def test_granularities_layouts_and_pairs(gran, pair):
    gen = torch.Generator().manual_seed(7)
    m, n, k = 37, 21, 45  # odd: partial tiles in M, N and K, and a partial last scale block
    for ta, tb in itertools.product([False, True], repeat=2):
        a, sa, b, sb = _operands(gran, m, n, k, ta, tb, pair, gen)
        bs = 16 if gran == "BLOCKWISE" else None
        _check(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, bs))


@pytest.mark.parametrize("a_2d,b_2d", [(False, False), (True, True), (False, True)])
def test_blockwise_1d_and_2d_scale_layouts(a_2d, b_2d):
    gen = torch.Generator().manual_seed(3)
    for ta, tb in [(False, True), (True, False)]:
        a, sa, b, sb = _operands("BLOCKWISE", 40, 33, 64, ta, tb, "e4m3", gen, bs=16, a_2d=a_2d, b_2d=b_2d)
        _check(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, "BLOCKWISE", 16))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_out_dtypes_and_trans_c(out_dtype):
    gen = torch.Generator().manual_seed(11)
    a, sa, b, sb = _operands("ROWWISE", 19, 26, 40, False, True, "e4m3", gen)
    for tc in (False, True):
        got, _ = _check(GemmFp8Args(a, sa, b, sb, False, True, out_dtype, "ROWWISE", None, tc))
        assert got.shape == ((26, 19) if tc else (19, 26))


@pytest.mark.parametrize("gran", ["TENSORWISE", "BLOCKWISE"])
def test_accumulate_into_out(gran):
    gen = torch.Generator().manual_seed(5)
    a, sa, b, sb = _operands(gran, 24, 18, 48, True, False, "e4m3", gen)
    base = torch.randn(18, 24, generator=gen)
    out = base.clone()
    args = GemmFp8Args(a, sa, b, sb, True, False, None, gran, 16 if gran == "BLOCKWISE" else None, True, out)
    got = gemm_fp8(args)
    assert got is out
    want = base.double() + reference(GemmFp8Args(a, sa, b, sb, True, False, torch.float64, gran, args.block_size,
                                                 True))
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-3 * want.abs().max().item())


@pytest.mark.parametrize("pair", ["e4m3", "e5m2"])
def test_mx_blockwise_emulated(pair):
    gen = torch.Generator().manual_seed(13)
    a, sa, b, sb = _operands("MX_BLOCKWISE", 21, 35, 96, False, True, pair, gen)
    _check(GemmFp8Args(a, sa, b, sb, False, True, torch.float32, "MX_BLOCKWISE"), rtol=1e-5)


def test_mx_nan_scale_gives_nan():
    gen = torch.Generator().manual_seed(2)
    a, sa, b, sb = _operands("MX_BLOCKWISE", 8, 8, 64, False, True, "e4m3", gen)
    sa = sa.view(torch.uint8).clone()
    sa[3, 1] = 255
    c = gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, torch.float32, "MX_BLOCKWISE"))
    assert torch.isnan(c[3]).all() and not torch.isnan(c[:3]).any()


def test_edge_sizes():
    gen = torch.Generator().manual_seed(1)
    for m, n, k in [(1, 17, 33), (19, 1, 16), (5, 7, 0)]:
        a, sa, b, sb = _operands("TENSORWISE", m, n, k, False, True, "e4m3", gen)
        got = gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, torch.float32))
        want = (a.double() * sa.double()) @ (b.double() * sb.double()).t()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_declines_with_reasons(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    a, sa, b, sb = _operands("BLOCKWISE", 8, 8, 32, False, True, "e4m3", gen, bs=16)
    assert "power-of-two block size" in can_handle(GemmFp8Args(a, sa, b, sb, False, True, torch.float32,
                                                                "BLOCKWISE", 12))
    fnuz = a.to(torch.float8_e4m3fnuz)
    assert "gfx942" in can_handle(GemmFp8Args(fnuz, sa, b.to(torch.float8_e4m3fnuz), sb, False, True, torch.float32,
                                              "BLOCKWISE", 16))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(GemmFp8Args(a, sa, b, sb, False, True, torch.float32,
                                                          "BLOCKWISE", 16))


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_k_major_copy(gran, monkeypatch):
    """On sm90 an NN/TN operand is first copied K-major (the scales keep their logical addressing);
    here the copy is forced, and the interpreter runs the pointer kernel on the copies."""
    from turbo_triton.gemm_fp8 import launch

    monkeypatch.setattr(launch, "_k_major_needed", lambda arch, k: True)
    gen = torch.Generator().manual_seed(17)
    for ta, tb in [(False, False), (True, False), (True, True)]:
        a, sa, b, sb = _operands(gran, 29, 35, 48, ta, tb, "e4m3", gen, a_2d=True)
        args = GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, 16 if gran == "BLOCKWISE" else None)
        moved = launch._k_major(args, "sm90", 48)
        assert not moved.trans_a and moved.trans_b
        want = reference(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float64, gran, args.block_size))
        got = gemm_fp8(args)
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_transposed_problem_gives_the_trans_c_result(gran):
    """``transposed(args)`` (how a fresh trans_c call reaches the Gluon kernel on sm90) is the same
    product: its ``[N, M]`` result equals the trans_c call's, in every layout and scale layout (BLOCKWISE:
    1 x bs or bs x bs blocks for either operand, as the ops' wgrad and dgrad have them), and the
    reference's float64 math."""
    from turbo_triton.gemm_fp8.launch import transposed

    gen = torch.Generator().manual_seed(23)
    layouts = [(True, False, False, False), (False, True, False, True), (True, True, True, True),
               (False, False, False, True)] if gran == "BLOCKWISE" else [(ta, tb, False, True) for ta, tb in
                                                                       itertools.product([False, True], repeat=2)]
    for ta, tb, a_2d, b_2d in layouts:
        a, sa, b, sb = _operands(gran, 37, 21, 48, ta, tb, "hybrid", gen, a_2d=a_2d, b_2d=b_2d)
        args = GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, 16 if gran == "BLOCKWISE" else None, True)
        flipped = transposed(args)
        GEMM_FP8.check_args(flipped)
        assert not flipped.trans_c and flipped.a is b and flipped.b is a
        got = gemm_fp8(flipped)
        assert got.shape == (21, 37)
        torch.testing.assert_close(got, gemm_fp8(args), rtol=1e-5, atol=1e-5)
        want = reference(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float64, gran, args.block_size, True))
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
