"""The TRITON MXFP4 kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``): quantize
(row-wise, col-wise, 1x32 and 32x32 blocks), quantize_with_trans and dequantize (bf16/fp32/fp16)
against the TORCH reference bit for bit (``assert_same_bits``; NaN payloads aside), the calls under
``set_sync_debug_mode("error")``.

Why these inputs: activations and weights of DeepSeek-V3 (7168), Llama-70B (8192 / 28672), Qwen3
(4096), odd sizes, a single block and inputs narrower than one block, each with a NaN block and an
Inf, magnitudes over six decades along the row; fp32 and fp16 inputs; and a block of edge cases
(E2M1 midpoints and grid points at several scales, subnormal bf16 blocks, tiny values beside a large
one, NaN of either sign and +-Inf beside large finite values, -0.0 and all-zero blocks) through
every encoder variant the module switches between (``F32MUL``, ``ROW_PAIRS``, ``DEQ_ASM``, the
generic kernels with ``FAST_ENABLED`` off). The fast and pair kernels' tiles give the default tile's
bits.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, no_host_sync

from turbo_core.dispatch.specs.quantization import DequantizeFp4Args, QuantizeFp4Args, QuantizeFp4WithTransArgs
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

FP4 = FLOAT4_E2M1FN_X2


@pytest.fixture(scope="module")
def fp4():
    from turbo_triton.quantization import fp4

    return fp4


def _strict(fn, *a, **kw):
    fn(*a, **kw)  # compiles outside the sync check
    with no_host_sync():
        return fn(*a, **kw)


def _input(m, n, dtype, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (torch.randn((m, n), generator=g, device=DEV) * torch.logspace(-3, 3, n, device=DEV)).to(dtype)
    if m * n > 64:
        x.view(-1)[5] = float("nan")  # one NaN block
        x.view(-1)[m * n // 2] = float("inf")
    return x


def _special(dtype):
    """``[64, 256]``, one kind of edge case per 32-wide block (the transpose's blocks mix them)."""
    g = torch.Generator(device=DEV).manual_seed(7)
    grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0], device=DEV)
    x = torch.zeros(64, 256, device=DEV)
    sgn = torch.where(torch.rand(64, 32, generator=g, device=DEV) < 0.5, -1.0, 1.0)
    x[:, 0:32] = grid[torch.randint(0, 16, (64, 32), generator=g, device=DEV)] * sgn * 2.0 ** torch.randint(
        -8, 8, (64, 1), generator=g, device=DEV).float()
    x[:, 32:64] = torch.randint(1, 128, (64, 32), generator=g, device=DEV).float() * 2.0 ** -133 * sgn  # subnormal
    x[:, 64:96] = torch.randn(64, 32, generator=g, device=DEV) * 1e-30
    x[:, 64] = 1e10
    x[:, 96:128] = torch.randn(64, 32, generator=g, device=DEV) * 1e20
    x[::2, 97] = float("nan")
    x[1::2, 98] = -float("nan")
    x[::3, 99] = -float("inf")
    x[:, 128:160] = torch.where(sgn < 0, -0.0, 0.0)
    x[:, 160:192] = torch.randn(64, 32, generator=g, device=DEV) * 2.0 ** -120
    x[:, 192:224] = float("inf")
    x[:, 224:256] = (torch.rand(64, 32, generator=g, device=DEV) * 7.0) * sgn
    return x.to(dtype)


def _check_all(fp4, x, outs):
    """quantize (both axes, 1-D and 2-D blocks), each reference quantization dequantized to every dtype
    of ``outs``, and quantize_with_trans (1-D row blocks with 2-D column blocks and the reverse)."""
    for axis in (-1, -2):
        for two_d in (False, True):
            a = QuantizeFp4Args(x, FP4, axis, recipe=ScalingRecipe(use_2d_block=two_d))
            want = ref.quantize_fp4(a)
            assert_same_bits(_strict(fp4.quantize_fp4, a), want, what=f"quantize_fp4 axis={axis} 2d={two_d}")
            for out in outs:
                d = DequantizeFp4Args(want[0], want[1], out, axis)
                assert_same_bits(_strict(fp4.dequantize_fp4, d), ref.dequantize_fp4(d),
                                 what=f"dequantize_fp4 axis={axis} 2d={two_d} to {out}")
    for two_d in (False, True):
        t = QuantizeFp4WithTransArgs(x, FP4, recipe=ScalingRecipe(use_2d_block=two_d),
                                     recipe_for_trans=ScalingRecipe(use_2d_block=not two_d))
        assert_same_bits(_strict(fp4.quantize_fp4_with_trans, t), ref.quantize_fp4_with_trans(t),
                         what=f"quantize_fp4_with_trans 2d rows={two_d}")


#: id -> (M, N, input dtype)
SHAPES = {"dsv3-act": (16384, 7168, torch.bfloat16), "llama70b-w": (8192, 28672, torch.bfloat16),
          "qwen3-act": (32768, 4096, torch.bfloat16), "odd": (777, 1000, torch.bfloat16), "tiny": (1, 32, torch.bfloat16),
          "odd-fp32": (100, 300, torch.float32), "odd-fp16": (300, 100, torch.float16),
          # narrower than one 32-wide block: col-wise pair-kernel tiles of 8 and 32 columns, and at 1 x 1
          # the generic kernel (a pair tile of one column would hold under two pairs a thread)
          "one": (1, 1, torch.bfloat16), "narrow": (45, 7, torch.bfloat16), "narrow-31": (200, 31, torch.bfloat16)}
#: encoder variants: module flags of ``turbo_triton.quantization.fp4``
VARIANTS = {"default": {}, "row-pairs": {"ROW_PAIRS": True}, "f32mul": {"F32MUL": True}, "no-ptx-decode": {"DEQ_ASM": False},
            "generic": {"FAST_ENABLED": False}}


@pytest.mark.parametrize("variant", ["default", "row-pairs"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_bit_identical_to_reference(fp4, monkeypatch, shape, variant):
    for flag, value in VARIANTS[variant].items():
        monkeypatch.setattr(fp4, flag, value)
    m, n, dtype = SHAPES[shape]
    _check_all(fp4, _input(m, n, dtype), (torch.bfloat16, torch.float32) if variant == "default" else ())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_edge_case_blocks(fp4, monkeypatch, variant, dtype):
    for flag, value in VARIANTS[variant].items():
        monkeypatch.setattr(fp4, flag, value)
    _check_all(fp4, _special(dtype), (torch.bfloat16, torch.float32, torch.float16))


#: (op, tiles (block_m, block_n, warps)) of the fast and pair kernels at 16384 x 7168
TILES = [("quantize axis -1", [(16, 256, 2), (32, 256, 4), (8, 256, 1)]),
         ("quantize axis -1 row-pairs", [(16, 256, 2), (8, 256, 1), (16, 512, 4)]),
         ("quantize axis -2", [(64, 128, 2), (64, 64, 1), (64, 32, 1), (64, 128, 1), (64, 64, 2)]),
         ("with_trans", [(32, 128, 2), (32, 64, 1), (32, 128, 1)]),
         ("dequantize axis -2", [(128, 32, 8), (128, 64, 8), (64, 32, 4)]),
         ("dequantize axis -1", [(8, 256, 4), (16, 64, 2), (8, 128, 2)])]


@pytest.mark.parametrize("op,tiles", TILES, ids=[op for op, _ in TILES])
def test_tiles_give_the_default_tiles_bits(fp4, monkeypatch, op, tiles):
    from turbo_triton.quantization.common import Tile

    x = _input(16384, 7168, torch.bfloat16, seed=4)
    if op.endswith("row-pairs"):
        monkeypatch.setattr(fp4, "ROW_PAIRS", True)
    if op.startswith("quantize"):
        args = QuantizeFp4Args(x, FP4, -1 if "-1" in op else -2)
        run = fp4.quantize_fp4
    elif op == "with_trans":
        args, run = QuantizeFp4WithTransArgs(x, FP4), fp4.quantize_fp4_with_trans
    else:
        axis = -1 if "-1" in op else -2
        q, s = ref.quantize_fp4(QuantizeFp4Args(x, FP4, axis))
        args, run = DequantizeFp4Args(q, s, torch.bfloat16, axis), fp4.dequantize_fp4
    want = run(args)
    for tile in tiles:
        assert_same_bits(run(args, Tile(*tile)), want, what=f"{op} tile {tile}")
