"""QuantizedTensor / QuantizedTensorPair / create_quantized_weight: factory for every granularity,
properties, dequantize, view/reshape/select/detach/transpose, flatten/unflatten, grouped tensors
(including grouped BLOCKWISE, which Primus-Turbo routed to an MX-only op), validation."""

import pytest
import torch

from turbo_core import (
    Float4QuantConfig,
    Float8QuantConfig,
    QuantizedTensor,
    QuantizedTensorPair,
    ScalingGranularity,
    ScalingRecipe,
)
from turbo_core.ops import quantize_fp4, quantize_fp8
from turbo_core.quantized_tensor import check_quantized_tensor, create_quantized_weight
from turbo_core.testing.numerics import assert_snr

E4M3, E5M2, FP4 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float4_e2m1fn_x2
G = ScalingGranularity
TWO_D = ScalingRecipe(use_2d_block=True)

# (id, dest dtype, granularity, kwargs for quantize): every granularity, both axes where they exist.
CONFIGS = [
    ("tensorwise", E4M3, G.TENSORWISE, {}),
    ("rowwise-k", E4M3, G.ROWWISE, dict(axis=-1)),
    ("rowwise-m", E5M2, G.ROWWISE, dict(axis=-2)),
    ("block-k", E4M3, G.BLOCKWISE, dict(axis=-1, block_size=16)),
    ("block-m", E4M3, G.BLOCKWISE, dict(axis=-2, block_size=16)),
    ("block-2d", E4M3, G.BLOCKWISE, dict(block_size=16, scaling_recipe=TWO_D)),
    ("mx-k", E4M3, G.MX_BLOCKWISE, dict(axis=-1)),
    ("mx-m", E5M2, G.MX_BLOCKWISE, dict(axis=-2)),
    ("mx-2d", E4M3, G.MX_BLOCKWISE, dict(axis=-1, scaling_recipe=TWO_D)),
    ("fp4-k", FP4, G.MX_BLOCKWISE, dict(axis=-1)),
    ("fp4-m", FP4, G.MX_BLOCKWISE, dict(axis=-2)),
]
IDS = [c[0] for c in CONFIGS]


def _fmt(dtype):
    return {E4M3: "E4M3", E5M2: "E5M2", FP4: "FP4"}[dtype]


def _raw(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


@pytest.mark.parametrize("cid, dest, gran, kw", CONFIGS, ids=IDS)
@pytest.mark.parametrize("shape", [(7, 333), (3, 5, 67)])
def test_quantize_matches_the_op_and_dequantizes(cid, dest, gran, kw, shape):
    torch.manual_seed(0)
    hp = torch.randn(shape, dtype=torch.bfloat16)
    qt = QuantizedTensor.quantize(hp, dest, gran, **kw)
    assert isinstance(qt, QuantizedTensor) and qt.shape == hp.shape and qt.dtype == torch.bfloat16
    assert qt.real_dtype == dest and qt.granularity is gran and qt.device == hp.device
    assert qt.scaling_recipe == kw.get("scaling_recipe", ScalingRecipe())
    want_axis = None if gran == G.TENSORWISE or cid == "block-2d" else kw["axis"] % len(shape)
    assert qt.quantized_axis == want_axis
    assert qt.block_size == (32 if gran == G.MX_BLOCKWISE else kw.get("block_size"))
    fn = quantize_fp4 if dest == FP4 else quantize_fp8
    q, s = fn(hp, dest, gran, **kw)
    assert torch.equal(_raw(qt.qdata), _raw(q)) and torch.equal(_raw(qt.scale_inv), _raw(s))
    d = qt.dequantize()
    assert d.shape == hp.shape and d.dtype == torch.bfloat16 and not isinstance(d, QuantizedTensor)
    assert_snr(hp.double(), d.double(), _fmt(dest), what=cid)
    assert qt.dequantize(torch.float32).dtype == torch.float32
    assert "QuantizedTensor(shape=" in repr(qt) and gran.value in repr(qt)


@pytest.mark.parametrize("cid, dest, gran, kw", CONFIGS, ids=IDS)
def test_transpose(cid, dest, gran, kw):
    torch.manual_seed(1)
    hp = torch.randn(2, 40, 70)
    qt = QuantizedTensor.quantize(hp, dest, gran, **kw)
    t = qt.transpose(-1, -2)
    assert isinstance(t, QuantizedTensor) and t.shape == (2, 70, 40) and t.real_dtype == dest
    d = qt.dequantize()
    if gran == G.TENSORWISE or cid == "block-2d":
        # a pure layout change: bit-exact
        assert torch.equal(t.dequantize(), d.transpose(-1, -2))
        assert t.quantized_axis is None
    else:
        # requantized along the same positional axis of the transposed tensor
        assert t.quantized_axis == qt.quantized_axis
        fn = quantize_fp4 if dest == FP4 else quantize_fp8
        q, s = fn(qt.dequantize(torch.float32).transpose(-1, -2), dest, gran, **kw)
        assert torch.equal(_raw(t.qdata), _raw(q)) and torch.equal(_raw(t.scale_inv), _raw(s))
        assert_snr(hp.double().transpose(-1, -2), t.dequantize().double(), _fmt(dest), what="transpose")
    t2 = QuantizedTensor.quantize(hp[0], dest, gran, **kw).t()
    assert t2.shape == (70, 40)


def test_view_reshape_select_detach_clone_to():
    torch.manual_seed(2)
    hp = torch.randn(3, 5, 70, requires_grad=True)
    for gran, kw in [(G.TENSORWISE, {}), (G.ROWWISE, dict(axis=-1)), (G.BLOCKWISE, dict(axis=-1, block_size=32)),
                     (G.MX_BLOCKWISE, dict(axis=-1))]:
        qt = QuantizedTensor.quantize(hp, E4M3, gran, **kw)
        assert qt.requires_grad  # follows the source (a leaf); dequantize is not differentiated
        d = qt.dequantize()
        assert not d.requires_grad
        for r in (qt.reshape(15, 70), qt.view(-1, 70), qt.reshape(3, 5, 70)):
            assert isinstance(r, QuantizedTensor)
            assert r.quantized_axis == (None if gran == G.TENSORWISE else r.dim() - 1)
            assert torch.equal(r.dequantize(), d.reshape(r.shape))
        s = qt[1]
        assert s.shape == (5, 70) and torch.equal(s.dequantize(), d[1])
        det = qt.detach()
        assert isinstance(det, QuantizedTensor) and not det.requires_grad and det.qdata is qt.qdata
        c = qt.clone()
        assert c.qdata is not qt.qdata and torch.equal(c.dequantize(), d)
        moved = qt.to("cpu")
        assert isinstance(moved, QuantizedTensor)
    tw = QuantizedTensor.quantize(hp, E4M3, G.TENSORWISE)
    assert torch.equal(tw.reshape(70, 15).dequantize(), tw.dequantize().reshape(70, 15))


def test_unsupported_ops_and_reshapes_raise_with_a_hint():
    qt = QuantizedTensor.quantize(torch.randn(4, 64), E4M3, G.ROWWISE, axis=-1)
    with pytest.raises(NotImplementedError, match=r"call .dequantize\(\) first"):
        qt + 1
    with pytest.raises(NotImplementedError, match="only reshapes that keep the last dim"):
        qt.reshape(64, 4)
    col = QuantizedTensor.quantize(torch.randn(4, 64), E4M3, G.ROWWISE, axis=0)
    with pytest.raises(NotImplementedError, match="quantized_axis=0"):
        col.reshape(2, 2, 64)
    with pytest.raises(NotImplementedError, match="select is supported on the leading dim of a 3-D"):
        qt[0]


def test_flatten_unflatten_round_trip():
    hp = torch.randn(40, 70)
    for qt in (QuantizedTensor.quantize(hp, E4M3, G.MX_BLOCKWISE, axis=-1),
               QuantizedTensor.quantize(hp, E4M3, G.BLOCKWISE, axis=0, block_size=8,
                                        group_lens=torch.tensor([10, 0, 30]))):
        names, ctx = qt.__tensor_flatten__()
        inner = {n: getattr(qt, n) for n in names}
        back = QuantizedTensor.__tensor_unflatten__(inner, ctx, qt.shape, qt.stride())
        assert isinstance(back, QuantizedTensor) and back.shape == qt.shape and back.dtype == qt.dtype
        assert back.granularity == qt.granularity and back.quantized_axis == qt.quantized_axis
        assert torch.equal(back.dequantize(), qt.dequantize())


def test_compile_fullgraph_with_a_quantized_tensor_input():
    qt = QuantizedTensor.quantize(torch.randn(8, 64), E4M3, G.ROWWISE, axis=-1)
    fn = torch.compile(lambda t: t.dequantize(torch.float32) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(qt), qt.dequantize(torch.float32) * 2, rtol=0, atol=0)


@pytest.mark.parametrize("gran, dest, kw", [
    (G.MX_BLOCKWISE, E4M3, dict(axis=-1)), (G.MX_BLOCKWISE, E4M3, dict(axis=0)),
    (G.BLOCKWISE, E4M3, dict(axis=-1, block_size=16)), (G.BLOCKWISE, E5M2, dict(axis=0, block_size=16)),
    (G.MX_BLOCKWISE, FP4, dict(axis=-1)), (G.MX_BLOCKWISE, FP4, dict(axis=0)),
    (G.TENSORWISE, E4M3, {}), (G.ROWWISE, E4M3, dict(axis=-1)),
])
def test_grouped_tensors(gran, dest, kw):
    torch.manual_seed(3)
    lens = torch.tensor([11, 0, 29, 1])
    hp = torch.randn(41, 70, dtype=torch.bfloat16)
    qt = QuantizedTensor.quantize(hp, dest, gran, group_lens=lens, **kw)
    assert qt.is_grouped and qt.shape == hp.shape
    assert torch.equal(qt.orig_group_lens, lens) and qt.orig_group_offs.tolist() == [0, 11, 11, 40, 41]
    rowwise = kw.get("axis", -1) % 2 == 1
    if gran == G.MX_BLOCKWISE and dest != FP4:
        align = 32 if rowwise else 128
    elif gran == G.MX_BLOCKWISE:
        align = 1 if rowwise else 512
    elif gran == G.BLOCKWISE:
        align = 1 if rowwise else 16
    else:
        align = 1
    assert qt.group_lens.tolist() == [-(-v // align) * align for v in lens.tolist()]
    d = qt.dequantize()
    assert d.shape == hp.shape and d.dtype == torch.bfloat16
    assert_snr(hp.double(), d.double(), _fmt(dest), what="grouped dequantize")
    with pytest.raises(NotImplementedError, match="grouped"):
        qt.t()


def test_quantize_validation():
    hp = torch.randn(4, 64)
    with pytest.raises(ValueError, match="^axis: required for ROWWISE"):
        QuantizedTensor.quantize(hp, E4M3, G.ROWWISE)
    with pytest.raises(ValueError, match="^granularity: FP4 is MX_BLOCKWISE only"):
        QuantizedTensor.quantize(hp, FP4, G.ROWWISE, axis=-1)
    with pytest.raises(ValueError, match="^hp_tensor: expected a 2-D or 3-D tensor"):
        QuantizedTensor.quantize(hp[0], E4M3, G.TENSORWISE)
    with pytest.raises(ValueError, match="^hp_tensor: a grouped tensor is 2-D packed-M"):
        QuantizedTensor.quantize(torch.randn(2, 4, 64), E4M3, G.MX_BLOCKWISE, axis=-1, group_lens=torch.tensor([2]))
    with pytest.raises(TypeError, match="^dest_dtype: expected an FP8 dtype"):
        QuantizedTensor.quantize(hp, torch.bfloat16, G.TENSORWISE)
    with pytest.raises(ValueError, match="^dest_dtype: HYBRID is not a dtype"):
        QuantizedTensor.quantize(hp, "HYBRID", G.TENSORWISE)
    with pytest.raises(TypeError, match="^group_lens: expected dtype in"):
        QuantizedTensor.quantize(hp, E4M3, G.TENSORWISE, group_lens=torch.tensor([4.0]))
    assert QuantizedTensor.quantize(hp, "E5M2", G.TENSORWISE).real_dtype == E5M2


def test_quantized_tensor_pair():
    w = torch.randn(33, 70)
    qw = QuantizedTensor.quantize(w, E4M3, G.ROWWISE, axis=-1)
    pair = QuantizedTensorPair(qw)
    data, data_t = pair
    assert data is qw and data_t is None and pair.data is qw
    pair = QuantizedTensorPair(qw, qw.t())
    assert pair.data_t.shape == (70, 33)
    with pytest.raises(TypeError, match="^data: expected a QuantizedTensor"):
        QuantizedTensorPair(w)
    with pytest.raises(TypeError, match="^data_t: expected a QuantizedTensor or None"):
        QuantizedTensorPair(qw, w.t())
    with pytest.raises(ValueError, match=r"^data_t: expected the transposed shape \(70, 33\)"):
        QuantizedTensorPair(qw, qw)
    with pytest.raises(ValueError, match="^data_t: expected the granularity and real_dtype"):
        QuantizedTensorPair(qw, QuantizedTensor.quantize(w.t(), E5M2, G.ROWWISE, axis=-1))


@pytest.mark.parametrize("config, recipe, axis", [
    (Float8QuantConfig(), ScalingRecipe(), None),
    (Float8QuantConfig(format="HYBRID", granularity="ROWWISE"), ScalingRecipe(), 1),
    (Float8QuantConfig(granularity="BLOCKWISE", block_size=32), TWO_D, None),
    (Float8QuantConfig(granularity="MX_BLOCKWISE"), TWO_D, 1),
    (Float4QuantConfig(), TWO_D, 1),
])
@pytest.mark.parametrize("shape", [(33, 70), (2, 33, 70)])
def test_create_quantized_weight(config, recipe, axis, shape):
    torch.manual_seed(5)
    w = torch.randn(shape, dtype=torch.bfloat16)
    qw, qw_t = create_quantized_weight(w, None, config)
    assert qw_t is None and qw.shape == w.shape and qw.scaling_recipe == recipe
    assert qw.real_dtype == (FP4 if isinstance(config, Float4QuantConfig) else E4M3)
    assert qw.quantized_axis == (None if axis is None else len(shape) - 1)
    check_quantized_tensor(qw, config, axis=-1 if axis is not None else None, scaling_recipe=recipe)
    qw, qw_t = create_quantized_weight(w, qw.real_dtype, config, need_weight_transpose_cache=True)
    assert qw_t.shape == (*shape[:-2], 70, 33) and qw_t.real_dtype == qw.real_dtype
    QuantizedTensorPair(qw, qw_t)
    assert_snr(w.double().transpose(-1, -2), qw_t.dequantize().double(), _fmt(qw.real_dtype), what="qw_t")


def test_create_quantized_weight_and_check_validation():
    w = torch.randn(8, 64)
    with pytest.raises(TypeError, match="^quant_config: expected Float8QuantConfig or Float4QuantConfig"):
        create_quantized_weight(w, E4M3, "TENSORWISE")
    with pytest.raises(TypeError, match="^need_weight_transpose_cache: expected a bool"):
        create_quantized_weight(w, E4M3, Float8QuantConfig(), need_weight_transpose_cache=1)
    with pytest.raises(ValueError, match="^weight: expected a 2-D or 3-D tensor"):
        create_quantized_weight(w[0], E4M3, Float8QuantConfig())
    qw, _ = create_quantized_weight(w, E4M3, Float8QuantConfig(granularity="ROWWISE"))
    with pytest.raises(ValueError, match="^qt: granularity ROWWISE does not match the config's TENSORWISE"):
        check_quantized_tensor(qw, Float8QuantConfig())
    with pytest.raises(ValueError, match="^qt: quantized_axis 1 does not match axis=0"):
        check_quantized_tensor(qw, Float8QuantConfig(granularity="ROWWISE"), axis=0)
    with pytest.raises(ValueError, match="^qt: scaling_recipe"):
        check_quantized_tensor(qw, Float8QuantConfig(granularity="ROWWISE"), scaling_recipe=TWO_D)
    with pytest.raises(TypeError, match="^qt: expected a QuantizedTensor"):
        check_quantized_tensor(w, Float8QuantConfig())
