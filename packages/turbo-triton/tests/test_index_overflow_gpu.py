"""The memory-bound TRITON kernels past 2^31 elements, compiled on a GPU (``@pytest.mark.gpu``; run with
``TRITON_INTERPRET=0``, see ``gpu_support``): an offset computed in int32 wraps there, and the kernel
then reads or writes the wrong place (or faults).

Inputs are ``[ROWS, H]`` bf16 with ``ROWS = 2^31 / 4096 + 3`` and ``H = 4096`` (``2^31 + 12288``
elements, 4 GiB; rows ``ROWS - 3`` on start past element ``2^31``); the GLU input is ``[ROWS, 8192]``
so that its output passes ``2^31`` too; the batched with-trans quantizations take ``[2, ROWS, 4096]``
(MX FP8: one batch's data passes ``2^31`` bytes) and ``[2, 2^32 / 4096 + 3, 4096]`` (MXFP4: one
batch's packed bytes pass ``2^31``), where the batch offset is a product of two sizes. The results are
compared with the TORCH reference on the same GPU on slices: the first rows and the last rows (from a
multiple of 128 below ``2^31 / H`` to the end), which the reference computes on its own:

* row-wise quantization (ROWWISE, BLOCKWISE 1 x 128, MX 1 x 32; MXFP4), RMSNorm forward, SwiGLU and
  GeGLU forward and backward: the reference on those rows;
* quantization with scales over whole columns or the whole tensor (TENSORWISE, ROWWISE along the
  rows, ROWWISE with-trans): the last row is set to 64 (above any |randn| here), so the reference on
  the first and last rows alone has the same amax;
* block layouts along the rows (BLOCKWISE and MX with-trans, grouped): slices that start on a block
  (and, grouped, on the last group's block) boundary, the reference on that sub-problem;
* RMSNorm backward: ``dy`` is zero outside the checked rows, so ``dgamma`` (a sum over every row,
  those past ``2^31`` included) equals the reference's over the checked rows;
* cross entropy forward and backward over ``x`` read as ``ROWS`` rows of ``H`` logits (every fifth row
  ignored): the reference on those rows;
* MoE permute / unpermute / unpermute backward (262147 tokens x top-2 of 8 experts, padding to 16:
  ``[524294+, 4096]`` permuted rows): the whole output against the reference.

Quantized data and scales, permuted rows and grad_permuted bit for bit; RMSNorm, GLU and the
unpermuted tokens within bf16's tolerance (1e-2; the unpermute sum's order 2^-8), grad_merging_probs
1e-5. Memory: at most about 40 GiB at once (the MoE references, the MXFP4 batch). Time: a few
seconds a test on an H200, most of it filling the inputs.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, assert_within

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.dispatch.specs.moe import (
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
)
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.dispatch.specs.quantization import (
    DequantizeFp8Args,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingGranularity
from turbo_core.reference import activation as ref_act
from turbo_core.reference import loss as ref_loss
from turbo_core.reference import moe_permute as ref_moe
from turbo_core.reference import normalization as ref_norm
from turbo_core.reference import quantization as ref_q
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

G = ScalingGranularity
E4M3 = torch.float8_e4m3fn
H = 4096
ROWS = 2**31 // H + 3
BLOCK = 128  # slices start on a multiple of it: every block layout's boundary
EPS = 1e-6
PLANT = 64.0  # above any |randn| of a few billion draws (about 6.5)


def head_tail(rows: int) -> list[slice]:
    """The first 128 rows (fewer if there are fewer) and the rows from the last multiple of 128 at
    least 128 rows before the end: the rows past ``2^31`` elements at full size."""
    tail = max(0, (rows // BLOCK - 1) * BLOCK)
    return [slice(0, min(rows, BLOCK)), slice(tail, rows)]


def randn(*shape, seed: int, device=DEV) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, dtype=torch.bfloat16, device=device, generator=gen)


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    """``[ROWS, H]`` bf16, shared by the tests of this module (none changes it for good)."""
    return randn(ROWS, H, seed=0)


class planted_last_row:
    """Within the block the last row of ``x`` is ``PLANT``: every column's (and the tensor's) amax."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __enter__(self) -> torch.Tensor:
        self.saved = self.x[-1].clone()
        self.x[-1] = PLANT
        return self.x

    def __exit__(self, *exc) -> None:
        self.x[-1] = self.saved


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def same(got, want, what: str) -> None:
    """Bit for bit; one-byte dtypes (FP8, E8M0, packed FP4) compared as bytes, strided views too."""
    def u8(t):
        return t.view(torch.uint8) if t.element_size() == 1 else t
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    assert_same_bits([u8(t) for t in got], [u8(t) for t in want], what=what)


# -- row-wise quantization ----------------------------------------------------------------------------

ROW_CASES = {"ROWWISE": (G.ROWWISE, None), "BLOCKWISE-128": (G.BLOCKWISE, 128), "MX": (G.MX_BLOCKWISE, 32)}


def check_quantize_rows(x: torch.Tensor, gran: G, bs: int | None) -> None:
    from turbo_triton.quantization import quantize

    q, s = quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, gran, -1, bs))
    for sl in head_tail(x.shape[0]):
        rq, rs = ref_q.quantize_fp8(QuantizeFp8Args(x[sl], E4M3, gran, -1, bs))
        same([q[sl], s[sl]], [rq, rs], f"quantize_fp8 {gran.value} rows {sl.start}:{sl.stop}")


@pytest.mark.parametrize("case", list(ROW_CASES))
def test_quantize_fp8_along_rows(x, case):
    check_quantize_rows(x, *ROW_CASES[case])


def check_dequantize_rows(x: torch.Tensor) -> None:
    from turbo_triton.quantization import dequantize, quantize

    q, s = quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, G.BLOCKWISE, -1, BLOCK))
    out = dequantize.dequantize_fp8(DequantizeFp8Args(q, s, torch.bfloat16, G.BLOCKWISE, -1, BLOCK))
    for sl in head_tail(x.shape[0]):
        want = ref_q.dequantize_fp8(DequantizeFp8Args(q[sl], s[sl], torch.bfloat16, G.BLOCKWISE, -1, BLOCK))
        same(out[sl], want, f"dequantize_fp8 rows {sl.start}:{sl.stop}")


def test_dequantize_fp8_along_rows(x):
    check_dequantize_rows(x)


def check_quantize_fp4_rows(x: torch.Tensor) -> None:
    from turbo_triton.quantization import fp4

    q, s = fp4.quantize_fp4(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1))
    for sl in head_tail(x.shape[0]):
        rq, rs = ref_q.quantize_fp4(QuantizeFp4Args(x[sl], FLOAT4_E2M1FN_X2, -1))
        same([q[sl], s[sl]], [rq, rs], f"quantize_fp4 rows {sl.start}:{sl.stop}")


def test_quantize_fp4_along_rows(x):
    check_quantize_fp4_rows(x)


# -- scales over whole columns or the whole tensor ----------------------------------------------------

def _head_and_tail(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t[sl] for sl in head_tail(t.shape[0])])


def check_quantize_whole(x: torch.Tensor, gran: G, axis: int | None) -> None:
    """TENSORWISE, or ROWWISE along the rows (one scale a column, over every row)."""
    from turbo_triton.quantization import quantize

    with planted_last_row(x):
        q, s = quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, gran, axis))
        rq, rs = ref_q.quantize_fp8(QuantizeFp8Args(_head_and_tail(x), E4M3, gran, axis))
    same(s, rs, f"quantize_fp8 {gran.value} scale_inv")
    same(_head_and_tail(q), rq, f"quantize_fp8 {gran.value} q, first and last rows")


@pytest.mark.parametrize("gran,axis", [(G.TENSORWISE, None), (G.ROWWISE, 0)], ids=["TENSORWISE", "ROWWISE-axis0"])
def test_quantize_fp8_whole_tensor_or_columns(x, gran, axis):
    check_quantize_whole(x, gran, axis)


def check_rowwise_with_trans(x: torch.Tensor) -> None:
    from turbo_triton.quantization import quantize_with_trans

    with planted_last_row(x):
        q_row, s_row, q_col, s_col = quantize_with_trans.quantize_fp8_with_trans(
            QuantizeFp8WithTransArgs(x, E4M3, G.ROWWISE))
        want = ref_q.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(_head_and_tail(x), E4M3, G.ROWWISE))
    got = [_head_and_tail(q_row), _head_and_tail(s_row), _head_and_tail(q_col), s_col]
    same(got, want, "quantize_fp8_with_trans ROWWISE (q_row, s_row, q_col, s_col)")


def test_quantize_fp8_with_trans_rowwise(x):
    check_rowwise_with_trans(x)


# -- block layouts along the rows ------------------------------------------------------------------------

def check_blockwise_with_trans(x: torch.Tensor) -> None:
    from turbo_triton.quantization import quantize_with_trans

    q_row, s_row, q_col, s_col = quantize_with_trans.quantize_fp8_with_trans(
        QuantizeFp8WithTransArgs(x, E4M3, G.BLOCKWISE, BLOCK))
    for sl in head_tail(x.shape[0]):
        want = ref_q.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(x[sl], E4M3, G.BLOCKWISE, BLOCK))
        blocks = slice(sl.start // BLOCK, cdiv(sl.stop, BLOCK))
        same([q_row[sl], s_row[sl], q_col[sl], s_col[blocks]], want,
             f"quantize_fp8_with_trans BLOCKWISE rows {sl.start}:{sl.stop}")


def test_quantize_fp8_with_trans_blockwise(x):
    check_blockwise_with_trans(x)


def check_mx_with_trans(x3: torch.Tensor, fp4: bool = False) -> None:
    """MX FP8 (or MXFP4) with-trans of ``x3`` (2-D, or 3-D: every batch checked): the row copy's rows;
    the col copy (``[N, M_pad]``, FP4 ``[N, M_pad / 2]`` bytes) at the slice's columns, its padding
    included."""
    from turbo_triton.quantization import fp4 as fp4_launch
    from turbo_triton.quantization import quantize_with_trans

    if fp4:
        launch, ref, per_byte = fp4_launch.quantize_fp4_with_trans, ref_q.quantize_fp4_with_trans, 2

        def make(t):
            return QuantizeFp4WithTransArgs(t, FLOAT4_E2M1FN_X2)
    else:
        launch, ref, per_byte = quantize_with_trans.quantize_fp8_with_trans, ref_q.quantize_fp8_with_trans, 1

        def make(t):
            return QuantizeFp8WithTransArgs(t, E4M3, G.MX_BLOCKWISE, 32)

    q_row, s_row, q_col, s_col = launch(make(x3))
    batched = x3.dim() == 3
    for b in range(x3.shape[0] if batched else 1):
        xb = x3[b] if batched else x3
        parts = [t[b] if batched else t for t in (q_row, s_row, q_col, s_col)]
        for sl in head_tail(xb.shape[0]):
            want = ref(make(xb[sl]))
            width = want[2].shape[-1] * per_byte  # the slice's rows, padded
            cols = slice(sl.start // per_byte, (sl.start + width) // per_byte)
            blocks = slice(sl.start // 32, (sl.start + width) // 32)
            same([parts[0][sl], parts[1][sl], parts[2][:, cols], parts[3][:, blocks]], want,
                 f"{'MXFP4' if fp4 else 'MX FP8'} with_trans batch {b} rows {sl.start}:{sl.stop}")


def test_quantize_fp8_with_trans_mx(x):
    check_mx_with_trans(x)


def test_quantize_fp8_with_trans_mx_batched():
    """Batch 1 starts ``ROWS * 4096 > 2^31`` bytes into each output: ``b * M * N_pad`` in int64."""
    check_mx_with_trans(randn(2, ROWS, H, seed=1))


def test_quantize_fp4_with_trans_batched():
    """MXFP4 packs two values a byte: batch 1 starts past ``2^31`` bytes at ``2^32 / 4096 + 3`` rows."""
    check_mx_with_trans(randn(2, 2**32 // H + 3, H, seed=2), fp4=True)


# -- grouped quantization --------------------------------------------------------------------------------

#: (data dim, scale dim, rows per scale row) of each copy's layout along the (padded) rows
MX_ROWS, MX_COLS, BLOCK_COLS, TIGHT_ROWS = (0, 0, 1), (1, 1, 32), (0, 0, BLOCK), (0, 1, 1)


def _groups(rows: int, device) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Three groups (one empty) ending 5 rows before the end: the last one ends past ``2^31``."""
    first = (rows // 2) | 1
    lens = [first, 0, rows - 5 - first]
    offs = [0, first, first, rows - 5]
    return lens, torch.tensor(lens, dtype=torch.int64, device=device), torch.tensor(offs, dtype=torch.int64, device=device)


def _along(t: torch.Tensor, dim: int, start: int, stop: int) -> torch.Tensor:
    return t[start:stop] if dim == 0 else t[:, start:stop]


def check_grouped(x: torch.Tensor, gran: G, bs: int | None, axis: int | None, layouts) -> None:
    """Grouped quantization of ``x`` (``axis`` None: with-trans, two copies) against the reference on two
    sub-problems: the first 256 rows of group 0, and the last group from a block of it on (a group of
    its own, so its padded layout is the tail of the full one); the rows past the last padded group
    are zero."""
    from turbo_triton.quantization import grouped

    lens, gl, go = _groups(x.shape[0], x.device)

    def run(launch, xs, gls, gos):
        if axis is None:
            out = launch(GroupedQuantizeFp8WithTransArgs(xs, E4M3, gran, gls, gos, bs))
            return [(out[0], out[1], out[5]), (out[2], out[3], out[7])]  # (data, scales, offsets) per copy
        q, s, _, offs = launch(GroupedQuantizeFp8Args(xs, E4M3, gran, gls, gos, axis, bs))
        return [(q, s, offs)]

    launch = grouped.grouped_quantize_fp8_with_trans if axis is None else grouped.grouped_quantize_fp8
    ref = ref_q.grouped_quantize_fp8_with_trans if axis is None else ref_q.grouped_quantize_fp8
    full = run(launch, x, gl, go)
    last = max(0, (lens[2] - 300) // BLOCK * BLOCK)  # the last group's rows from here on: a sub-problem
    first = min(2 * BLOCK, lens[0] // BLOCK * BLOCK)  # group 0's first rows: another
    subs = {0: (x[:first], 0), 2: (x[go[2].item() + last:go[3].item()], last)}
    for group, (xs, skip) in subs.items():
        n = xs.shape[0]
        want = run(ref, xs, torch.tensor([n], dtype=torch.int64, device=x.device),
                   torch.tensor([0, n], dtype=torch.int64, device=x.device))
        for c, ((q, s, offs), (rq, rs, roffs), (ddim, sdim, per)) in enumerate(zip(full, want, layouts, strict=True)):
            start = int(offs[group]) + skip
            rows = int(roffs[1])  # the sub-problem's group, padded
            got = [_along(q, ddim, start, start + rows), _along(s, sdim, start // per, (start + rows) // per)]
            same(got, [_along(rq, ddim, 0, rows), _along(rs, sdim, 0, rows // per)],
                 f"grouped {gran.value} axis={axis} copy {c}, group {group} from row {skip}")
            if (ddim, sdim, per) != TIGHT_ROWS:  # padded layouts: zeros past the last group
                past = _along(q, ddim, int(offs[-1]), q.shape[ddim])
                assert not past.view(torch.uint8).any(), f"grouped {gran.value} copy {c}: rows past the groups"


GROUPED = {
    "MX-rowwise": (G.MX_BLOCKWISE, 32, -1, [MX_ROWS]),
    "MX-colwise": (G.MX_BLOCKWISE, 32, 0, [MX_COLS]),
    "BLOCKWISE-colwise": (G.BLOCKWISE, BLOCK, 0, [BLOCK_COLS]),
    "BLOCKWISE-rowwise": (G.BLOCKWISE, BLOCK, -1, [TIGHT_ROWS]),
    "MX-with_trans": (G.MX_BLOCKWISE, 32, None, [MX_ROWS, MX_COLS]),
    "BLOCKWISE-with_trans": (G.BLOCKWISE, BLOCK, None, [TIGHT_ROWS, BLOCK_COLS]),
}


@pytest.mark.parametrize("case", list(GROUPED))
def test_grouped_quantize_fp8(x, case):
    check_grouped(x, *GROUPED[case])


# -- RMSNorm -------------------------------------------------------------------------------------------------

def check_rmsnorm(x: torch.Tensor) -> None:
    from turbo_triton.normalization import launch

    rows, hidden = x.shape
    gamma = (1.0 + 0.5 * randn(hidden, seed=3, device=x.device).float()).to(torch.bfloat16)
    y, rstd, _ = launch.rmsnorm_fwd(RmsNormFwdArgs(x, gamma, EPS))
    checked = head_tail(rows)
    dy = torch.zeros_like(x)
    for i, sl in enumerate(checked):
        dy[sl] = randn(sl.stop - sl.start, hidden, seed=4 + i, device=x.device)
    dx, dgamma = launch.rmsnorm_bwd(RmsNormBwdArgs(dy, x, gamma, rstd))
    for sl in checked:
        ry, rrstd, _ = ref_norm.rmsnorm_fwd(RmsNormFwdArgs(x[sl], gamma, EPS))
        assert_within(f"rmsnorm y rows {sl.start}:{sl.stop}", y[sl], ry.double(), 1e-2, 1e-2)
        assert_within(f"rmsnorm rstd rows {sl.start}:{sl.stop}", rstd[sl], rrstd.double(), 0.0, 1e-5)
    pick = _head_and_tail
    rdx, rdgamma = ref_norm.rmsnorm_bwd(RmsNormBwdArgs(pick(dy), pick(x), gamma, pick(rstd)))
    assert_within("rmsnorm dx, first and last rows", pick(dx), rdx.double(), 1e-2, 1e-2)
    # dgamma sums every row: the rows of zero dy add nothing, those checked include the rows past 2^31
    assert_within("rmsnorm dgamma", dgamma, rdgamma.double(), 1e-3 * float(rdgamma.double().abs().max()), 1e-2)


def test_rmsnorm_fwd_bwd(x):
    check_rmsnorm(x)


# -- cross entropy ----------------------------------------------------------------------------------------------

def test_cross_entropy_fwd_bwd(x):
    """``x`` as ``[ROWS, 4096]`` logits: the rows past ``2^31`` elements get their own loss, lse and gradient."""
    from turbo_triton.loss import launch

    gen = torch.Generator(device=x.device).manual_seed(7)
    target = torch.randint(0, H, (ROWS,), device=x.device, generator=gen)
    target[::5] = -100
    dloss = torch.rand(ROWS, device=x.device, generator=gen)
    loss, lse = launch.cross_entropy_fwd(CrossEntropyFwdArgs(x, target, -100, 0.1))
    dx = launch.cross_entropy_bwd(CrossEntropyBwdArgs(dloss, x, target, lse, -100, 0.1))
    for sl in head_tail(ROWS):
        where = f"cross entropy rows {sl.start}:{sl.stop}"
        rloss, rlse = ref_loss.cross_entropy_fwd(CrossEntropyFwdArgs(x[sl], target[sl], -100, 0.1))
        assert_within(f"{where} loss", loss[sl], rloss.double(), 1e-5, 1e-5)
        assert_within(f"{where} lse", lse[sl], rlse.double(), 1e-5, 1e-5)
        rdx = ref_loss.cross_entropy_bwd(CrossEntropyBwdArgs(dloss[sl], x[sl], target[sl], rlse, -100, 0.1))
        assert_within(f"{where} dlogits", dx[sl], rdx.double(), 1e-2 * float(rdx.double().abs().max()), 1e-2)
    del dx


# -- SwiGLU / GeGLU ---------------------------------------------------------------------------------------------

def check_glu(kind: str, x2: torch.Tensor) -> None:
    from turbo_triton.activation import launch

    rows, half = x2.shape[0], x2.shape[1] // 2
    gen = torch.Generator(device=x2.device).manual_seed(5)
    probs = torch.rand(rows, device=x2.device, generator=gen)
    grad = randn(rows, half, seed=6, device=x2.device)
    out = launch.glu_fwd(kind, GluFwdArgs(x2, probs))
    gx, gp = launch.glu_bwd(kind, GluBwdArgs(grad, x2, probs))
    fwd, bwd = (ref_act.swiglu_fwd, ref_act.swiglu_bwd) if kind == "swiglu" else (ref_act.geglu_fwd, ref_act.geglu_bwd)
    for sl in head_tail(rows):
        where = f"{kind} rows {sl.start}:{sl.stop}"
        assert_within(f"{where} out", out[sl], fwd(GluFwdArgs(x2[sl], probs[sl])).double(), 1e-2, 1e-2)
        rgx, rgp = bwd(GluBwdArgs(grad[sl], x2[sl], probs[sl]))
        assert_within(f"{where} grad_x", gx[sl], rgx.double(), 1e-2, 1e-2)
        assert_within(f"{where} grad_probs", gp[sl], rgp.double(), 1e-3 * float(rgp.double().abs().max()), 1e-2)


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_glu_fwd_bwd(kind):
    """``x [ROWS, 8192]``: the input passes ``2^32`` elements, the output and ``grad_out`` ``2^31``."""
    check_glu(kind, randn(ROWS, 2 * H, seed=7))


# -- MoE permute / unpermute --------------------------------------------------------------------------------

def check_moe(tokens: int, hidden: int, experts: int = 8, topk: int = 2, device=DEV) -> None:
    from turbo_triton.moe import permute, unpermute

    gen = torch.Generator(device=device).manual_seed(8)
    idx = torch.rand((tokens, experts), generator=gen, device=device).topk(topk, dim=1).indices.to(torch.int32)
    probs = torch.rand((tokens, topk), generator=gen, device=device)
    rmap, tpe, _, _ = ref_moe.moe_permute_preprocess(
        MoePermutePreprocessArgs(idx, experts, pad_multiple=16, probs_layout="topk"))
    n = int(tpe.sum())
    x = randn(tokens, hidden, seed=9, device=device)
    pa = MoePermuteArgs(x, rmap, n, None, probs)
    got = permute.moe_permute(pa)
    assert_same_bits(got, ref_moe.moe_permute(pa), what="moe_permute (rows, scales, probs)")
    y = got[0]
    ua = MoeUnpermuteArgs(y, rmap, got[2], topk, probs)
    out, out_probs = unpermute.moe_unpermute(ua)
    want, want_probs = ref_moe.moe_unpermute(ua)
    assert_same_bits(out_probs, want_probs, what="moe_unpermute: the permuted probs scattered back")
    torch.testing.assert_close(out.float(), want.float(), rtol=2**-8, atol=1e-6,
                               msg=lambda m: f"moe_unpermute tokens: {m}")
    del out, want, out_probs, want_probs
    grad = randn(tokens, hidden, seed=10, device=device)
    ba = MoeUnpermuteBwdArgs(grad, y, rmap, probs)
    gx, gm = unpermute.moe_unpermute_bwd(ba)
    rgx, rgm = ref_moe.moe_unpermute_bwd(ba)
    assert_same_bits(gx, rgx, what="moe_unpermute_bwd grad_permuted")
    torch.testing.assert_close(gm, rgm, rtol=1e-5, atol=1e-5 * float(grad.float().abs().mean() * hidden),
                               msg=lambda m: f"moe_unpermute_bwd grad_merging_probs: {m}")


def test_moe_permute_unpermute():
    """262147 tokens x top-2: ``[524294 + padding, 4096]`` permuted rows, past ``2^31`` elements."""
    check_moe(2**31 // H // 2 + 3, H)
