"""``swiglu_with_probs_fp8`` / ``geglu_with_probs_fp8`` and their primitives on TORCH: a SwiGLU feeding
a ``Float8Linear`` (the down projection) through the fused op gives the outputs and every gradient of
``swiglu_with_probs`` followed by the same layer, bit for bit (training with the column copy, eval
without); the same for a ROWWISE ``grouped_gemm_fp8`` (an expert's down projection, frozen) with a row mask;
argument errors of the op and the primitive; the custom ops' fake tensors (opcheck); a quantized
gradient; that the conformance cases catch a wrong kernel. The numerics of the primitives against
float64 are their conformance cases (``turbo_core.testing.cases.activation_fp8``)."""

import pytest
import torch

from turbo_core import Float8QuantConfig
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.launch.activation_fp8 import glu_fwd_fp8
from turbo_core.modules import Float8Linear
from turbo_core.ops import (
    geglu_with_probs,
    geglu_with_probs_fp8,
    grouped_gemm_fp8,
    quantize_fp8,
    swiglu_with_probs,
    swiglu_with_probs_fp8,
)
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair
from turbo_core.testing.cases.activation_fp8 import CASES

E4M3 = torch.float8_e4m3fn
CONFIGS = {
    "rowwise": Float8QuantConfig(granularity="ROWWISE"),
    "rowwise-hybrid": Float8QuantConfig(granularity="ROWWISE", format="HYBRID"),
    "block32": Float8QuantConfig(granularity="BLOCKWISE", block_size=32),
    "mx": Float8QuantConfig(granularity="MX_BLOCKWISE"),
}
UNFUSED = {"swiglu": swiglu_with_probs, "geglu": geglu_with_probs}
FUSED = {"swiglu": swiglu_with_probs_fp8, "geglu": geglu_with_probs_fp8}


def _layer_step(cfg, fused, kind="swiglu", train=True):
    torch.manual_seed(0)
    lin = Float8Linear(96, 40, config=cfg, dtype=torch.bfloat16)
    x = torch.randn(37, 192, dtype=torch.bfloat16, requires_grad=train)
    probs = torch.rand(37, 1).requires_grad_(train)
    with torch.set_grad_enabled(train):
        a = FUSED[kind](x, probs, config=cfg, with_trans=train) if fused else UNFUSED[kind](x, probs)
        out = lin(a)
    if not train:
        return [out]
    out.backward(torch.randn(out.shape, dtype=out.dtype))
    return [out.detach(), x.grad, probs.grad, lin.weight.grad, lin.bias.grad]


@pytest.mark.parametrize("cfg_id", list(CONFIGS))
def test_fused_swiglu_feeds_float8_linear_bit_for_bit(cfg_id):
    cfg = CONFIGS[cfg_id]
    for train in (True, False):
        got = _layer_step(cfg, True, train=train)
        want = _layer_step(cfg, False, train=train)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert torch.equal(a, b), f"train={train}: tensor {i} differs"


def test_fused_geglu_feeds_float8_linear_bit_for_bit():
    got, want = _layer_step(CONFIGS["block32"], True, "geglu"), _layer_step(CONFIGS["block32"], False, "geglu")
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"tensor {i} differs"


def _expert_step(fused):
    """An expert's down projection with frozen weights (no wgrad, so no column copy): rows packed by
    group, an over-allocated tail masked out."""
    torch.manual_seed(1)
    cfg = CONFIGS["rowwise"]
    lens = torch.tensor([9, 0, 14], dtype=torch.int64)
    w = torch.randn(3, 24, 64, dtype=torch.bfloat16)  # [G, out, in]
    h = torch.randn(27, 128, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(27, requires_grad=True)
    mask = (torch.arange(27) < 23).to(torch.int64)
    a = swiglu_with_probs_fp8(h, probs, mask, config=cfg) if fused else swiglu_with_probs(h, probs, mask)
    out = grouped_gemm_fp8(a, w, lens, trans_b=True, config=cfg)
    out.backward(torch.randn(out.shape, dtype=out.dtype))
    return [out.detach(), h.grad, probs.grad]


def test_fused_swiglu_feeds_rowwise_grouped_gemm_fp8_bit_for_bit():
    for i, (a, b) in enumerate(zip(_expert_step(True), _expert_step(False), strict=True)):
        assert torch.equal(a, b), f"tensor {i} differs"


def test_result_types_leading_dims_and_row_mask():
    x = torch.randn(2, 3, 128, dtype=torch.bfloat16)
    out = swiglu_with_probs_fp8(x, torch.rand(2, 3), config=CONFIGS["rowwise"])
    assert isinstance(out, QuantizedTensor) and out.shape == (6, 64) and out.dtype == torch.bfloat16
    assert out.quantized_axis == 1 and out.real_dtype == E4M3
    pair = geglu_with_probs_fp8(x, torch.rand(6), config=CONFIGS["mx"], with_trans=True)
    assert isinstance(pair, QuantizedTensorPair) and pair.data_t.shape == (64, 6)
    assert Float8Linear(64, 8, config=CONFIGS["mx"])(pair).shape == (6, 8)
    # Inactive rows: never read (NaN here), zero rows out (zero data, finite scales), zero gradients.
    x = torch.randn(4, 64)
    x[1] = float("nan")
    x.requires_grad_(True)
    probs = torch.rand(4, requires_grad=True)
    mask = torch.tensor([1, 0, 1, 0])
    out = swiglu_with_probs_fp8(x, probs, mask, config=CONFIGS["block32"])
    values = out.dequantize(torch.float32)
    assert torch.equal(values[1::2], torch.zeros(2, 32)) and values[0::2].abs().sum(-1).gt(0).all()
    assert out.scale_inv.isfinite().all()
    out.backward(torch.ones(4, 32))
    assert torch.equal(x.grad[1::2], torch.zeros(2, 64)) and torch.equal(probs.grad[1::2], torch.zeros(2))


def test_errors():
    x, p = torch.randn(4, 64), torch.rand(4)
    with pytest.raises(ValueError, match=r"^granularity: swiglu_fwd_fp8 takes ROWWISE, BLOCKWISE or MX_BLOCKWISE"):
        swiglu_with_probs_fp8(x, p, config=Float8QuantConfig())
    with pytest.raises(ValueError, match=r"^granularity: geglu_fwd_fp8 takes .* TENSORWISE needs the whole"):
        geglu_with_probs_fp8(x, p, config=Float8QuantConfig(granularity="TENSORWISE"))
    with pytest.raises(TypeError, match=r"^config: expected a Float8QuantConfig"):
        swiglu_with_probs_fp8(x, p, config="ROWWISE")
    with pytest.raises(TypeError, match=r"^with_trans: expected a bool"):
        swiglu_with_probs_fp8(x, p, config=CONFIGS["rowwise"], with_trans=1)
    with pytest.raises(ValueError, match=r"^x: expected at least a 1-D tensor"):
        swiglu_with_probs_fp8(torch.tensor(1.0), p, config=CONFIGS["rowwise"])
    with pytest.raises(ValueError, match=r"^x: "):
        swiglu_with_probs_fp8(torch.randn(4, 63), p, config=CONFIGS["rowwise"])
    with pytest.raises(ValueError, match=r"^probs: expected 4 elements"):
        swiglu_with_probs_fp8(x, torch.rand(5), config=CONFIGS["rowwise"])
    with pytest.raises(TypeError, match=r"^probs: "):
        swiglu_with_probs_fp8(x, p.double(), config=CONFIGS["rowwise"])
    with pytest.raises(TypeError, match=r"^row_mask: "):
        swiglu_with_probs_fp8(x, p, torch.ones(4, dtype=torch.int32), config=CONFIGS["rowwise"])
    kw = dict(out_dtype=E4M3, granularity="ROWWISE")
    with pytest.raises(TypeError, match=r"^out_dtype: "):
        glu_fwd_fp8("swiglu", x, p, out_dtype=torch.bfloat16, granularity="ROWWISE")
    with pytest.raises(TypeError, match=r"^out_dtype: MX_BLOCKWISE needs an OCP FP8 dtype"):
        glu_fwd_fp8("swiglu", x, p, out_dtype=torch.float8_e4m3fnuz, granularity="MX_BLOCKWISE", block_size=32)
    with pytest.raises(ValueError, match=r"^block_size: "):
        glu_fwd_fp8("swiglu", x, p, out_dtype=E4M3, granularity="BLOCKWISE")
    with pytest.raises(TypeError, match=r"^store_y: expected a bool"):
        glu_fwd_fp8("swiglu", x, p, store_y="yes", **kw)
    with pytest.raises(ValueError, match=r"^x: "):
        glu_fwd_fp8("swiglu", x.t(), torch.rand(64), **kw)  # not contiguous
    with pytest.raises(ValueError, match=r"^kind: "):
        glu_fwd_fp8("reglu", x, p, **kw)
    with pytest.raises(ValueError, match=r"^x: expected last dim 32"):
        Float8Linear(32, 8, config=CONFIGS["rowwise"])(swiglu_with_probs_fp8(torch.randn(4, 32), p,
                                                                             config=CONFIGS["rowwise"]))
    for kind in ("swiglu", "geglu"):
        prim = get_primitive(f"{kind}_fwd_fp8")
        assert prim.family == "glu" and prim.precision.name == "FP8"


def _opcheck(op, args):
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))
    after = [a for a in args if isinstance(a, torch.Tensor)]
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_opcheck_custom_ops():
    x, p, m = torch.randn(5, 192), torch.rand(5), torch.tensor([1, 0, 1, 1, 0])
    _opcheck(torch.ops.turbo.swiglu_fwd_fp8.default, (x, p, None, E4M3, "ROWWISE", None, False))
    _opcheck(torch.ops.turbo.swiglu_fwd_fp8.default, (x, p, m, torch.float8_e5m2, "BLOCKWISE", 32, True))
    _opcheck(torch.ops.turbo.geglu_fwd_fp8.default, (x.bfloat16(), p, None, E4M3, "MX_BLOCKWISE", 32, True))


def test_a_quantized_gradient_is_taken_at_its_values():
    """torch.compile traces the backward with a gradient shaped like the output (a QuantizedTensor);
    such a gradient counts as its dequantized values: the same grad_x and grad_probs as
    swiglu_with_probs' backward of those values."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 128, generator=gen, requires_grad=True)
    p = torch.rand(6, generator=gen, requires_grad=True)
    out = swiglu_with_probs_fp8(x, p, config=CONFIGS["rowwise"])
    q, s = quantize_fp8(torch.randn(6, 64, generator=gen), E4M3, "ROWWISE", axis=-1)
    grad = QuantizedTensor(q, s, shape=(6, 64), orig_dtype=torch.float32, granularity="ROWWISE", block_size=None,
                           quantized_axis=-1)
    dx, dp = torch.autograd.grad(out, (x, p), grad_outputs=grad)
    x2, p2 = x.detach().requires_grad_(True), p.detach().requires_grad_(True)
    ref_dx, ref_dp = torch.autograd.grad(swiglu_with_probs(x2, p2), (x2, p2), grad_outputs=grad.dequantize(torch.float32))
    assert torch.equal(dx, ref_dx) and torch.equal(dp, ref_dp)


def test_the_cases_catch_a_wrong_kernel(monkeypatch):
    """A reference whose quantization rounds one element the wrong way fails the primitive's case."""
    import turbo_core.reference.activation_fp8 as ref

    real = ref.quantize_fp8

    def off_by_one(args):
        q, s = real(args)
        bad = q.view(torch.uint8).clone()
        bad.view(-1)[0] ^= 1
        return bad.view(q.dtype), s

    monkeypatch.setattr(ref, "quantize_fp8", off_by_one)
    case = next(c for c in CASES if c.id == "swiglu_fp8-probs-rowwise-E4M3-5x127-bfloat16")
    with pytest.raises(AssertionError):
        case.run()
