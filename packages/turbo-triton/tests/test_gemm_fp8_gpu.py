"""The TRITON gemm_fp8 compiled kernels on the GPU (``@pytest.mark.gpu``; see ``gpu_support``).

* The launcher against float64 math on the dequantized operands (``dequant_fp8`` of the reference,
  on the GPU in float64): every granularity (TENSORWISE, ROWWISE, BLOCKWISE 1x128 x 128x128, MX
  emulated) x FP8 pairing x layout (NT, NN, TN) at odd and model shapes, outputs allocated from
  NaN-poisoned memory; trans_c with accumulation into an fp32 ``out`` (the fused wgrad).
* The public op ``gemm_fp8`` pinned to TRITON, fp32 results against float64 up to K = 8192: Hopper's
  FP8 tensor cores add the products of one MMA at reduced precision, so fp32 results sit about 2e-4
  of their largest magnitude from exact math; the gate is ``assert_close_fp8_gemm``
  (``FP8_MMA_ATOL``), which the same floor of cuBLASLt supports (turbo-core's
  ``test_ops_gemm_fp8_gpu.py``).
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, poison_free_memory

from turbo_core.dispatch.specs.gemm_fp8 import GEMM_FP8, GemmFp8Args, cdiv
from turbo_core.low_precision import E8M0_DTYPE, ScalingGranularity
from turbo_core.reference.gemm_fp8 import dequant_fp8
from turbo_core.testing.numerics import assert_close_fp8_gemm

pytestmark = [pytest.mark.gpu, COMPILED]

G = ScalingGranularity
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
PAIRS = {"e4m3": (E4, E4), "e5m2": (E5, E5), "hybrid": (E4, E5)}
BS = 128


@pytest.fixture(scope="module")
def launch():
    from turbo_triton.gemm_fp8 import launch

    return launch


def _operands(gran, m, n, k, ta, tb, pair, seed=0):
    """FP8 data ~ 2 N(0, 1) and random positive scales in the spec's layouts (BLOCKWISE: a in 1 x 128
    blocks along K, b in 128 x 128 tiles; MX: NT, E8M0 around 1)."""
    g = torch.Generator(device=DEV).manual_seed(seed + m + n + k)
    da, db = PAIRS[pair]
    a = (torch.randn(*((k, m) if ta else (m, k)), device=DEV, generator=g) * 2).to(da)
    b = (torch.randn(*((n, k) if tb else (k, n)), device=DEV, generator=g) * 2).to(db)

    def r(*shape):
        return torch.rand(*shape, device=DEV, generator=g) + 0.5

    if gran == "TENSORWISE":
        return a, r(()), b, r(())
    if gran == "ROWWISE":
        return a, r(*((1, m) if ta else (m, 1))), b, r(*((n, 1) if tb else (1, n)))
    if gran == "BLOCKWISE":
        return a, r(*((cdiv(k, BS), m) if ta else (m, cdiv(k, BS)))), b, r(cdiv(b.shape[0], BS), cdiv(b.shape[1], BS))

    def e8m0(*shape):
        return torch.randint(122, 132, shape, device=DEV, generator=g, dtype=torch.uint8).view(E8M0_DTYPE)

    return a, e8m0(m, k // 32), b, e8m0(n, k // 32)


def _exact(args: GemmFp8Args) -> torch.Tensor:
    """float64 ``op(A) @ op(B)`` (``.T`` with trans_c) of the dequantized operands, on their device."""
    gran = G(args.granularity)
    bs = 32 if gran == G.MX_BLOCKWISE else args.block_size
    a = dequant_fp8(args.a, args.a_scale_inv, gran, -2 if args.trans_a else -1, bs, torch.float64)
    b = dequant_fp8(args.b, args.b_scale_inv, gran, -1 if args.trans_b else -2, bs, torch.float64)
    c = (a.t() if args.trans_a else a) @ (b.t() if args.trans_b else b)
    return c.t() if args.trans_c else c


def _grid():
    # Odd shapes (pointer kernel, partial tiles), a single row, and a tile-aligned one for every
    # granularity x pairing x layout; two model shapes (a Llama-8B layer: 8192 tokens, and
    # 4096 x 14336) in E4M3, the training format, in the three passes' layouts.
    small = [(37, 45, 160), (1, 4096, 4096), (777, 1000, 1024)]
    model = [(8192, 4096, 4096), (4096, 14336, 4096)]
    for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"):
        layouts = ("NT",) if gran == "MX_BLOCKWISE" else ("NT", "NN", "TN")
        pairs = ("e4m3", "e5m2") if gran == "MX_BLOCKWISE" else tuple(PAIRS)
        for layout in layouts:
            for shape in small:
                for pair in pairs:
                    yield gran, pair, layout, shape
            for shape in model:
                yield gran, "e4m3", layout, shape


GRID = list(_grid())


@pytest.mark.parametrize("gran,pair,layout,shape", GRID,
                         ids=[f"{g}-{p}-{lay}-{'x'.join(map(str, s))}" for g, p, lay, s in GRID])
def test_launcher_against_float64(launch, gran, pair, layout, shape):
    m, n, k = shape
    ta, tb = layout[0] == "T", layout[1] == "T"
    a, sa, b, sb = _operands(gran, m, n, k, ta, tb, pair)
    args = GemmFp8Args(a, sa, b, sb, trans_a=ta, trans_b=tb, out_dtype=torch.bfloat16, granularity=gran,
                       block_size=BS if gran == "BLOCKWISE" else None)
    GEMM_FP8.check_args(args)
    assert launch.can_handle(args) is None
    poison_free_memory()
    got = launch.gemm_fp8(args)
    assert got.dtype == torch.bfloat16 and got.shape == (m, n)
    assert_close_fp8_gemm(got, _exact(args), what=f"{launch.kernel_path(args)} kernel")


@pytest.mark.parametrize("gran", ["TENSORWISE", "BLOCKWISE"])
def test_trans_c_accumulates_into_fp32_out(launch, gran):
    """The fused wgrad's call: ``out += (A^T B)^T`` in fp32, at a model shape."""
    m, n, k = 4096, 2048, 1024
    a, sa, b, sb = _operands(gran, m, n, k, True, False, "e4m3")
    base = torch.randn(n, m, device=DEV, generator=torch.Generator(device=DEV).manual_seed(3))
    out = base.clone()
    args = GemmFp8Args(a, sa, b, sb, trans_a=True, trans_b=False, granularity=gran,
                       block_size=BS if gran == "BLOCKWISE" else None, trans_c=True, out=out)
    assert launch.gemm_fp8(args) is out
    assert_close_fp8_gemm(out, base.double() + _exact(args), what=f"{launch.kernel_path(args)} kernel")


# Dense NT problems from a few tiles to K = 8192 (many MMA and promotion steps); inputs ~ N(0, K^-1/2)
# so results are of size ~1, as the conformance cases draw them.
ACCUMULATION = [(64, 48, 96), (128, 256, 384), (256, 256, 1024), (256, 256, 4096), (1024, 1024, 8192)]


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
@pytest.mark.parametrize("m,n,k", ACCUMULATION)
def test_public_op_fp32_results_within_the_mma_floor(gran, m, n, k):
    from turbo_core import Float8QuantConfig, use_backend
    from turbo_core.ops.gemm_fp8 import gemm_fp8
    from turbo_core.ops.quantization import quantize_fp8

    g = torch.Generator(device=DEV).manual_seed(k)
    a = torch.randn(m, k, device=DEV, generator=g) * k ** -0.25
    b = torch.randn(n, k, device=DEV, generator=g) * k ** -0.25
    axis = {"axis": -1} if gran == "ROWWISE" else {}
    with use_backend("TRITON"):
        qa, sa = quantize_fp8(a, E4, G(gran), **axis)
        qb, sb = quantize_fp8(b, E4, G(gran), **axis)
        got = gemm_fp8(a, b, trans_b=True, out_dtype=torch.float32,
                       config=Float8QuantConfig(format="E4M3", granularity=G(gran)))
    exact = (qa.double() * sa.double().reshape(-1, 1)) @ (qb.double() * sb.double().reshape(-1, 1)).t()
    assert_close_fp8_gemm(got, exact, what=f"TRITON gemm_fp8 {gran} {m}x{n}x{k}")
