"""``Float8QuantConfig`` / ``Float4QuantConfig`` fields assigned after construction (as Primus-Turbo
code does: ``config.format = Format.E5M2``): values checked at once, the fields that follow the
granularity, inconsistent states refused by the ops that take the config, and no cache (the
weight-quantization cache, the selection cache, torch.compile's graphs) serving a result computed
with the old fields: every result equals the one of a fresh config with the new fields."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from turbo_core import Float4QuantConfig, Float8QuantConfig, Format, ScaleDtype, ScalingGranularity
from turbo_core.modules import Float8Linear, GroupedLinear
from turbo_core.ops import flash_attn_fp8_func, gemm_fp4, gemm_fp8, grouped_gemm_fp8, rmsnorm_fp8
from turbo_core.quantized_tensor import create_quantized_weight

G = ScalingGranularity


def test_assignment_normalizes_and_checks_each_field():
    c = Float8QuantConfig()
    c.format = Format.E5M2
    assert c.format is Format.E5M2 and c.validate() is c
    c.format = "hybrid"
    assert c.format is Format.HYBRID
    c.granularity = "rowwise"
    assert c.granularity is G.ROWWISE and c == Float8QuantConfig(format="HYBRID", granularity="ROWWISE")
    for field, bad, match in (("format", "E3M4", "^format: expected one of"),
                              ("format", Format.E2M1_X2, "^format: E2M1_X2 is FP4"),
                              ("granularity", "COLUMNWISE", "^granularity: expected one of"),
                              ("strategy", "DELAYED", "^strategy: only DYNAMIC"),
                              ("scale_dtype", "FP16", "^scale_dtype: expected FP32 or E8M0"),
                              ("block_size", 0, "^block_size: expected a positive int"),
                              ("block_size", True, "^block_size: expected a positive int")):
        with pytest.raises(ValueError, match=match):
            setattr(c, field, bad)
    assert c == Float8QuantConfig(format="HYBRID", granularity="ROWWISE")  # a refused value changes nothing
    c.note = "free attribute"  # other attributes behave as on any object
    assert c.note == "free attribute"


def test_scale_dtype_and_block_size_left_unset_follow_the_granularity():
    c = Float8QuantConfig()
    c.granularity = G.MX_BLOCKWISE
    assert (c.scale_dtype, c.block_size) == (ScaleDtype.E8M0, 32) and c.validate() is c
    c.granularity = G.TENSORWISE
    assert (c.scale_dtype, c.block_size) == (ScaleDtype.FP32, None) and c.validate() is c
    c.granularity = G.BLOCKWISE  # needs a block size: refused when used, until one is given
    with pytest.raises(ValueError, match=r"^config\.block_size: BLOCKWISE needs a block size"):
        c.validate()
    c.block_size = 128
    assert c.validate() == Float8QuantConfig(granularity="BLOCKWISE", block_size=128)
    c.granularity = G.MX_BLOCKWISE  # 128 was given: it no longer follows the granularity
    with pytest.raises(ValueError, match=r"^config\.block_size: MX_BLOCKWISE needs 32, got 128"):
        c.validate()
    c.block_size = None  # back to automatic
    assert c.block_size == 32 and c.validate() == Float8QuantConfig(granularity="MX_BLOCKWISE")
    explicit = Float8QuantConfig(granularity="MX_BLOCKWISE", scale_dtype="E8M0", block_size=32)
    explicit.granularity = G.ROWWISE  # explicit E8M0 and 32 stay, and disagree with ROWWISE
    with pytest.raises(ValueError, match=r"^fp8\.scale_dtype: ROWWISE uses FP32 scales"):
        explicit.validate("fp8")


def test_an_inconsistent_config_is_refused_by_every_op_before_any_kernel():
    bad = Float8QuantConfig()
    bad.granularity = G.BLOCKWISE
    a, b = torch.randn(8, 32), torch.randn(16, 32)
    with pytest.raises(ValueError, match=r"^config\.block_size: BLOCKWISE"):
        gemm_fp8(a, b, trans_b=True, config=bad)
    with pytest.raises(ValueError, match=r"^config\.block_size: BLOCKWISE"):
        grouped_gemm_fp8(a, b.reshape(1, 16, 32), torch.tensor([8]), config=bad)
    with pytest.raises(ValueError, match=r"^config\.block_size: BLOCKWISE"):
        rmsnorm_fp8(a, torch.ones(32), config=bad)
    with pytest.raises(ValueError, match=r"^quant_config\.block_size: BLOCKWISE"):
        create_quantized_weight(b, None, bad)
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match=r"^fp8_config\.block_size: BLOCKWISE"):
        flash_attn_fp8_func(q, q, q, fp8_config=bad)
    layer = Float8Linear(32, 16)
    layer.config.granularity = G.BLOCKWISE
    with pytest.raises(ValueError, match=r"^config\.block_size: BLOCKWISE"):
        layer(a)


def test_pickle_copy_equality_and_no_hash():
    c = Float8QuantConfig(format="E5M2")
    c.granularity = G.MX_BLOCKWISE
    for other in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c), copy.copy(c)):
        assert other == c and other is not c
        other.granularity = G.TENSORWISE  # the copy keeps the automatic fields automatic
        assert other.validate().scale_dtype is ScaleDtype.FP32 and c.granularity is G.MX_BLOCKWISE
    state = {k: v for k, v in vars(Float8QuantConfig(granularity="ROWWISE")).items() if not k.startswith("_")}
    old = Float8QuantConfig.__new__(Float8QuantConfig)  # a pickle of a config without the bookkeeping
    old.__setstate__(state)
    assert old == Float8QuantConfig(granularity="ROWWISE") and old.validate() is old
    old.format = "E5M2"
    assert old.format is Format.E5M2
    with pytest.raises(TypeError, match="unhashable"):
        {c: 1}  # noqa: B018
    with pytest.raises(TypeError, match="unhashable"):
        hash(Float4QuantConfig())


def test_float4_config_checks_each_assignment_at_once():
    c = Float4QuantConfig()
    c.use_gradient_sr = True
    c.format = "E2M1_X2"
    assert c == Float4QuantConfig(use_gradient_sr=True) and c.validate() is c
    for field, bad, err, match in (("format", "E4M3", ValueError, "^format: Float4QuantConfig needs E2M1_X2"),
                                   ("block_size", 16, ValueError, "^block_size: Float4QuantConfig needs 32"),
                                   ("granularity", "ROWWISE", ValueError, "^granularity: Float4QuantConfig needs"),
                                   ("scale_dtype", "FP32", ValueError, "^scale_dtype: Float4QuantConfig needs E8M0"),
                                   ("use_preshuffle", 1, TypeError, "^use_preshuffle: expected a bool")):
        with pytest.raises(err, match=match):
            setattr(c, field, bad)
    assert c == Float4QuantConfig(use_gradient_sr=True)


# -- no stale result --------------------------------------------------------------------------------

FIELD_CHANGES = [  # (starting config, assignments) -> the fresh config with those fields
    (dict(), dict(format=Format.E5M2)),
    (dict(), dict(granularity=G.ROWWISE)),
    (dict(granularity="ROWWISE"), dict(granularity=G.MX_BLOCKWISE)),
    (dict(granularity="BLOCKWISE", block_size=32), dict(block_size=16)),
    (dict(granularity="MX_BLOCKWISE"), dict(granularity=G.TENSORWISE, format=Format.HYBRID)),
]


def _fresh(start: dict, change: dict) -> Float8QuantConfig:
    fields = {**start, **change}
    if fields.get("granularity") in (G.TENSORWISE, G.ROWWISE, G.MX_BLOCKWISE, "MX_BLOCKWISE"):
        fields.pop("block_size", None)
    return Float8QuantConfig(**fields)


def _assign(config: Float8QuantConfig, change: dict) -> None:
    for name, value in change.items():
        setattr(config, name, value)


@pytest.mark.parametrize("start, change", FIELD_CHANGES)
def test_gemm_fp8_reads_the_fields_of_each_call(start, change):
    torch.manual_seed(0)
    a = torch.randn(24, 64, requires_grad=True)
    b = torch.randn(40, 64, requires_grad=True)
    g = torch.randn(24, 40)
    config = Float8QuantConfig(**start)
    before = gemm_fp8(a, b, trans_b=True, config=config)
    _assign(config, change)
    got = gemm_fp8(a, b, trans_b=True, config=config)
    got.backward(g)
    got_grads = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    want = gemm_fp8(a, b, trans_b=True, config=_fresh(start, change))
    want.backward(g)
    assert not torch.equal(before, want)  # the change matters, so a stale result would be caught
    assert torch.equal(got, want)
    assert torch.equal(got_grads[0], a.grad) and torch.equal(got_grads[1], b.grad)


@pytest.mark.parametrize("start, change", FIELD_CHANGES)
def test_float8_linear_weight_cache_misses_after_an_assignment(start, change):
    torch.manual_seed(1)
    layer = Float8Linear(64, 48, config=Float8QuantConfig(**start))
    x = torch.randn(16, 64)
    with torch.no_grad():
        before = layer(x)
        again = layer(x)
    cache = layer.weight_cache
    assert torch.equal(before, again) and (cache.hits, cache.misses) == (1, 1)
    _assign(layer.config, change)
    fresh = Float8Linear(64, 48, config=_fresh(start, change))
    fresh.load_state_dict(layer.state_dict())
    with torch.no_grad():
        got = layer(x)
        want = fresh(x)
    assert cache.misses == 2  # the entry made with the old fields is not reused
    assert not torch.equal(before, want) and torch.equal(got, want)


def test_grouped_linear_weight_cache_misses_after_an_assignment():
    torch.manual_seed(2)
    layer = GroupedLinear(3, 64, 32, config=Float8QuantConfig(granularity="ROWWISE"))
    x, lens = torch.randn(20, 64), torch.tensor([7, 0, 13])
    with torch.no_grad():
        before = layer(x, lens)
    layer.config.format = Format.E5M2
    fresh = GroupedLinear(3, 64, 32, config=Float8QuantConfig(granularity="ROWWISE", format="E5M2"))
    fresh.load_state_dict(layer.state_dict())
    with torch.no_grad():
        got, want = layer(x, lens), fresh(x, lens)
    assert not torch.equal(before, want) and torch.equal(got, want)


def test_gemm_fp4_reads_the_fields_of_each_call():
    torch.manual_seed(3)
    a, b, g = torch.randn(32, 64, requires_grad=True), torch.randn(32, 64), torch.randn(32, 32)
    config = Float4QuantConfig()
    gemm_fp4(a, b, trans_b=True, config=config).backward(g)
    plain = a.grad.clone()
    a.grad = None
    config.use_gradient_sr = True  # grad_out stochastically rounded from now on
    torch.manual_seed(4)
    gemm_fp4(a, b, trans_b=True, config=config).backward(g)
    got = a.grad.clone()
    a.grad = None
    torch.manual_seed(4)
    gemm_fp4(a, b, trans_b=True, config=Float4QuantConfig(use_gradient_sr=True)).backward(g)
    assert not torch.equal(plain, a.grad) and torch.equal(got, a.grad)


def test_a_compiled_function_sees_an_assignment():
    torch.manual_seed(5)
    a, b = torch.randn(16, 64), torch.randn(32, 64)
    config = Float8QuantConfig()

    def f(x, w):
        return gemm_fp8(x, w, trans_b=True, config=config)

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    first = compiled(a, b)
    assert torch.equal(first, gemm_fp8(a, b, trans_b=True, config=Float8QuantConfig()))
    config.format = Format.E5M2
    second = compiled(a, b)
    want = gemm_fp8(a, b, trans_b=True, config=Float8QuantConfig(format="E5M2"))
    assert not torch.equal(first, want) and torch.equal(second, want)


def test_configs_are_built_inside_a_fullgraph_compiled_region():
    """A model's forward may build its config (``gemm_fp4(..., config=Float4QuantConfig())``): the
    checks on construction trace without a graph break."""

    def f(x):
        c4, c8 = Float4QuantConfig(), Float8QuantConfig(granularity="ROWWISE")
        return x * c4.block_size + (1.0 if c8.granularity == ScalingGranularity.ROWWISE else 0.0)

    out = torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 33.0))
