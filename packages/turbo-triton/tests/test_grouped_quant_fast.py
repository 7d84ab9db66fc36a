"""The fast paths of the TRITON grouped quantization kernels (the dense launchers' faster code
paths read through the grouped row maps) against the TORCH reference bit for bit, CPU
interpreter, with the generic path (``fast=False``) beside them:

* MXFP4 col-wise, bf16: ``grouped_fp4_pairs_col_kernel`` (even/odd padded rows, ``_pairs_col``).
* MXFP4 with_trans, bf16: ``grouped_fp4_pairs_with_trans_kernel`` (``_pairs_row`` twice through
  ``dst``, ``_pairs_col``).
* FP8 MX col-wise dequantize: ``grouped_mx_dequant_trans_kernel`` (tiles of the padded data, loads
  along the padded rows, stored transposed to the rows of the inverse map) and
  ``grouped_mx_dequant_fix_kernel`` (rows of no group, rows the inverse misses), every input dtype.
* FP8 MX row-wise dequantize: ``grouped_dequant_kernel`` with ``BLOCK_SCALES`` (each scale byte loaded
  once a tile and broadcast, as the dense MX dequantize).
* FP8 BLOCKWISE col-wise quantize with ``HW_SAT``; FP8 with_trans (BLOCKWISE and MX) with ``FAST`` (float
  amax, ``HW_SAT``): the dense with_trans kernels' arithmetic, on the generic path's tiles.
* FP8 MX col-wise quantize: ``grouped_quant_mx_kernel`` with ``FAST`` (float group amax, the
  hardware saturation on GPUs: the interpreter keeps the software clamp), every input dtype.

Every case runs ``fast`` True and False; a spy on the fast kernel checks which path ran: the FP4
pair kernels take bf16 when fast, fp32/fp16 never (the generic path runs); the FP8 paths take every
input dtype when fast. ``fast=None`` is ``grouped.FAST_DEFAULT`` (on by default; the other grouped
tests run the default), but BLOCKWISE with_trans under 128-wide blocks only on ``fast=True``;
``test_fast_default_switch`` checks both settings of the switch.
Inputs: an empty group, group lengths that are no multiple of 32, rows past the last group,
odd ``N`` and ``N`` past one tile, NaN/Inf, all-zero blocks, -0.0, subnormals; forced small
tiles (several programs a group, ragged edges) and the default ones.
"""

import pytest
import torch
from bit_compare import assert_same

from turbo_core.dispatch.specs.quantization import (
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import FLOAT4_E2M1FN_X2
from turbo_core.reference import quantization as ref
from turbo_triton.quantization import grouped, grouped_fp4_kernels, grouped_kernels
from turbo_triton.quantization.common import Tile

FP4 = FLOAT4_E2M1FN_X2
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2

pytestmark = pytest.mark.skipif(FP4 is None, reason="torch without float4_e2m1fn_x2")

# (group lens, rows past the last group, N, index dtype): an empty group, lengths that are no
# multiple of 32 (33, 7, 31, 100), odd N below one 128-wide tile and N past it.
CASES = {
    "odd": ([33, 0, 64, 7], 5, 67, torch.int64),
    "wide": ([0, 100, 31], 0, 130, torch.int32),
}
FASTS = [True, False]  # None is FAST_DEFAULT: test_fast_default_switch, and every other test's default call


def _tile_id(t) -> str:
    return f"{t.block_m}x{t.block_n}x{t.num_warps}" if t else "auto"


def _groups(case: str):
    lens_list, tail, n, idx = CASES[case]
    m = sum(lens_list) + tail
    lens = torch.tensor(lens_list, dtype=idx)
    offs = torch.tensor([0, *torch.tensor(lens_list).cumsum(0).tolist()], dtype=idx)
    return m, n, lens, offs


def _input(m: int, n: int, dtype: torch.dtype, seed: int, special: bool = True) -> torch.Tensor:
    """Gaussian with magnitudes spread over columns, every 7th value tiny (bf16 subnormals); with
    ``special`` an all-zero column and row (zero blocks both ways), -0.0, NaN, +-Inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * torch.logspace(-3, 3, n)
    x.view(-1)[::7] *= 1e-37
    if special:
        x[:, 3] = 0
        x[4] = 0
        x[6, 5] = -0.0
        x[2, 9] = float("nan")
        x[40, n - 1] = float("inf")
        x[m - 2, 1] = -float("inf")
    return x.to(dtype)


class _Spy:
    """Counts the launches of a Triton kernel (``kernel[grid](...)``), keeps their keyword
    arguments (the constexprs) and runs them."""

    def __init__(self, kernel):
        self.kernel, self.calls, self.kwargs = kernel, 0, []

    def __getitem__(self, grid):
        self.calls += 1
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            self.kwargs.append(kwargs)
            return launch(*args, **kwargs)
        return run


@pytest.fixture
def spy(monkeypatch):
    def make(module, name):
        s = _Spy(getattr(module, name))
        monkeypatch.setattr(module, name, s)
        return s
    return make


def _assert_all_same(actual, expected, what):
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_same(a, e, f"{what} output {i}")


# -- MXFP4 col-wise --------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("tile", [None, Tile(32, 32, 1), Tile(64, 16, 1)], ids=_tile_id)
@pytest.mark.parametrize("case", list(CASES))
def test_fp4_col_bf16(case, tile, fast, spy):
    m, n, lens, offs = _groups(case)
    x = _input(m, n, torch.bfloat16, seed=m + n)
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_col_kernel")
    args = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
    _assert_all_same(grouped.grouped_quantize_fp4(args, tile, fast=fast), ref.grouped_quantize_fp4(args),
                     f"fp4 col {case} fast={fast}")
    assert s.calls == int(grouped._fast(fast))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.float16], ids=str)
def test_fp4_col_not_bf16(in_dtype, fast, spy):
    m, n, lens, offs = _groups("odd")
    x = _input(m, n, in_dtype, seed=3)
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_col_kernel")
    args = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
    _assert_all_same(grouped.grouped_quantize_fp4(args, fast=fast), ref.grouped_quantize_fp4(args),
                     f"fp4 col {in_dtype} fast={fast}")
    assert s.calls == 0


# Transposed (strided) bf16 input, a tile too small for the pair kernel (it falls back), every group
# empty, and groups claiming more rows than x has (the row map reads zeros for them).
@pytest.mark.parametrize("what", ["strided", "small-tile", "all-empty", "overclaimed"])
def test_fp4_col_odd_inputs(what, spy):
    m, n, lens, offs = _groups("odd")
    tile, calls = None, 1
    x = _input(m, n, torch.bfloat16, seed=5, special=False)
    if what == "strided":
        x = _input(n, m, torch.bfloat16, seed=5, special=False).t()
    elif what == "small-tile":
        tile, calls = Tile(64, 4), 0  # 256 elements on 4 warps: fewer than two pairs a thread
    elif what == "all-empty":
        lens, offs = torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)
    else:
        lens, offs = torch.tensor([60, 60]), torch.tensor([0, 60, 120])
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_col_kernel")
    args = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
    _assert_all_same(grouped.grouped_quantize_fp4(args, tile, fast=True), ref.grouped_quantize_fp4(args),
                     f"fp4 col {what}")
    assert s.calls == calls


# -- MXFP4 with_trans ------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("tile", [None, Tile(32, 32, 1), Tile(64, 64, 2)], ids=_tile_id)
@pytest.mark.parametrize("case", list(CASES))
def test_fp4_with_trans_bf16(case, tile, fast, spy):
    m, n, lens, offs = _groups(case)
    x = _input(m, n, torch.bfloat16, seed=2 * m + n)
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_with_trans_kernel")
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    _assert_all_same(grouped.grouped_quantize_fp4_with_trans(args, tile, fast=fast),
                     ref.grouped_quantize_fp4_with_trans(args), f"fp4 with_trans {case} fast={fast}")
    assert s.calls == int(grouped._fast(fast))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.float16], ids=str)
def test_fp4_with_trans_not_bf16(in_dtype, fast, spy):
    m, n, lens, offs = _groups("wide")
    x = _input(m, n, in_dtype, seed=7)
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_with_trans_kernel")
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    _assert_all_same(grouped.grouped_quantize_fp4_with_trans(args, fast=fast),
                     ref.grouped_quantize_fp4_with_trans(args), f"fp4 with_trans {in_dtype} fast={fast}")
    assert s.calls == 0


# Strided bf16 input, a tile the pair kernel declines, every group empty (all rows are the tight row
# copy's tail), groups claiming more rows than x has, no rows at all.
@pytest.mark.parametrize("what", ["strided", "small-tile", "all-empty", "overclaimed", "no-rows"])
def test_fp4_with_trans_odd_inputs(what, spy):
    m, n, lens, offs = _groups("odd")
    tile, calls = None, 1
    x = _input(m, n, torch.bfloat16, seed=9, special=False)
    if what == "strided":
        x = _input(n, m, torch.bfloat16, seed=9, special=False).t()
    elif what == "small-tile":
        tile, calls = Tile(32, 32, 8), 0  # 1024 elements on 8 warps: fewer than two pairs a thread
    elif what == "all-empty":
        lens, offs = torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)
    elif what == "overclaimed":
        lens, offs = torch.tensor([60, 60]), torch.tensor([0, 60, 120])
    else:
        x = x[:0]
        lens, offs = torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
    s = spy(grouped_fp4_kernels, "grouped_fp4_pairs_with_trans_kernel")
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    _assert_all_same(grouped.grouped_quantize_fp4_with_trans(args, tile, fast=True),
                     ref.grouped_quantize_fp4_with_trans(args), f"fp4 with_trans {what}")
    assert s.calls == calls


# -- FP8 MX col-wise dequantize ---------------------------------------------------------------------------

def _mx_col_quantized(case: str, fp8: torch.dtype, axis: int = 0):
    """The reference's MX quantization (``q [N, M_c]`` col-wise) of an input with NaN/Inf (0xFF
    scales), zero blocks, subnormal results: ``(q, s, offs, offs_pad, m)``."""
    m, n, lens, offs = _groups(case)
    x = _input(m, n, torch.float32, seed=11 * m + n)
    q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, axis, 32))
    return q, s, offs, op, m


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("tile", [None, Tile(4, 16), Tile(32, 8, 1)], ids=_tile_id)
@pytest.mark.parametrize("fp8,out_dtype", [(E4M3, torch.bfloat16), (E5M2, torch.float32), (E4M3, torch.float16)],
                         ids=["e4m3-bf16", "e5m2-fp32", "e4m3-fp16"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_mx_col_dequantize(case, fp8, out_dtype, tile, fast, spy):
    q, s, offs, op, _ = _mx_col_quantized(case, fp8)
    k = spy(grouped_kernels, "grouped_mx_dequant_trans_kernel")
    args = GroupedDequantizeFp8Args(q, s, out_dtype, "MX_BLOCKWISE", offs, op, int(offs[-1]), -2, 32)
    assert_same(grouped.grouped_dequantize_fp8(args, tile, fast=fast), ref.grouped_dequantize_fp8(args),
                f"mx col dequantize {case} {fp8} {out_dtype} fast={fast}")
    assert k.calls == int(grouped._fast(fast))


# total_M past the groups (rows of no group: zero), short of them (cut), none; strided data and
# scales; padded offsets that overlap (group 2's last 32 rows sit in group 3's padded rows: the
# main kernel's tiles skip them and the fix-up kernel gathers them).
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("what", ["longer", "shorter", "no-rows", "strided", "overlap"])
def test_fp8_mx_col_dequantize_odd(what, spy):
    q, s, offs, op, m = _mx_col_quantized("odd", E4M3)
    total = {"longer": m + 9, "shorter": int(offs[-1]) - 20, "no-rows": 0}.get(what, int(offs[-1]))
    if what == "strided":
        q, s = q.t().contiguous().t(), s.t().contiguous().t()
    if what == "overlap":
        assert op.tolist() == [0, 128, 128, 256, 384]  # lens 33, 0, 64, 7 padded to 128
        op = op.clone()
        op[3] = 160
    k = spy(grouped_kernels, "grouped_mx_dequant_trans_kernel")
    args = GroupedDequantizeFp8Args(q, s, torch.bfloat16, "MX_BLOCKWISE", offs, op, total, 0, 32)
    out = grouped.grouped_dequantize_fp8(args, fast=True)
    assert_same(out, ref.grouped_dequantize_fp8(args), f"mx col dequantize {what}")
    assert k.calls == (0 if total == 0 else 1)


# MX row-wise: fast loads each scale byte once a tile (BLOCK_SCALES) where the tile is a whole number of
# 32-column blocks, and gathers it per element otherwise (16 columns) or when not fast.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("tile", [None, Tile(4, 64), Tile(8, 16, 1)], ids=_tile_id)
@pytest.mark.parametrize("fp8,out_dtype", [(E4M3, torch.bfloat16), (E5M2, torch.float32), (E4M3, torch.float16)],
                         ids=["e4m3-bf16", "e5m2-fp32", "e4m3-fp16"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_mx_row_dequantize(case, fp8, out_dtype, tile, fast, spy):
    q, s, offs, op, m = _mx_col_quantized(case, fp8, axis=1)
    k = spy(grouped_kernels, "grouped_dequant_kernel")
    args = GroupedDequantizeFp8Args(q, s, out_dtype, "MX_BLOCKWISE", offs, op, m + 3, 1, 32)
    assert_same(grouped.grouped_dequantize_fp8(args, tile, fast=fast), ref.grouped_dequantize_fp8(args),
                f"mx row dequantize {case} {fp8} {out_dtype} fast={fast}")
    blocked = grouped._fast(fast) and (tile is None or tile.block_n % 32 == 0)
    assert [kw["BLOCK_SCALES"] for kw in k.kwargs] == [blocked]


# Layouts the transposed-store kernel is not for (MX row-wise, BLOCKWISE col-wise): never taken.
@pytest.mark.parametrize("gran,axis", [("MX_BLOCKWISE", 1), ("BLOCKWISE", 0)])
def test_fp8_dequantize_other_layouts(gran, axis, spy):
    m, n, lens, offs = _groups("odd")
    x = _input(m, n, torch.float32, seed=13, special=False)
    q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, 32))
    k = spy(grouped_kernels, "grouped_mx_dequant_trans_kernel")
    args = GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, op, int(offs[-1]), axis, 32)
    assert_same(grouped.grouped_dequantize_fp8(args, fast=True), ref.grouped_dequantize_fp8(args), f"{gran} {axis}")
    assert k.calls == 0


# -- FP8 MX col-wise quantize -------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("tile", [None, Tile(32, 8, 1), Tile(64, 32, 2)], ids=_tile_id)
@pytest.mark.parametrize("fp8,in_dtype", [(E4M3, torch.bfloat16), (E5M2, torch.float32), (E4M3, torch.float16)],
                         ids=["e4m3-bf16", "e5m2-fp32", "e4m3-fp16"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_mx_col_quantize(case, fp8, in_dtype, tile, fast, spy):
    m, n, lens, offs = _groups(case)
    x = _input(m, n, in_dtype, seed=m + 3 * n)
    k = spy(grouped_kernels, "grouped_quant_mx_kernel")
    args = GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, -2, 32)
    _assert_all_same(grouped.grouped_quantize_fp8(args, tile, fast=fast), ref.grouped_quantize_fp8(args),
                     f"mx col quantize {case} {fp8} {in_dtype} fast={fast}")
    assert [kw["FAST"] for kw in k.kwargs] == [grouped._fast(fast)]


# Strided input, every group empty, groups claiming more rows than x has; the row-wise layout never
# takes FAST.
@pytest.mark.parametrize("what", ["strided", "all-empty", "overclaimed", "row-wise"])
def test_fp8_mx_col_quantize_odd(what, spy):
    m, n, lens, offs = _groups("odd")
    x = _input(m, n, torch.bfloat16, seed=15, special=False)
    axis = 0
    if what == "strided":
        x = _input(n, m, torch.bfloat16, seed=15, special=False).t()
    elif what == "all-empty":
        lens, offs = torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)
    elif what == "overclaimed":
        lens, offs = torch.tensor([60, 60]), torch.tensor([0, 60, 120])
    else:
        axis = 1
    k = spy(grouped_kernels, "grouped_quant_mx_kernel")
    args = GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, axis, 32)
    _assert_all_same(grouped.grouped_quantize_fp8(args, fast=True), ref.grouped_quantize_fp8(args),
                     f"mx quantize {what}")
    assert [kw["FAST"] for kw in k.kwargs] == [axis == 0]


# -- FP8 BLOCKWISE col-wise and FP8 with_trans --------------------------------------------------------------

# BLOCKWISE col-wise fast only adds HW_SAT, which the interpreter never takes (its software clamp): the bits
# of the launch with it are checked here, the hardware saturation itself by grouped_quant_fast_gpu.py.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("bs", [128, 32])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_blockwise_col_quantize(case, bs, fast, spy):
    m, n, lens, offs = _groups(case)
    x = _input(m, n, torch.bfloat16, seed=m + 5 * n)
    k = spy(grouped_kernels, "grouped_quant_groups_kernel")
    args = GroupedQuantizeFp8Args(x, E4M3, "BLOCKWISE", lens, offs, 0, bs)
    _assert_all_same(grouped.grouped_quantize_fp8(args, fast=fast), ref.grouped_quantize_fp8(args),
                     f"blockwise {bs} col quantize {case} fast={fast}")
    assert [kw["HW_SAT"] for kw in k.kwargs] == [False]  # the interpreter: never the hardware saturation


# with_trans fast: the float amax on the BLOCKWISE row copy and on both MX copies, on the generic path's
# tiles (BLOCKWISE 128: 4 warps); the same bits as the generic path and the reference.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fast", FASTS, ids=lambda f: f"fast{f}")
@pytest.mark.parametrize("gran,bs", [("BLOCKWISE", 128), ("BLOCKWISE", 32), ("MX_BLOCKWISE", 32)],
                         ids=["bw128", "bw32", "mx"])
@pytest.mark.parametrize("fp8,in_dtype", [(E4M3, torch.bfloat16), (E5M2, torch.float32)], ids=["e4m3-bf16", "e5m2-fp32"])
@pytest.mark.parametrize("case", list(CASES))
def test_fp8_with_trans(case, fp8, in_dtype, gran, bs, fast, spy):
    m, n, lens, offs = _groups(case)
    x = _input(m, n, in_dtype, seed=3 * m + n)
    name = "grouped_blockwise_with_trans_kernel" if gran == "BLOCKWISE" else "grouped_mx_with_trans_kernel"
    k = spy(grouped_kernels, name)
    args = GroupedQuantizeFp8WithTransArgs(x, fp8, gran, lens, offs, bs)
    _assert_all_same(grouped.grouped_quantize_fp8_with_trans(args, fast=fast),
                     ref.grouped_quantize_fp8_with_trans(args), f"with_trans {gran} {bs} {case} fast={fast}")
    assert [kw["FAST"] for kw in k.kwargs] == [grouped._fast(fast)]
    if gran == "BLOCKWISE" and bs == 128:  # both on the generic path's 4-warp tile (8 warps are not faster)
        assert [kw["num_warps"] for kw in k.kwargs] == [4]


# FAST_DEFAULT on (the default): fast=None takes every fast path but BLOCKWISE with_trans under 128-wide
# blocks; off: none of them. The same bits either way.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("on", [True, False])
def test_fast_default_switch(spy, monkeypatch, on):
    monkeypatch.setattr(grouped, "FAST_DEFAULT", on)
    m, n, lens, offs = _groups("odd")
    x = _input(m, n, torch.bfloat16, seed=21)
    p_col = spy(grouped_fp4_kernels, "grouped_fp4_pairs_col_kernel")
    p_wt = spy(grouped_fp4_kernels, "grouped_fp4_pairs_with_trans_kernel")
    q8 = spy(grouped_kernels, "grouped_quant_mx_kernel")
    dq8 = spy(grouped_kernels, "grouped_mx_dequant_trans_kernel")
    a4 = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
    _assert_all_same(grouped.grouped_quantize_fp4(a4), ref.grouped_quantize_fp4(a4), "fp4 col default")
    a4t = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    _assert_all_same(grouped.grouped_quantize_fp4_with_trans(a4t), ref.grouped_quantize_fp4_with_trans(a4t),
                     "fp4 with_trans default")
    a8 = GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 0, 32)
    want = ref.grouped_quantize_fp8(a8)
    _assert_all_same(grouped.grouped_quantize_fp8(a8), want, "mx col quantize default")
    q, s, _, op = want
    d8 = GroupedDequantizeFp8Args(q, s, torch.bfloat16, "MX_BLOCKWISE", offs, op, int(offs[-1]), 0, 32)
    assert_same(grouped.grouped_dequantize_fp8(d8), ref.grouped_dequantize_fp8(d8), "mx col dequantize default")
    # off, the FP4 col-wise call takes grouped_quant_mx_kernel too (its FAST is FP8-only)
    q8_fast = [True] if on else [False, False]
    assert (p_col.calls, p_wt.calls, [kw["FAST"] for kw in q8.kwargs], dq8.calls) == (on, on, q8_fast, on)
    qr, sr, _, opr = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 1, 32))
    dr = GroupedDequantizeFp8Args(qr, sr, torch.bfloat16, "MX_BLOCKWISE", offs, opr, m, 1, 32)
    gd = spy(grouped_kernels, "grouped_dequant_kernel")
    assert_same(grouped.grouped_dequantize_fp8(dr), ref.grouped_dequantize_fp8(dr), "mx row dequantize default")
    assert [kw["BLOCK_SCALES"] for kw in gd.kwargs] == [on]
    for gran, bs, name in (("BLOCKWISE", 128, "grouped_blockwise_with_trans_kernel"),
                           ("BLOCKWISE", 32, "grouped_blockwise_with_trans_kernel"),
                           ("MX_BLOCKWISE", 32, "grouped_mx_with_trans_kernel")):
        wt = spy(grouped_kernels, name)
        a8t = GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs)
        _assert_all_same(grouped.grouped_quantize_fp8_with_trans(a8t), ref.grouped_quantize_fp8_with_trans(a8t),
                         f"with_trans {gran} default")
        assert [kw["FAST"] for kw in wt.kwargs] == [on and (gran == "MX_BLOCKWISE" or bs >= 128)]
