"""The Gluon sm90 FP8 GEMM (``turbo_triton.gemm_fp8.gluon_sm90``): which calls it takes and why not
(CPU), and its results against the reference on a Hopper GPU (``@pytest.mark.gpu``:
``TRITON_INTERPRET=0 pytest -m gpu packages/turbo-triton/tests/test_gemm_fp8_gluon.py``)."""

import os

import pytest
import torch

from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
from turbo_triton.gemm_fp8 import launch

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def _args(m=2048, n=4096, k=256, gran="TENSORWISE", device="cpu", da=E4, db=E4, out=torch.bfloat16, seed=0,
          a_2d=False):
    gen = torch.Generator(device=device).manual_seed(seed)
    a = (torch.randn(m, k, generator=gen, device=device) * 3).to(da)
    b = (torch.randn(n, k, generator=gen, device=device) * 3).to(db)
    if gran == "TENSORWISE":
        sa = torch.rand((), generator=gen, device=device) + 0.25
        sb = torch.rand((), generator=gen, device=device) + 0.25
    elif gran == "ROWWISE":
        sa = torch.rand(m, 1, generator=gen, device=device) + 0.25
        sb = torch.rand(n, 1, generator=gen, device=device) + 0.25
    else:  # BLOCKWISE: 1 x 128 (or 128 x 128) activation blocks, 128 x 128 weight tiles
        kb = -(-k // 128)
        sa = torch.rand(-(-m // 128) if a_2d else m, kb, generator=gen, device=device) + 0.25
        sb = torch.rand(-(-n // 128), kb, generator=gen, device=device) + 0.25
    return GemmFp8Args(a, sa, b, sb, False, True, out, gran, 128 if gran == "BLOCKWISE" else None)


def _reason(args, arch="sm90"):
    return launch.gluon_reason(args, arch, args.a.shape[1], launch.scale_addressing(args))


@pytest.fixture
def hopper(monkeypatch):
    """Make the eligibility check see a 132-SM sm90 GPU outside the interpreter."""
    monkeypatch.setattr(launch._runtime, "interpreting", lambda: False)
    monkeypatch.setattr(launch._runtime, "num_sms", lambda index: 132)
    monkeypatch.delenv("TURBO_TRITON_FP8_GLUON", raising=False)
    monkeypatch.delenv("TURBO_TRITON_FP8_FAST_ACCUM", raising=False)
    monkeypatch.setattr(launch, "_GLUON_BROKEN", [])


def test_takes_large_nt_problems(hopper):
    for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE"):
        for out in (torch.bfloat16, torch.float16, torch.float32):
            assert _reason(_args(gran=gran, out=out)) is None
    assert _reason(_args(gran="BLOCKWISE", a_2d=True)) is None
    assert _reason(_args(da=E4, db=E5)) is None  # HYBRID


def test_declines_with_reasons(hopper, monkeypatch):
    big = _args()
    assert "sm90" in _reason(big, "sm100")
    assert "less than one wave" in _reason(_args(m=1024, n=4096))
    assert "less than one wave" in _reason(_args(m=1024, n=2048, gran="BLOCKWISE"))  # 128 x 128 tiles: 128
    bw = _args(gran="BLOCKWISE")
    small_blocks = GemmFp8Args(bw.a, torch.ones(2048, 4), bw.b, torch.ones(64, 4), False, True, torch.bfloat16,
                               "BLOCKWISE", 64)
    assert "128-deep blocks" in _reason(small_blocks)
    per_col_b = GemmFp8Args(bw.a, bw.a_scale_inv, bw.b, torch.ones(2, 4096).t(), False, True, torch.bfloat16,
                            "BLOCKWISE", 128)  # [N, K/128] with unit-stride columns: 1 x 128 blocks (as wgrad's)
    assert _reason(per_col_b) is None
    strided_b = GemmFp8Args(bw.a, bw.a_scale_inv, bw.b, torch.ones(4096, 2), False, True, torch.bfloat16,
                            "BLOCKWISE", 128)  # [N, K/128] row-major
    assert "unit-stride columns" in _reason(strided_b)
    mx = GemmFp8Args(big.a, big.a_scale_inv, big.b, big.b_scale_inv, False, True, torch.bfloat16, "MX_BLOCKWISE")
    assert "MX_BLOCKWISE is not implemented" in launch.gluon_reason(mx, "sm90", 256, launch._Scales(0, 0, 0, 0))
    nn = GemmFp8Args(big.a, big.a_scale_inv, big.b.t(), big.b_scale_inv, False, False, torch.bfloat16)
    assert "K-major" in _reason(nn)
    acc = GemmFp8Args(big.a, big.a_scale_inv, big.b, big.b_scale_inv, False, True, torch.bfloat16,
                      out=torch.empty(2048, 4096, dtype=torch.bfloat16))
    assert "fresh" in _reason(acc)
    assert "TMA" in _reason(_args(k=200))
    monkeypatch.setenv("TURBO_TRITON_FP8_FAST_ACCUM", "1")
    assert "FAST_ACCUM" in _reason(big)
    monkeypatch.setenv("TURBO_TRITON_FP8_GLUON", "0")
    assert _reason(big) == "TURBO_TRITON_FP8_GLUON=0"


def test_trans_c_calls_flip_onto_the_kernel(hopper):
    """A fresh trans_c call, as the ops' wgrad makes (``dB = op(A)^T @ dC`` written ``[N, K]``), reaches
    the Gluon kernel as its transposed problem: wgrad's TN layout with 1 x 128 blocks along the tokens
    for both operands, TENSORWISE and ROWWISE too; not when accumulating into ``out``, not when a's
    blocks would become 128 x 128 tiles, not on other GPUs."""
    gen = torch.Generator().manual_seed(4)
    k_tok, m, n = 1024, 4096, 2048
    a = (torch.randn(k_tok, m, generator=gen) * 3).to(E4)  # [K, M]: trans_a
    b = (torch.randn(k_tok, n, generator=gen) * 3).to(E5)  # [K, N]
    scales = {"TENSORWISE": (torch.ones(()), torch.ones(())), "ROWWISE": (torch.ones(1, m), torch.ones(1, n)),
              "BLOCKWISE": (torch.ones(k_tok // 128, m), torch.ones(k_tok // 128, n))}
    for gran, (sa, sb) in scales.items():
        args = GemmFp8Args(a, sa, b, sb, True, False, torch.bfloat16, gran, 128 if gran == "BLOCKWISE" else None,
                           True)
        flipped = launch._flipped_for_gluon(args, "sm90", k_tok)
        assert flipped is not None and flipped.a is b and flipped.trans_a and not flipped.trans_b, gran
        assert launch._flipped_for_gluon(args, "sm100", k_tok) is None
        acc = GemmFp8Args(a, sa, b, sb, True, False, None, gran, args.block_size, True, torch.zeros(n, m))
        assert launch._flipped_for_gluon(acc, "sm90", k_tok) is None
    w = (torch.randn(n, k_tok, generator=gen) * 3).to(E4)  # a weight [N, K] with 128 x 128 tiles as b
    x = (torch.randn(m, k_tok, generator=gen) * 3).to(E4)
    tiles = GemmFp8Args(x, torch.ones(m, k_tok // 128), w, torch.ones(n // 128, k_tok // 128), False, True,
                        torch.bfloat16, "BLOCKWISE", 128, True)
    assert launch._flipped_for_gluon(tiles, "sm90", k_tok) is None  # a would get the 128 x 128 tiles


def test_stage_budget():
    from turbo_triton.gemm_fp8 import gluon_sm90

    assert gluon_sm90.stages_for(256, 2) == 3  # 3 x 48 KB of operands + 64 KB of bf16 output staging
    assert gluon_sm90.stages_for(128, 4) == 5
    assert gluon_sm90.stages_for(256, 4) == 2


def _sm90() -> bool:
    """A Hopper GPU and the compiled kernels (this package's tests default to the interpreter:
    run these with ``TRITON_INTERPRET=0 pytest -m gpu``)."""
    return (os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
            and torch.cuda.get_device_capability() == (9, 0))


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon FP8 GEMM runs on sm90 (Hopper) GPUs, not in the interpreter")
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
@pytest.mark.parametrize("shape", [(4096, 8192, 1024), (4000, 8200, 1040)])
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
def test_gpu_against_reference(gran, shape, out):
    """Through ``gemm_fp8`` (the op's launcher): the path is the Gluon kernel, edges are masked, no NaN
    left from the poisoned output memory, error at cuBLAS's level (fp32 sums promoted every 128)."""
    m, n, k = shape
    args = _args(m, n, k, gran, device="cuda", out=out, seed=m + n)
    assert launch.kernel_path(args) == "gluon"
    torch.full((m, n), float("nan"), device="cuda", dtype=out)  # a freed NaN block the allocator hands back
    got = launch.gemm_fp8(args)
    assert not launch._GLUON_BROKEN
    # the reference's dequantized math, fp32 sums on the GPU (float64 on the CPU would take minutes here)
    want = reference(GemmFp8Args(args.a, args.a_scale_inv, args.b, args.b_scale_inv, False, True, torch.float32,
                                 gran, args.block_size)).double()
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert torch.isfinite(got).all()
    # cuBLAS's errors on such inputs: 1.5-3.5e-3 (bf16 out), 1.5-2.2e-4 (fp32 out; Hopper's FP8 partial sums)
    assert err < (6e-3 if out == torch.bfloat16 else 6e-4), err


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon FP8 GEMM runs on sm90 (Hopper) GPUs, not in the interpreter")
def test_gpu_wgrad_layout_blockwise():
    """wgrad's TN layout with 1 x 128 blocks along K for both operands (b's scales per column): copied
    K-major, then the Gluon kernel's per-column scale path."""
    m, n, k = 4096, 4096, 2048
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.randn(k, m, generator=gen, device="cuda") * 3).to(E4)  # stored [K, M]: trans_a
    b = (torch.randn(k, n, generator=gen, device="cuda") * 3).to(E4)  # stored [K, N]: not trans_b
    sa = torch.rand(k // 128, m, generator=gen, device="cuda") + 0.25
    sb = torch.rand(k // 128, n, generator=gen, device="cuda") + 0.25
    args = GemmFp8Args(a, sa, b, sb, True, False, torch.bfloat16, "BLOCKWISE", 128)
    assert launch.kernel_path(args) == "gluon+kmajor"
    got = launch.gemm_fp8(args)
    assert not launch._GLUON_BROKEN
    want = reference(GemmFp8Args(a, sa, b, sb, True, False, torch.float32, "BLOCKWISE", 128)).double()
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < 6e-3, err


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon FP8 GEMM runs on sm90 (Hopper) GPUs, not in the interpreter")
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_gpu_trans_c_wgrad_runs_transposed(gran):
    """The ops' wgrad call (TN, ``trans_c``: ``dB`` written ``[N, K]``) runs on the Gluon kernel as its
    transposed problem and matches the reference."""
    m, n, k = 4096, 2048, 2048
    gen = torch.Generator(device="cuda").manual_seed(6)
    a = (torch.randn(k, m, generator=gen, device="cuda") * 3).to(E4)  # [K, M]: trans_a
    b = (torch.randn(k, n, generator=gen, device="cuda") * 3).to(E5)  # [K, N]
    if gran == "TENSORWISE":
        sa, sb = torch.rand((), device="cuda") + 0.25, torch.rand((), device="cuda") + 0.25
    elif gran == "ROWWISE":
        sa, sb = torch.rand(1, m, device="cuda") + 0.25, torch.rand(1, n, device="cuda") + 0.25
    else:
        sa, sb = torch.rand(k // 128, m, device="cuda") + 0.25, torch.rand(k // 128, n, device="cuda") + 0.25
    args = GemmFp8Args(a, sa, b, sb, True, False, torch.bfloat16, gran, 128 if gran == "BLOCKWISE" else None, True)
    assert launch.kernel_path(args) == "gluon+kmajor"
    got = launch.gemm_fp8(args)
    assert not launch._GLUON_BROKEN
    assert got.shape == (n, m)
    want = reference(GemmFp8Args(a, sa, b, sb, True, False, torch.float32, gran, args.block_size, True)).double()
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < 6e-3, err
