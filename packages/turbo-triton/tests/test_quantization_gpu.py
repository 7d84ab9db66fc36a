"""The TRITON FP8 quantization kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``).

``quantize_fp8`` (TENSORWISE; ROWWISE axis -1/0; BLOCKWISE 1x128, 128x1, 1x32, 2-D 128 and 32; MX
row/col/2-D), ``quantize_fp8_with_trans`` (BLOCKWISE 128 and 32, MX with each recipe pair) and
``dequantize_fp8`` (fp32/bf16/fp16 out) against the TORCH reference on the same CUDA tensors, bit for
bit (``assert_same_bits``: NaN positions must match, payloads are free). Every output the launchers
allocate is poisoned first (0xA5 or 0x5A bytes), so an element or scale that is never written shows.
CUDA graphs: TENSORWISE (atomics into a zeroed buffer), ROWWISE two-pass, MX and with_trans captured
and replayed on new data.

Why these inputs: tokens x hidden and weights at model sizes (16384 x 4096; 4095 x 14337, odd on both
dims; 2048 x 53248, a row long enough for ROWWISE's two-pass path), a single row, tiny matrices (1 x 1
and 5 x 40 in fp32: one partial tile, most of it padding, where the property tests' shrunk MX 2-D
examples land);
E5M2 and fp32 input on a few of them; special values (zero blocks, NaN, +-Inf, saturation under MX
scales, fp32 subnormals) through every granularity; a 3-D batch of weights; a transposed view. MX's
column direction is also called 200 times on tiny inputs at its common tiles, since the defect it
guards against (a miscompiled transposed FP8 store) showed in only some calls.
"""

from __future__ import annotations

import math

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, poisoned_empty, replay

from turbo_core.dispatch.specs.quantization import DequantizeFp8Args, QuantizeFp8Args, QuantizeFp8WithTransArgs
from turbo_core.low_precision import ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
R0, R2D = ScalingRecipe(), ScalingRecipe(use_2d_block=True)
#: id -> (granularity, axis, block size, recipe)
QUANT = {
    "tensorwise": ("TENSORWISE", None, None, R0),
    "rowwise-last": ("ROWWISE", -1, None, R0),
    "rowwise-first": ("ROWWISE", 0, None, R0),
    "block1x128": ("BLOCKWISE", -1, 128, R0),
    "block128x1": ("BLOCKWISE", 0, 128, R0),
    "block1x32": ("BLOCKWISE", -1, 32, R0),
    "block2d-128": ("BLOCKWISE", None, 128, R2D),
    "block2d-32": ("BLOCKWISE", None, 32, R2D),
    "mx-row": ("MX_BLOCKWISE", -1, 32, R0),
    "mx-col": ("MX_BLOCKWISE", -2, 32, R0),
    "mx-2d": ("MX_BLOCKWISE", -1, 32, R2D),
}
#: id -> (granularity, block size, recipe, recipe_for_trans)
WITH_TRANS = {
    "block128": ("BLOCKWISE", 128, R0, R0),
    "block32": ("BLOCKWISE", 32, R0, R0),
    "mx": ("MX_BLOCKWISE", 32, R0, R0),
    "mx-2d-row": ("MX_BLOCKWISE", 32, R2D, R0),
    "mx-2d-both": ("MX_BLOCKWISE", 32, R2D, R2D),
}
#: input id -> (shape, FP8 dtype, input dtype); "special", "3d" and "transposed" are built below
INPUTS = {
    "16384x4096": ((16384, 4096), E4M3, torch.bfloat16),
    "16384x4096-e5m2": ((16384, 4096), E5M2, torch.bfloat16),
    "4095x14337": ((4095, 14337), E4M3, torch.bfloat16),
    "4095x14337-fp32": ((4095, 14337), E4M3, torch.float32),
    "2048x53248": ((2048, 53248), E4M3, torch.bfloat16),
    "1x8192": ((1, 8192), E4M3, torch.bfloat16),
    "37x45-e5m2-fp32": ((37, 45), E5M2, torch.float32),
    "1x1-fp32": ((1, 1), E4M3, torch.float32),
    "5x40-fp32": ((5, 40), E4M3, torch.float32),
    "special-fp32": ((4096, 4096), E4M3, torch.float32),
    "special-fp32-e5m2": ((4096, 4096), E5M2, torch.float32),
    "special-bf16": ((4096, 4096), E4M3, torch.bfloat16),
    "special-bf16-e5m2": ((4096, 4096), E5M2, torch.bfloat16),
    "3d": ((3, 300, 700), E4M3, torch.bfloat16),
    "transposed": ((4096, 8192), E4M3, torch.bfloat16),
}


def _rand(shape, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(shape, device=DEV, generator=g) * 3).to(dtype)


def _special(shape, dtype):
    """Zero blocks, NaN, +-Inf, values that saturate under MX scales, fp32 subnormals."""
    x = _rand(shape, torch.float32, 99)
    m, n = shape
    x[:130] = 0  # whole zero rows, zero 128-row blocks and tiles
    x[:, :128] = 0
    x[200, 300], x[300, 700], x[400, 1000], x[500, 1100] = math.nan, math.inf, -math.inf, 500.0
    x[600] *= 1e-40  # a row of fp32 subnormals
    return x.to(dtype)


def _input(name):
    shape, fp8, in_dtype = INPUTS[name]
    if name.startswith("special"):
        return _special(shape, in_dtype), fp8
    if name == "transposed":
        return _rand(shape[::-1], in_dtype, 6).t(), fp8
    return _rand(shape, in_dtype, sum(shape)), fp8


@pytest.mark.parametrize("case", list(QUANT))
@pytest.mark.parametrize("name", list(INPUTS))
def test_quantize_and_dequantize_bit_identical(name, case):
    from turbo_triton.quantization import dequantize, quantize

    x, fp8 = _input(name)
    gran, axis, bs, recipe = QUANT[case]
    args = QuantizeFp8Args(x, fp8, gran, axis, bs, recipe)
    want = ref.quantize_fp8(args)
    with poisoned_empty(0xA5):
        got = quantize.quantize_fp8(args)
    assert_same_bits(got, want, what="quantize_fp8 (q, scale_inv)", require_contiguous=True)
    for i, out_dtype in enumerate((torch.float32, torch.bfloat16, torch.float16)):
        dargs = DequantizeFp8Args(want[0], want[1], out_dtype, gran, axis, bs, recipe)
        with poisoned_empty((0xA5, 0x5A)[i % 2]):
            out = dequantize.dequantize_fp8(dargs)
        assert_same_bits(out, ref.dequantize_fp8(dargs), what=f"dequantize_fp8 to {out_dtype}")


@pytest.mark.parametrize("case", list(WITH_TRANS))
@pytest.mark.parametrize("name", [n for n in INPUTS if n != "3d"])
def test_quantize_with_trans_bit_identical(name, case):
    from turbo_triton.quantization import quantize_with_trans

    x, fp8 = _input(name)
    args = QuantizeFp8WithTransArgs(x, fp8, *WITH_TRANS[case])
    with poisoned_empty(0x5A):
        got = quantize_with_trans.quantize_fp8_with_trans(args)
    assert_same_bits(got, ref.quantize_fp8_with_trans(args), what="quantize_fp8_with_trans (q_row, s_row, q_col, s_col)")


#: MX 2-D (32 x 32 tiles) tile shapes: what the heuristic picks for short rows (32 x 128: N <= 128),
#: for long rows (32 x 256) and for more than 32 rows (64 x 128), and square ones.
#: ``(block_m, block_n, num_warps)``.
MX_2D_TILES = [(32, 128, 4), (32, 256, 4), (64, 128, 4), (32, 32, 4), (64, 64, 4), (32, 128, 8)]


@pytest.mark.parametrize("tile", MX_2D_TILES, ids=lambda t: "{}x{}w{}".format(*t))
@pytest.mark.parametrize("name", ["1x1-fp32", "5x40-fp32", "37x45-e5m2-fp32", "1x8192"])
@pytest.mark.parametrize("axis", [-1, -2], ids=["row", "col"])
def test_mx_2d_every_tile_shape(name, tile, axis):
    """MX_BLOCKWISE with 32 x 32 tiles at each tile shape, bit for bit against the reference: which
    tile shape, if any, the compiled kernel gets wrong."""
    from turbo_triton.quantization import quantize
    from turbo_triton.quantization.common import Tile

    x, _fp8 = _input(name)
    args = QuantizeFp8Args(x, torch.float8_e4m3fn, "MX_BLOCKWISE", axis, 32, R2D)
    with poisoned_empty(0xA5):
        got = quantize.quantize_fp8(args, Tile(*tile))
    assert_same_bits(got, ref.quantize_fp8(args), what=f"MX 2-D q, scale at tile {tile}")


@pytest.mark.parametrize("tile", [(32, 128, 4), (32, 256, 4), (64, 128, 4)], ids=lambda t: "{}x{}w{}".format(*t))
@pytest.mark.parametrize("two_d", [False, True], ids=["1d", "2d"])
def test_mx_col_direction_repeated_on_tiny_inputs(tile, two_d):
    """The column direction's transposed FP8 store, called 200 times on 1x1 inputs: compiled with a
    hardware FP8 conversion, about one call in twenty wrote bytes that are not the converted values
    (zeros of the padded rows came out as 0x60, 0x01, ...), so one call passing says little."""
    from turbo_triton.quantization import quantize
    from turbo_triton.quantization.common import Tile

    recipe = R2D if two_d else R0
    for i in range(200):
        x = _rand((1, 1), torch.float32, i)
        args = QuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", -2, 32, recipe)
        with poisoned_empty(0xA5):
            got = quantize.quantize_fp8(args, Tile(*tile))
        assert_same_bits(got, ref.quantize_fp8(args), what=f"call {i}: MX col q, scale at tile {tile}")


GRAPHED = {
    "tensorwise": lambda t: QuantizeFp8Args(t, E4M3, "TENSORWISE"),
    "rowwise-first": lambda t: QuantizeFp8Args(t, E4M3, "ROWWISE", 0),
    "mx-col": lambda t: QuantizeFp8Args(t, E4M3, "MX_BLOCKWISE", -2, 32),
    "with-trans-block128": lambda t: QuantizeFp8WithTransArgs(t, E4M3, "BLOCKWISE", 128),
    "with-trans-mx": lambda t: QuantizeFp8WithTransArgs(t, E4M3, "MX_BLOCKWISE", 32),
}


@pytest.mark.parametrize("case", list(GRAPHED))
def test_graph_replays_on_new_data(case):
    from turbo_triton.quantization import quantize, quantize_with_trans

    static = _rand((4096, 7168), torch.bfloat16, 1)
    args = GRAPHED[case](static)
    with_trans = isinstance(args, QuantizeFp8WithTransArgs)
    launcher = quantize_with_trans.quantize_fp8_with_trans if with_trans else quantize.quantize_fp8
    graph, out = capture(lambda: launcher(args))
    static.copy_(_rand((4096, 7168), torch.bfloat16, 2))
    replay(graph)
    want = ref.quantize_fp8_with_trans(args) if with_trans else ref.quantize_fp8(args)
    assert_same_bits(out, want, what=f"{case} replayed on new data")
