"""The TRITON grouped quantization kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``).

Against the TORCH reference on the same CUDA tensors, bit for bit (``assert_same_bits``: NaN positions
must match), outputs the launchers allocate poisoned first (0xA5 bytes):

* ``grouped_quantize_fp8`` (BLOCKWISE 128 row- and col-wise, BLOCKWISE 32 col-wise, MX row/col),
  ``grouped_quantize_fp8_with_trans`` (BLOCKWISE 128, MX), ``grouped_dequantize_fp8`` (bf16/fp32 out),
  ``grouped_quantize_fp4`` (row, col), ``grouped_quantize_fp4_with_trans``, ``grouped_dequantize_fp4``,
  E4M3 and E5M2, at MoE sizes (16384 tokens over 8 and 32 skewed groups, one of them empty; hidden
  4096 and 7168) and an odd one (rows past ``group_offs[-1]``, fp32 input);
* the fast paths (``fast=True``: float amax, hardware saturation, pair kernels) and the generic ones
  (``fast=False``) on inputs with NaN, +-Inf, -0.0, zero rows and columns and subnormals, at 16384 x
  7168 over 32 groups and odd sizes (3001 x 999, 7 groups, rows past the last group) in bf16, fp32 and
  fp16; BLOCKWISE with_trans's variants and the MX col-wise dequantization's tiles against the
  generic path / the default tile;
* CUDA graphs: each fast path (and three generic ones) captured, replayed on new data and new group
  sizes.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, poisoned_empty, replay

from turbo_core.dispatch.specs import quantization as qs
from turbo_core.low_precision import FLOAT4_E2M1FN_X2 as FP4
from turbo_core.reference import quantization as ref
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@pytest.fixture(scope="module")
def grouped():
    from turbo_triton.quantization import grouped

    return grouped


def _groups(m, g, tail, seed):
    """Skewed group sizes (weights ~ U(0, 1)^3, group 1 empty) summing to ``m - tail``."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(g, generator=gen) ** 3
    w[min(1, g - 1)] = 0
    lens = (w / w.sum() * (m - tail)).floor().to(torch.int64)
    lens[0] += (m - tail) - int(lens.sum())
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens.to(DEV), offs.to(DEV)


def _rand(m, n, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, n, device=DEV, generator=g) * 3
    x[:, :64] *= 1e-3
    return x.to(dtype)


def _special(m, n, dtype, seed):
    """``_rand`` with subnormals every 11th element, a zero column and row, NaN, +-Inf and -0.0."""
    x = _rand(m, n, torch.float32, seed)
    x.view(-1)[::11] *= 1e-38
    x[:, 5] = 0
    x[3] = 0
    x[7, 9], x[100, n - 1], x[m - 3, 2], x[11, 13] = float("nan"), float("inf"), -float("inf"), -0.0
    return x.to(dtype)


def _call(fn, args, **kw):
    with poisoned_empty(0xA5):
        return fn(args, **kw)


# -- every launcher at MoE sizes -------------------------------------------------------------------

#: id -> (M, N, groups, rows past the groups, input dtype)
SHAPES = {"m16384-n4096-g8": (16384, 4096, 8, 0, torch.bfloat16),
          "m16384-n7168-g32": (16384, 7168, 32, 0, torch.bfloat16),
          "odd-m4099-n1000-g5": (4099, 1000, 5, 37, torch.float32)}
#: id -> (granularity, axis, block size)
FP8_CASES = {"bw128-row": ("BLOCKWISE", 1, 128), "bw128-col": ("BLOCKWISE", 0, 128), "bw32-col": ("BLOCKWISE", 0, 32),
             "mx-row": ("MX_BLOCKWISE", 1, 32), "mx-col": ("MX_BLOCKWISE", 0, 32)}


def _shape(name):
    m, n, g, tail, dtype = SHAPES[name]
    lens, offs = _groups(m, g, tail, seed=g)
    return _rand(m, n, dtype, seed=m + n), lens, offs


@pytest.mark.parametrize("case", list(FP8_CASES))
@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_grouped_fp8_quantize_and_dequantize(grouped, shape, fp8, case):
    x, lens, offs = _shape(shape)
    gran, axis, bs = FP8_CASES[case]
    args = qs.GroupedQuantizeFp8Args(x, fp8, gran, lens, offs, axis, bs)
    want = ref.grouped_quantize_fp8(args)
    assert_same_bits(_call(grouped.grouped_quantize_fp8, args), want, what="grouped_quantize_fp8")
    q, s, _, offs_padded = want
    total = x.shape[0] if (gran == "BLOCKWISE" and axis == 1) else int(offs[-1])
    for out_dtype in (torch.bfloat16, torch.float32):
        dargs = qs.GroupedDequantizeFp8Args(q, s, out_dtype, gran, offs, offs_padded, total, axis, bs)
        assert_same_bits(_call(grouped.grouped_dequantize_fp8, dargs), ref.grouped_dequantize_fp8(dargs),
                         what=f"grouped_dequantize_fp8 to {out_dtype}")


@pytest.mark.parametrize("case", [("BLOCKWISE", 128), ("MX_BLOCKWISE", 32)], ids=["bw128", "mx"])
@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_grouped_fp8_with_trans(grouped, shape, fp8, case):
    x, lens, offs = _shape(shape)
    args = qs.GroupedQuantizeFp8WithTransArgs(x, fp8, case[0], lens, offs, case[1])
    assert_same_bits(_call(grouped.grouped_quantize_fp8_with_trans, args), ref.grouped_quantize_fp8_with_trans(args),
                     what="grouped_quantize_fp8_with_trans")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_grouped_fp4(grouped, shape):
    x, lens, offs = _shape(shape)
    for axis in (1, 0):
        args = qs.GroupedQuantizeFp4Args(x, FP4, lens, offs, axis)
        want = ref.grouped_quantize_fp4(args)
        assert_same_bits(_call(grouped.grouped_quantize_fp4, args), want, what=f"grouped_quantize_fp4 axis={axis}")
        q, s, _, offs_padded = want
        dargs = qs.GroupedDequantizeFp4Args(q, s, torch.bfloat16, axis, group_offs=offs, group_offs_padded=offs_padded,
                                            total_m=None if axis == 1 else int(offs[-1]))
        assert_same_bits(_call(grouped.grouped_dequantize_fp4, dargs), ref.grouped_dequantize_fp4(dargs),
                         what=f"grouped_dequantize_fp4 axis={axis}")
    args = qs.GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    assert_same_bits(_call(grouped.grouped_quantize_fp4_with_trans, args), ref.grouped_quantize_fp4_with_trans(args),
                     what="grouped_quantize_fp4_with_trans")


# -- the fast paths and the generic ones on special values ------------------------------------------

def _fast_cases(grouped, x, lens, offs, fp8=E4M3, out=torch.bfloat16):
    """id -> (launcher, reference, args) of every launcher with a fast path."""
    a8 = qs.GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, 0, 32)
    q, s, _, op = ref.grouped_quantize_fp8(a8)
    qr, sr, _, opr = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, 1, 32))
    m = x.shape[0]
    return {
        "q4-col": (grouped.grouped_quantize_fp4, ref.grouped_quantize_fp4, qs.GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)),
        "q4-trans": (grouped.grouped_quantize_fp4_with_trans, ref.grouped_quantize_fp4_with_trans,
                     qs.GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)),
        "q8-mx-col": (grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8, a8),
        "dq8-mx-col": (grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8,
                       qs.GroupedDequantizeFp8Args(q, s, out, "MX_BLOCKWISE", offs, op, m, 0, 32)),
        "dq8-mx-row": (grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8,
                       qs.GroupedDequantizeFp8Args(qr, sr, out, "MX_BLOCKWISE", offs, opr, m, 1, 32)),
        "q8-bw128-col": (grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
                         qs.GroupedQuantizeFp8Args(x, fp8, "BLOCKWISE", lens, offs, 0, 128)),
        "q8-bw32-col": (grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
                        qs.GroupedQuantizeFp8Args(x, fp8, "BLOCKWISE", lens, offs, 0, 32)),
        "q8-wt-bw128": (grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
                        qs.GroupedQuantizeFp8WithTransArgs(x, fp8, "BLOCKWISE", lens, offs, 128)),
        "q8-wt-mx": (grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
                     qs.GroupedQuantizeFp8WithTransArgs(x, fp8, "MX_BLOCKWISE", lens, offs, 32)),
    }


FAST_CASES = ["q4-col", "q4-trans", "q8-mx-col", "dq8-mx-col", "dq8-mx-row", "q8-bw128-col", "q8-bw32-col",
              "q8-wt-bw128", "q8-wt-mx"]
#: id -> (M, N, groups, input dtype, with special values, FP8 format, dequantized dtype)
FAST_INPUTS = {"16384x7168-bf16-special": (16384, 7168, 32, torch.bfloat16, True, E4M3, torch.bfloat16),
               "16384x7168-bf16-e5m2-fp32out": (16384, 7168, 32, torch.bfloat16, False, E5M2, torch.float32),
               "3001x999-bf16-special": (3001, 999, 7, torch.bfloat16, True, E4M3, torch.bfloat16),
               "3001x999-fp32-special-fp16out": (3001, 999, 7, torch.float32, True, E4M3, torch.float16),
               "3001x1000-fp16-special": (3001, 1000, 7, torch.float16, True, E4M3, torch.bfloat16)}


def _fast_lens(m, g, seed):
    """Skewed group sizes over ~95% of ``m`` (rows past the last group), group 1 empty."""
    return _groups(m, g, m // 20, seed)


@pytest.mark.parametrize("case", FAST_CASES)
@pytest.mark.parametrize("inputs", list(FAST_INPUTS))
def test_fast_and_generic_paths(grouped, inputs, case):
    m, n, g, dtype, special, fp8, out = FAST_INPUTS[inputs]
    x = _special(m, n, dtype, seed=m + n) if special else _rand(m, n, dtype, seed=m + n)
    lens, offs = _fast_lens(m, g, seed=g)
    fn, ref_fn, args = _fast_cases(grouped, x, lens, offs, fp8=fp8, out=out)[case]
    want = ref_fn(args)
    for fast in (True, False):
        assert_same_bits(_call(fn, args, fast=fast), want, what=f"{case} fast={fast}")


@pytest.mark.parametrize("bs", [128, 32])
def test_blockwise_with_trans_variants_agree(grouped, bs):
    """The generic path, the default, ``fast=True`` and (128) the fast path on 8 warps: same bits."""
    from turbo_triton.quantization.common import Tile

    x = _rand(16384, 7168, torch.bfloat16, seed=1)
    lens, offs = _fast_lens(16384, 32, seed=32)
    args = qs.GroupedQuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", lens, offs, bs)
    fn = grouped.grouped_quantize_fp8_with_trans
    want = fn(args, fast=False)
    variants = {"default": {}, "fast": {"fast": True}}
    if bs == 128:
        variants["fast, 8 warps"] = {"fast": True, "tile": Tile(128, 128, 8)}
    for name, kw in variants.items():
        assert_same_bits(_call(fn, args, **kw), want, what=f"with_trans BLOCKWISE {bs} {name} vs fast=False")


@pytest.mark.parametrize("tile", [(64, 64, 4), (128, 128, 8), (64, 128, 4), (64, 128, 8), (256, 64, 8), (32, 128, 4),
                                  (128, 32, 4), (64, 256, 8), (32, 256, 4)], ids=lambda t: "x".join(map(str, t)))
def test_mx_col_dequantize_tiles_agree(grouped, tile):
    from turbo_triton.quantization.common import Tile

    x = _rand(16384, 7168, torch.bfloat16, seed=1)
    lens, offs = _fast_lens(16384, 32, seed=32)
    args = _fast_cases(grouped, x, lens, offs)["dq8-mx-col"][2]
    want = grouped.grouped_dequantize_fp8(args, fast=True)
    assert_same_bits(grouped.grouped_dequantize_fp8(args, Tile(*tile), fast=True), want, what=f"tile {tile}")


# -- CUDA graphs -----------------------------------------------------------------------------------

GRAPHED = [(c, True) for c in FAST_CASES] + [("q8-mx-col", False), ("q8-wt-bw128", False), ("q4-trans", False)]


@pytest.mark.parametrize("case,fast", GRAPHED, ids=[f"{c}-{'fast' if f else 'generic'}" for c, f in GRAPHED])
def test_graph_replays_with_new_data_and_groups(grouped, case, fast):
    m, n, g = 16384, 7168, 32
    x = _special(m, n, torch.bfloat16, seed=11)
    lens, offs = _fast_lens(m, g, seed=11)
    fn, ref_fn, args = _fast_cases(grouped, x, lens, offs)[case]
    graph, out = capture(lambda: fn(args, fast=fast))
    new_x = _special(m, n, torch.bfloat16, seed=12)
    new_lens, new_offs = _fast_lens(m, g, seed=12)
    if case.startswith("dq8"):  # new quantized data and scales of the same shapes
        q, s, _, op = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(
            new_x, E4M3, "MX_BLOCKWISE", new_lens, new_offs, 0 if case == "dq8-mx-col" else 1, 32))
        args.x.copy_(q)
        args.scale_inv.copy_(s)
        args.group_offs_padded.copy_(op)
    x.copy_(new_x)
    lens.copy_(new_lens)
    offs.copy_(new_offs)
    replay(graph)
    assert_same_bits(out, ref_fn(args), what=f"{case} replayed on new data and group sizes")
