"""Quantization ops: the conformance cases on TORCH, the scale-layout table at odd sizes, every
validation error, edge cases (zero-size, non-contiguous, NaN), opcheck and fullgraph compile of
every custom op, and a check that the conformance oracle does catch wrong kernels."""

import pytest
import torch

from turbo_core import BackendError, Format, ScalingGranularity, ScalingRecipe, use_backend
from turbo_core.dispatch import get_primitive, select
from turbo_core.ops import (
    dequantize_fp4,
    dequantize_fp8,
    grouped_dequantize_fp4,
    grouped_dequantize_fp8,
    grouped_quantize_fp4,
    grouped_quantize_fp4_with_trans,
    grouped_quantize_fp8,
    grouped_quantize_fp8_with_trans,
    quantize_fp4,
    quantize_fp4_with_trans,
    quantize_fp8,
    quantize_fp8_with_trans,
)
from turbo_core.testing.cases.quantization import CASES

E4M3, E5M2, FP4, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
G = ScalingGranularity
NO_RECIPE = [False] * 5


def _cd(a, b):
    return -(-a // b)


# -- the layout table, at odd sizes ------------------------------------------------------------------
# Every granularity x axis on 1-D, 2-D (1x111, 7x333) and 3-D inputs: the shapes the table promises.

@pytest.mark.parametrize("shape", [(111,), (1, 111), (7, 333), (3, 5, 7)])
@pytest.mark.parametrize("dtype", [E4M3, E5M2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz])
def test_tensorwise_and_rowwise_layouts(shape, dtype):
    x = torch.randn(shape)
    q, s = quantize_fp8(x, dtype, G.TENSORWISE)
    assert q.shape == x.shape and q.dtype == dtype and s.shape == () and s.dtype == torch.float32
    for axis in range(-len(shape), len(shape)):
        q, s = quantize_fp8(x, dtype, "ROWWISE", axis=axis)
        want = list(shape)
        want[axis] = 1
        assert q.shape == x.shape and tuple(s.shape) == tuple(want) and s.dtype == torch.float32
        torch.testing.assert_close(s.double(), x.double().abs().amax(dim=axis, keepdim=True) / torch.finfo(dtype).max,
                                   rtol=1e-6, atol=0)


@pytest.mark.parametrize("shape", [(1, 111), (7, 333), (3, 5, 67)])
@pytest.mark.parametrize("bs", [1, 16, 128])
def test_blockwise_layouts(shape, bs):
    x = torch.randn(shape, dtype=torch.bfloat16)
    for axis in range(-len(shape), len(shape)):
        q, s = quantize_fp8(x, E4M3, G.BLOCKWISE, block_size=bs, axis=axis)
        want = list(shape)
        want[axis] = _cd(shape[axis], bs)
        assert q.shape == x.shape and tuple(s.shape) == tuple(want), (axis, s.shape)
        d = dequantize_fp8(q, torch.bfloat16, G.BLOCKWISE, block_size=bs, axis=axis, scale_inv=s)
        assert d.shape == x.shape and d.dtype == torch.bfloat16
    q, s = quantize_fp8(x, E5M2, G.BLOCKWISE, block_size=bs, scaling_recipe=ScalingRecipe(use_2d_block=True))
    assert tuple(s.shape) == (*shape[:-2], _cd(shape[-2], bs), _cd(shape[-1], bs))


@pytest.mark.parametrize("shape", [(1, 111), (7, 333), (3, 5, 67), (64, 128)])
def test_mx_layouts(shape):
    x = torch.randn(shape, dtype=torch.bfloat16)
    lead, m, n = shape[:-2], shape[-2], shape[-1]
    nd = len(shape)
    for axis in (-1, nd - 1):
        q, s = quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=axis)
        assert q.shape == (*lead, m, _cd(n, 128) * 128) and s.shape == (*lead, m, _cd(n, 128) * 4)
        assert s.dtype == E8M0 and q.dtype == E4M3
        q4, s4 = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=axis)
        assert q4.shape == (*lead, m, _cd(n, 128) * 64) and s4.shape == s.shape and q4.dtype == FP4
    for axis in (-2, nd - 2):
        q, s = quantize_fp8(x, E5M2, "MX_BLOCKWISE", axis=axis, block_size=32)
        assert q.shape == (*lead, n, _cd(m, 128) * 128) and s.shape == (*lead, n, _cd(m, 128) * 4)
        d = dequantize_fp8(q, torch.float32, "MX_BLOCKWISE", axis=axis, scale_inv=s)
        assert d.shape == (*lead, _cd(m, 128) * 128, n)
        q4, s4 = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=axis)
        assert q4.shape == (*lead, n, _cd(m, 128) * 64)
        assert dequantize_fp4(q4, torch.float16, "MX_BLOCKWISE", axis=axis, scale_inv=s4).shape == d.shape


def test_with_trans_layouts():
    x = torch.randn(7, 333)
    qr, sr, qc, sc = quantize_fp8_with_trans(x, E4M3, "BLOCKWISE", block_size=128)
    assert (qr.shape, sr.shape, qc.shape, sc.shape) == ((7, 333), (7, 3), (7, 333), (1, 333))
    qr, sr, qc, sc = quantize_fp8_with_trans(torch.randn(2, 7, 333), E4M3, "MX_BLOCKWISE")
    assert (qr.shape, sr.shape, qc.shape, sc.shape) == ((2, 7, 384), (2, 7, 12), (2, 333, 128), (2, 333, 4))
    qr, sr, qc, sc = quantize_fp4_with_trans(x, FP4, "MX_BLOCKWISE")
    assert (qr.shape, sr.shape, qc.shape, sc.shape) == ((7, 192), (7, 12), (333, 64), (333, 4))
    for shape in ((7, 333), (2, 7, 333)):  # ROWWISE: one scale per row and per column, data in x's layout
        x = torch.randn(shape)
        qr, sr, qc, sc = quantize_fp8_with_trans(x, E4M3, "ROWWISE")
        assert (qr.shape, sr.shape, qc.shape, sc.shape) == (shape, (*shape[:-1], 1), shape, (*shape[:-2], 1, 333))
        for (q, sc_), axis in (((qr, sr), -1), ((qc, sc), -2)):
            want = quantize_fp8(x, E4M3, "ROWWISE", axis=axis)
            assert torch.equal(q.view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(sc_, want[1])


def test_grouped_layouts_and_padded_offsets_on_device_math():
    lens = torch.tensor([3, 0, 40, 1])
    x = torch.randn(44, 70)
    q, s, lp, op = grouped_quantize_fp8(x, E4M3, "MX_BLOCKWISE", lens, axis=1)  # group_offs computed
    assert q.shape == (_cd(44 + 4 * 32, 32) * 32, 128) and s.shape == (q.shape[0], 4)
    assert lp.tolist() == [32, 0, 64, 32] and op.tolist() == [0, 32, 32, 96, 128]
    q, s, lp, op = grouped_quantize_fp8(x, E4M3, "MX_BLOCKWISE", lens, None, axis=-2)
    assert q.shape == (70, _cd(44 + 4 * 128, 128) * 128) and lp.tolist() == [128, 0, 128, 128]
    out = grouped_quantize_fp8_with_trans(x, E4M3, "BLOCKWISE", lens, block_size=16)
    assert [tuple(t.shape) for t in out[:4]] == [(44, 70), (5, 44), (44 + 64, 70), (_cd(108, 16), 70)]
    assert out[4].tolist() == lens.tolist() and out[6].tolist() == [16, 0, 48, 16]
    out = grouped_quantize_fp4_with_trans(x, FP4, "MX_BLOCKWISE", lens)
    assert [tuple(t.shape) for t in out[:4]] == [(44, 64), (44, 4), (70, 1280), (70, 80)]
    assert out[6].tolist() == [512, 0, 512, 512] and out[5].tolist() == [0, 3, 3, 43, 44]
    d = grouped_dequantize_fp8(*grouped_quantize_fp8(x, E4M3, "MX_BLOCKWISE", lens, axis=1)[:1], torch.bfloat16,
                               "MX_BLOCKWISE", torch.tensor([0, 3, 3, 43, 44]), torch.tensor([0, 32, 32, 96, 128]),
                               axis=1, scale_inv=grouped_quantize_fp8(x, E4M3, "MX_BLOCKWISE", lens, axis=1)[1])
    assert d.shape == (44, 128)  # total_M read from group_offs (a host sync, allowed in eager mode)


# -- edge cases -------------------------------------------------------------------------------------------

def test_zero_size_inputs_give_finite_scales():
    x = torch.zeros(0, 5)
    q, s = quantize_fp8(x, E4M3, "TENSORWISE")
    assert q.shape == (0, 5) and torch.isfinite(s)
    q, s = quantize_fp8(x, E4M3, "ROWWISE", axis=0)
    assert s.shape == (1, 5) and torch.isfinite(s).all()
    q, s = quantize_fp8(x, E4M3, "BLOCKWISE", axis=0, block_size=4)
    assert s.shape == (0, 5)
    q, s = quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=-2)
    assert q.shape == (5, 0) and s.shape == (5, 0)
    q, s = quantize_fp4(torch.zeros(0, 40), FP4, "MX_BLOCKWISE", axis=-1)
    assert q.shape == (0, 64) and s.shape == (0, 4)
    q, s, lp, op = grouped_quantize_fp8(torch.zeros(0, 64), E4M3, "MX_BLOCKWISE", torch.zeros(2, dtype=torch.int64),
                                        axis=0)
    assert lp.tolist() == [0, 0] and q.shape == (64, 256)


def test_non_contiguous_input_equals_contiguous():
    x = torch.randn(70, 33, dtype=torch.bfloat16).t()
    for gran, kw in [("ROWWISE", dict(axis=-1)), ("BLOCKWISE", dict(axis=0, block_size=16)),
                     ("MX_BLOCKWISE", dict(axis=-1))]:
        a = quantize_fp8(x, E4M3, gran, **kw)
        b = quantize_fp8(x.contiguous(), E4M3, gran, **kw)
        assert all(torch.equal(u.view(torch.uint8), v.view(torch.uint8)) for u, v in zip(a, b, strict=True))


def test_quantization_has_no_autograd():
    x = torch.randn(8, 64, requires_grad=True)
    q, s = quantize_fp8(x, E4M3, "ROWWISE", axis=-1)
    assert not q.requires_grad and not s.requires_grad and q.grad_fn is None
    d = dequantize_fp8(q, torch.float32, "ROWWISE", axis=-1, scale_inv=s)
    assert not d.requires_grad
    q4, s4 = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    assert not q4.requires_grad


def test_format_as_out_dtype_resolves_per_device():
    x = torch.randn(4, 32)
    assert quantize_fp8(x, Format.E4M3, "TENSORWISE")[0].dtype == E4M3
    assert quantize_fp8(x, "E5M2", "TENSORWISE")[0].dtype == E5M2
    assert quantize_fp4(x, Format.E2M1_X2, "MX_BLOCKWISE", axis=-1)[0].dtype == FP4
    with pytest.raises(ValueError, match="^out_dtype: expected an FP8 dtype or E4M3/E5M2, got HYBRID"):
        quantize_fp8(x, Format.HYBRID, "TENSORWISE")


def test_nan_inf_semantics():
    x = torch.ones(2, 64)
    x[0, 0] = float("nan")
    q, s = quantize_fp8(x, E4M3, "TENSORWISE")
    assert torch.isnan(s) and torch.isnan(dequantize_fp8(q, torch.float32, "TENSORWISE", scale_inv=s)).all()
    x = torch.ones(2, 64)
    x[1, 5] = float("-inf")
    q, s = quantize_fp8(x, E5M2, "ROWWISE", axis=-1)
    assert torch.isinf(s[1]).all() and torch.isfinite(s[0]).all()
    q, s = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    assert s.view(torch.uint8)[1, 0] == 255 and s.view(torch.uint8)[0, 0] != 255
    d = dequantize_fp4(q, torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=s)
    assert torch.isnan(d[1, :32]).all() and (d[0, :64] == 1).all()


def test_mx_scale_clamps_and_fp4_rounds_ties_to_even():
    # amax tiny -> X clamps at -127; values on E2M1 midpoints go to the even code.
    x = torch.tensor([[6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] + [0.0] * 24])
    q, s = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    assert s.view(torch.uint8)[0, 0] == 127  # floor(log2 6) - 2 = 0
    d = dequantize_fp4(q, torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=s)[0, :8]
    assert d.tolist() == [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    codes = q.view(torch.uint8)[0, :4].tolist()  # low nibble = even element
    assert codes == [0x7 | (0x0 << 4), 0x2 | (0x2 << 4), 0x4 | (0x4 << 4), 0x6 | (0x6 << 4)]
    tiny = torch.full((1, 32), 2.0**-140)
    _, s = quantize_fp8(tiny, E4M3, "MX_BLOCKWISE", axis=-1)
    assert s.view(torch.uint8)[0, 0] == 0


def test_fp4_stochastic_rounding_is_unbiased():
    torch.manual_seed(0)
    x = torch.full((512, 32), 1.25)
    x[:, 0] = 6.0  # fixes X = 0: 1.25 sits halfway between 1.0 and 1.5
    q, s = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1, scaling_recipe=ScalingRecipe(use_sr=True))
    d = dequantize_fp4(q, torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=s)[:, 1:32]
    assert set(d.unique().tolist()) == {1.0, 1.5}
    assert abs(d.mean().item() - 1.25) < 0.01


# -- validation -----------------------------------------------------------------------------------------

X = torch.randn(6, 64)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: quantize_fp8([1.0], E4M3, "TENSORWISE"), TypeError, "^x: expected a torch.Tensor"),
    (lambda: quantize_fp8(X.long(), E4M3, "TENSORWISE"), TypeError, r"^x: expected dtype in \(float16"),
    (lambda: quantize_fp8(X, torch.bfloat16, "TENSORWISE"), TypeError, "^out_dtype: expected one of"),
    (lambda: quantize_fp8(X, E4M3, "COLWISE"), ValueError, "^granularity: expected one of"),
    (lambda: quantize_fp8(X, E4M3, "ROWWISE"), ValueError, "^axis: required"),
    (lambda: quantize_fp8(X, E4M3, "ROWWISE", axis=2), ValueError, "^axis: 2 is out of range for a 2-D tensor"),
    (lambda: quantize_fp8(X, E4M3, "ROWWISE", axis=1.0), TypeError, "^axis: expected an int"),
    (lambda: quantize_fp8(torch.tensor(1.0), E4M3, "ROWWISE", axis=0), ValueError, "^x: ROWWISE needs a tensor of rank"),
    (lambda: quantize_fp8(X, E4M3, "BLOCKWISE", axis=-1), ValueError, r"^block_size: BLOCKWISE needs a positive int block size \(e.g. 128\), got None"),
    (lambda: quantize_fp8(X, E4M3, "BLOCKWISE", axis=-1, block_size=0), ValueError, r"^block_size: BLOCKWISE needs a positive int block size \(e.g. 128\), got 0"),
    (lambda: quantize_fp8(X, E4M3, "MX_BLOCKWISE", axis=-1, block_size=16), ValueError, "^block_size: MX_BLOCKWISE uses blocks of 32, got 16"),
    (lambda: quantize_fp8(X, torch.float8_e4m3fnuz, "MX_BLOCKWISE", axis=-1), TypeError, "^out_dtype: MX_BLOCKWISE needs an OCP"),
    (lambda: quantize_fp8(X[0], E4M3, "MX_BLOCKWISE", axis=-1), ValueError, "^x: expected a 2-D or 3-D tensor"),
    (lambda: quantize_fp8(torch.randn(2, 3, 64), E4M3, "MX_BLOCKWISE", axis=0), ValueError, "^axis: expected one of"),
    (lambda: quantize_fp8(X, E4M3, "ROWWISE", axis=-1, scaling_recipe=ScalingRecipe(use_2d_block=True)), ValueError,
     "^scaling_recipe.use_2d_block: 2-D blocks need BLOCKWISE or MX_BLOCKWISE"),
    (lambda: quantize_fp8(X, E4M3, "MX_BLOCKWISE", axis=-1, scaling_recipe=ScalingRecipe(use_sr=True)), ValueError,
     "^scaling_recipe.use_sr: stochastic rounding is an FP4 feature"),
    (lambda: quantize_fp8(X, E4M3, "BLOCKWISE", axis=-1, block_size=32,
                          scaling_recipe=ScalingRecipe(shuffle_scale=True)), ValueError, "pre-shuffled layouts are MX only"),
    (lambda: quantize_fp8(X, E4M3, "ROWWISE", axis=-1, scaling_recipe=(True,)), TypeError, "^scaling_recipe: expected a"),
    (lambda: quantize_fp8_with_trans(X, E4M3, "TENSORWISE"), ValueError, "^granularity: quantize_fp8_with_trans supports"),
    (lambda: quantize_fp8_with_trans(X, E4M3, "ROWWISE", block_size=32), ValueError,
     "^block_size: ROWWISE has one scale per row / column"),
    (lambda: quantize_fp8_with_trans(torch.randn(5), E4M3, "ROWWISE"), ValueError, "^x: expected a 2-D or 3-D"),
    (lambda: quantize_fp8_with_trans(X, E4M3, "ROWWISE", scaling_recipe=ScalingRecipe(use_2d_block=True)),
     ValueError, "^scaling_recipe.use_2d_block: ROWWISE has no 2-D blocks"),
    (lambda: quantize_fp8_with_trans(torch.randn(2, 3, 4), E4M3, "BLOCKWISE", block_size=2), ValueError,
     "^x: expected a 2-D tensor"),
    (lambda: quantize_fp8_with_trans(X, E4M3, "BLOCKWISE", block_size=2,
                                     scaling_recipe_for_trans=ScalingRecipe(use_2d_block=True)), ValueError,
     "^scaling_recipe_for_trans.use_2d_block"),
    (lambda: dequantize_fp8(X, torch.float32, "TENSORWISE", scale_inv=torch.ones(())), TypeError, "^x: expected dtype in"),
    (lambda: dequantize_fp8(X.to(E4M3), torch.int32, "TENSORWISE", scale_inv=torch.ones(())), TypeError,
     "^out_dtype: expected one of"),
    (lambda: dequantize_fp8(X.to(E4M3), torch.float32, "ROWWISE", axis=-1, scale_inv=torch.ones(6)), ValueError,
     r"^scale_inv: expected shape \(6, 1\)"),
    (lambda: dequantize_fp8(X.to(E4M3), torch.float32, "ROWWISE", axis=-1, scale_inv=torch.ones(6, 1).half()),
     TypeError, "^scale_inv: expected dtype in"),
    (lambda: dequantize_fp8(X.to(E4M3), torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=torch.ones(6, 2)),
     TypeError, "^scale_inv: expected dtype in"),
    (lambda: dequantize_fp8(torch.zeros(6, 40, dtype=E4M3), torch.float32, "MX_BLOCKWISE", axis=-1,
                            scale_inv=torch.zeros(6, 1, dtype=torch.uint8)), ValueError, "^x: MX data holds a multiple of 32 values along its last dim"),
    (lambda: grouped_quantize_fp8(X, E4M3, "ROWWISE", torch.tensor([6]), axis=1), ValueError,
     "^granularity: grouped FP8 quantization supports BLOCKWISE and MX_BLOCKWISE"),
    (lambda: grouped_quantize_fp8(X, E4M3, "MX_BLOCKWISE", torch.tensor([6.0]), axis=1), TypeError,
     "^group_lens: expected dtype in"),
    (lambda: grouped_quantize_fp8(X, E4M3, "MX_BLOCKWISE", torch.tensor([6]), torch.tensor([0]), axis=1),
     ValueError, r"^group_offs: expected shape \(2,\) \(G \+ 1 offsets\), got \(1,\)"),
    (lambda: grouped_quantize_fp8(X, E4M3, "MX_BLOCKWISE", torch.tensor([], dtype=torch.int64), axis=1), ValueError,
     "^group_lens: expected at least one group"),
    (lambda: grouped_quantize_fp8(X, E4M3, "MX_BLOCKWISE", torch.tensor([6]), axis=None), ValueError, "^axis: required"),
    (lambda: grouped_quantize_fp8(X, E4M3, "BLOCKWISE", torch.tensor([6]), axis=0, block_size=4,
                                  scaling_recipe=ScalingRecipe(use_2d_block=True)), ValueError,
     "^scaling_recipe.use_2d_block: grouped quantization"),
    (lambda: grouped_quantize_fp8(torch.randn(2, 3, 4), E4M3, "MX_BLOCKWISE", torch.tensor([2]), axis=1), ValueError,
     "^x: expected a 2-D tensor"),
    (lambda: grouped_dequantize_fp8(torch.zeros(32, 128, dtype=E4M3), torch.float32, "MX_BLOCKWISE",
                                    torch.tensor([0, 3]), torch.tensor([0, 32, 64]), axis=1, total_M=3,
                                    scale_inv=torch.zeros(32, 4, dtype=E8M0)), ValueError,
     "^group_offs_padded: expected the shape of group_offs"),
    (lambda: grouped_dequantize_fp8(torch.zeros(32, 128, dtype=E4M3), torch.float32, "MX_BLOCKWISE",
                                    torch.tensor([0, 3]), torch.tensor([0, 32]), axis=1, total_M=-1,
                                    scale_inv=torch.zeros(32, 4, dtype=E8M0)), ValueError, "^total_M: expected an int >= 0, got -1"),
    (lambda: grouped_dequantize_fp8(torch.zeros(6, 64, dtype=E4M3), torch.float32, "BLOCKWISE",
                                    torch.tensor([0, 6]), torch.tensor([0, 6]), axis=1, total_M=5, block_size=32,
                                    scale_inv=torch.zeros(2, 6)), ValueError, "^total_M: BLOCKWISE row-wise data is tight"),
    (lambda: quantize_fp4(X, E4M3, "MX_BLOCKWISE", axis=-1), TypeError, "^out_dtype: expected torch.float4_e2m1fn_x2"),
    (lambda: quantize_fp4(X, FP4, "ROWWISE", axis=-1), ValueError, "^granularity: FP4 quantization is MX_BLOCKWISE only"),
    (lambda: quantize_fp4(X, FP4, "MX_BLOCKWISE"), ValueError, "^axis: required"),
    (lambda: quantize_fp4(X, FP4, "MX_BLOCKWISE", axis=-1, block_size=16), ValueError, "^block_size: MX_BLOCKWISE uses blocks of 32, got 16"),
    (lambda: quantize_fp4(X, "E4M3", "MX_BLOCKWISE", axis=-1), ValueError, "^out_dtype: expected torch.float4_e2m1fn_x2"),
    (lambda: quantize_fp4_with_trans(X, FP4, "MX_BLOCKWISE", axis=1), ValueError, "^axis: quantize_fp4_with_trans makes"),
    (lambda: dequantize_fp4(X.to(E4M3), torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=torch.zeros(6, 2, dtype=E8M0)),
     TypeError, "^x: expected dtype in"),
    (lambda: dequantize_fp4(torch.zeros(6, 64, dtype=torch.uint8).view(FP4), torch.float32, "MX_BLOCKWISE", axis=-1,
                            scale_inv=torch.zeros(6, 2, dtype=E8M0), scaling_recipe=ScalingRecipe(shuffle_scale=True)),
     ValueError, "^scaling_recipe.shuffle_scale/shuffle_out: pre-shuffled MX data cannot be dequantized"),
    (lambda: grouped_quantize_fp4(X, FP4, "MX_BLOCKWISE", torch.tensor([6]), axis=5), ValueError, "^axis: 5 is out of range"),
    (lambda: grouped_dequantize_fp4(torch.zeros(64, 256, dtype=torch.uint8).view(FP4), torch.float32, "MX_BLOCKWISE",
                                    axis=0, scale_inv=torch.zeros(64, 16, dtype=E8M0)), ValueError,
     "^group_offs: required to dequantize grouped col-wise FP4"),
])
def test_validation_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_torch_declines_shuffled_layouts_and_rht_with_its_reason():
    with pytest.raises(BackendError, match="TORCH does not produce AITER pre-shuffled layouts"):
        quantize_fp8(X, E4M3, "MX_BLOCKWISE", axis=-1, scaling_recipe=ScalingRecipe(shuffle_scale=True))
    with use_backend("TORCH"), pytest.raises(BackendError, match="cannot run this call: TORCH does not implement "
                                                                 "the random Hadamard transform"):
        quantize_fp4(X, FP4, "MX_BLOCKWISE", axis=-1, scaling_recipe=ScalingRecipe(use_rht=True))


def test_each_primitive_is_its_own_family_with_its_precision(monkeypatch):
    from turbo_core.backend import PrecisionType
    from turbo_core.dispatch.specs.quantization import QuantizeFp8Args

    names = ["quantize_fp8", "quantize_fp8_with_trans", "dequantize_fp8", "grouped_quantize_fp8",
             "grouped_quantize_fp8_with_trans", "grouped_dequantize_fp8", "quantize_fp4", "quantize_fp4_with_trans",
             "dequantize_fp4", "grouped_quantize_fp4", "grouped_quantize_fp4_with_trans", "grouped_dequantize_fp4"]
    for name in names:
        prim = get_primitive(name)
        assert prim.family == name
        assert prim.precision == (PrecisionType.FP4 if "fp4" in name else PrecisionType.FP8)
    monkeypatch.setenv("TURBO_QUANTIZE_FP8_BACKEND", "TORCH")
    sel = select("quantize_fp8", QuantizeFp8Args(X, E4M3, G.TENSORWISE))
    assert sel.backend == "TORCH" and sel.how == "env"


# -- torch.library.opcheck and torch.compile ------------------------------------------------------------

def _opcheck_cases():
    x = torch.randn(7, 45, dtype=torch.bfloat16)
    x3 = torch.randn(2, 7, 45)
    lens, offs = torch.tensor([3, 0, 4]), torch.tensor([0, 3, 3, 7])
    q, s = quantize_fp8(x, E4M3, "BLOCKWISE", axis=0, block_size=4)
    qm, sm = quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=0)
    q4, s4 = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    gq, gs, glp, gop = grouped_quantize_fp8(x, E4M3, "MX_BLOCKWISE", lens, offs, axis=0)
    g4, g4s, g4l, g4o = grouped_quantize_fp4(x, FP4, "MX_BLOCKWISE", lens, offs, axis=0)
    ops = torch.ops.turbo
    return [
        (ops.quantize_fp8.default, (x, E4M3, "TENSORWISE", None, None, NO_RECIPE)),
        (ops.quantize_fp8.default, (x3, E5M2, "ROWWISE", -2, None, NO_RECIPE)),
        (ops.quantize_fp8.default, (x, E4M3, "BLOCKWISE", None, 4, [True, False, False, False, False])),
        (ops.quantize_fp8.default, (x3, E4M3, "MX_BLOCKWISE", 1, 32, NO_RECIPE)),
        (ops.quantize_fp8_with_trans.default, (x, E4M3, "BLOCKWISE", 16, NO_RECIPE, NO_RECIPE)),
        (ops.quantize_fp8_with_trans.default, (x3, E5M2, "MX_BLOCKWISE", 32, NO_RECIPE, NO_RECIPE)),
        (ops.quantize_fp8_with_trans.default, (x3, E4M3, "ROWWISE", None, NO_RECIPE, NO_RECIPE)),
        (ops.dequantize_fp8.default, (q, s, torch.float32, "BLOCKWISE", 0, 4, NO_RECIPE)),
        (ops.dequantize_fp8.default, (qm, sm, torch.bfloat16, "MX_BLOCKWISE", 0, 32, NO_RECIPE)),
        (ops.grouped_quantize_fp8.default, (x, E4M3, "MX_BLOCKWISE", lens, offs, 1, 32, NO_RECIPE)),
        (ops.grouped_quantize_fp8.default, (x, E4M3, "BLOCKWISE", lens, offs, 0, 4, NO_RECIPE)),
        (ops.grouped_quantize_fp8_with_trans.default, (x, E4M3, "BLOCKWISE", lens, offs, 4, NO_RECIPE, NO_RECIPE)),
        (ops.grouped_dequantize_fp8.default, (gq, gs, torch.float32, "MX_BLOCKWISE", offs, gop, 7, 0, 32)),
        (ops.quantize_fp4.default, (x, FP4, -2, 32, NO_RECIPE)),
        (ops.quantize_fp4_with_trans.default, (x3, FP4, 32, NO_RECIPE, [True, False, False, False, False])),
        (ops.dequantize_fp4.default, (q4, s4, torch.float32, -1, 32)),
        (ops.grouped_quantize_fp4.default, (x, FP4, lens, offs, 0, 32, NO_RECIPE)),
        (ops.grouped_quantize_fp4_with_trans.default, (x, FP4, lens, offs, 32, NO_RECIPE, NO_RECIPE)),
        (ops.grouped_dequantize_fp4.default, (g4, g4s, torch.float32, 0, 32, offs, g4o, 7)),
        (ops.grouped_dequantize_fp4.default, (q4, s4, torch.float32, 1, 32, None, None, None)),
    ]


LOWP = {E4M3, E5M2, FP4, E8M0, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz}


@pytest.mark.parametrize("index", range(19))
def test_opcheck_custom_ops(index):
    op, args = _opcheck_cases()[index]
    lowp_inputs = [a for a in args if isinstance(a, torch.Tensor) and a.dtype in LOWP]
    if not lowp_inputs:
        torch.library.opcheck(op, args)
        return
    # torch's test_schema compares inputs with allclose, which FP8/FP4/E8M0 tensors do not support:
    # run the other checks and test "no input is mutated" on the raw bytes instead.
    before = [a.view(torch.uint8).clone() for a in lowp_inputs]
    torch.library.opcheck(op, args, test_utils=("test_autograd_registration", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))
    op(*args)
    assert all(torch.equal(b, a.view(torch.uint8)) for b, a in zip(before, lowp_inputs, strict=True))


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _mx_roundtrip(x, lens):
    q, s = quantize_fp8(x, E4M3, G.MX_BLOCKWISE, axis=-1)
    return dequantize_fp8(q, torch.float32, G.MX_BLOCKWISE, axis=-1, scale_inv=s)


def _fp4_roundtrip(x, lens):
    q, s = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    return dequantize_fp4(q, torch.float32, "MX_BLOCKWISE", axis=-1, scale_inv=s)


def _grouped_roundtrip(x, lens):
    q, s, _, op = grouped_quantize_fp8(x, E4M3, G.MX_BLOCKWISE, lens, axis=1)
    offs = torch.cat([lens.new_zeros(1), torch.cumsum(lens, 0)])
    return grouped_dequantize_fp8(q, torch.float32, G.MX_BLOCKWISE, offs, op, axis=1, scale_inv=s,
                                  total_M=x.shape[0])


def _grouped_fp4_roundtrip(x, lens):
    q, s, _, op = grouped_quantize_fp4(x, FP4, G.MX_BLOCKWISE, lens, axis=0)
    offs = torch.cat([lens.new_zeros(1), torch.cumsum(lens, 0)])
    return grouped_dequantize_fp4(q, torch.float32, G.MX_BLOCKWISE, axis=0, scale_inv=s, group_offs=offs,
                                  group_offs_padded=op, total_M=x.shape[0])


# One function per custom op (the quantize ops, and round trips through the dequantize ops).
COMPILE_FNS = {
    "quantize_fp8-tensorwise": lambda x, lens: quantize_fp8(x, E4M3, G.TENSORWISE),
    "quantize_fp8-rowwise": lambda x, lens: quantize_fp8(x, E5M2, "ROWWISE", axis=0),
    "quantize_fp8-blockwise-2d": lambda x, lens: quantize_fp8(x, E4M3, G.BLOCKWISE, block_size=16,
                                                              scaling_recipe=ScalingRecipe(use_2d_block=True)),
    "quantize_fp8-mx-roundtrip": _mx_roundtrip,
    "quantize_fp8_with_trans": lambda x, lens: quantize_fp8_with_trans(x, E4M3, G.BLOCKWISE, block_size=32),
    "grouped_quantize_fp8": lambda x, lens: grouped_quantize_fp8(x, E4M3, G.MX_BLOCKWISE, lens, axis=0),
    "grouped_quantize_fp8_with_trans": lambda x, lens: grouped_quantize_fp8_with_trans(x, E4M3, "BLOCKWISE", lens,
                                                                                       block_size=8),
    "grouped_dequantize_fp8": _grouped_roundtrip,
    "quantize_fp4": lambda x, lens: quantize_fp4(x, FP4, G.MX_BLOCKWISE, axis=-2),
    "quantize_fp4_with_trans": lambda x, lens: quantize_fp4_with_trans(x, FP4, G.MX_BLOCKWISE),
    "dequantize_fp4": _fp4_roundtrip,
    "grouped_quantize_fp4_with_trans": lambda x, lens: grouped_quantize_fp4_with_trans(x, FP4, "MX_BLOCKWISE", lens),
    "grouped_dequantize_fp4": _grouped_fp4_roundtrip,
}


@pytest.mark.parametrize("name", sorted(COMPILE_FNS))
def test_compile_fullgraph_matches_eager(name):
    fn = COMPILE_FNS[name]
    torch.manual_seed(4)
    x = torch.randn(37, 70, dtype=torch.bfloat16)
    lens = torch.tensor([10, 0, 27])
    eager = fn(x, lens)
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, lens)
    eager = eager if isinstance(eager, tuple) else (eager,)
    compiled = compiled if isinstance(compiled, tuple) else (compiled,)
    assert len(eager) == len(compiled)
    for e, c in zip(eager, compiled, strict=True):
        assert e.dtype == c.dtype and e.shape == c.shape and torch.equal(_bits(e), _bits(c))


# -- the oracle catches wrong kernels --------------------------------------------------------------------

@pytest.mark.parametrize("patch, case_id", [
    ("_fp8_scale", "quantize_fp8-rowwise-last-E4M3-7x333"),
    ("_mx_exponent", "quantize_fp8-mx-row-E5M2-7x333"),
    ("_pack_fp4", "quantize_fp4-row-7x333"),
    ("_cast", "quantize_fp8-block128-row-E4M3-40x65"),
])
def test_conformance_oracle_rejects_a_wrong_kernel(monkeypatch, patch, case_id):
    import turbo_core.reference.quantization as ref

    original = getattr(ref, patch)
    if patch == "_fp8_scale":
        monkeypatch.setattr(ref, patch, lambda amax, dtype: original(amax, dtype) * 1.001)
    elif patch == "_mx_exponent":
        def shifted(amax, emax):
            x, byte = original(amax, emax)
            return x - 1, byte - 1  # one binade too fine (the classic ceil/floor mix-up)
        monkeypatch.setattr(ref, patch, shifted)
    elif patch == "_pack_fp4":  # nibbles swapped: odd element in the low nibble
        monkeypatch.setattr(ref, patch, lambda codes: original(torch.stack((codes[..., 1::2], codes[..., 0::2]), -1)
                                                               .reshape(codes.shape)))
    else:  # truncation instead of round-to-nearest
        monkeypatch.setattr(ref, patch, lambda x32, scale, dtype: original(torch.trunc((x32 * scale) * 8) / 8 / scale,
                                                                           scale, dtype))
    case = next(c for c in CASES if c.id == case_id)
    with use_backend("TORCH"), pytest.raises(AssertionError):
        case.run()
