"""``rmsnorm_fp8`` / ``rmsnorm_fwd_fp8`` on TORCH: an RMSNorm feeding a ``Float8Linear`` through the
fused op gives the outputs and every gradient of ``rmsnorm`` followed by the same layer, bit for
bit (training with the column copy, eval without); argument errors of the op, the primitive and
the module; the custom op's fake tensors (opcheck). The numerics of the primitive against float64
are its conformance cases (``turbo_core.testing.cases.normalization_fp8``)."""

import pytest
import torch

from turbo_core import Float8QuantConfig
from turbo_core.dispatch.launch.normalization_fp8 import rmsnorm_fwd_fp8
from turbo_core.modules import Float8Linear
from turbo_core.ops import rmsnorm, rmsnorm_fp8
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

E4M3 = torch.float8_e4m3fn
CONFIGS = {
    "rowwise": Float8QuantConfig(granularity="ROWWISE"),
    "rowwise-hybrid": Float8QuantConfig(granularity="ROWWISE", format="HYBRID"),
    "block32": Float8QuantConfig(granularity="BLOCKWISE", block_size=32),
    "mx": Float8QuantConfig(granularity="MX_BLOCKWISE"),
}


def _layer_step(cfg, fused, zero_centered=False, train=True):
    torch.manual_seed(0)
    lin = Float8Linear(96, 40, config=cfg, dtype=torch.bfloat16)
    x = torch.randn(37, 96, dtype=torch.bfloat16, requires_grad=train)
    gamma = (torch.randn(96) * 0.3 + (0.0 if zero_centered else 1.0)).to(torch.bfloat16).requires_grad_(train)
    with torch.set_grad_enabled(train):
        if fused:
            a = rmsnorm_fp8(x, gamma, 1e-5, zero_centered, config=cfg, with_trans=train)
        else:
            a = rmsnorm(x, gamma, 1e-5, zero_centered)
        out = lin(a)
    if not train:
        return [out]
    out.backward(torch.randn(out.shape, dtype=out.dtype))
    return [out.detach(), x.grad, gamma.grad, lin.weight.grad, lin.bias.grad]


@pytest.mark.parametrize("zero_centered", [False, True])
@pytest.mark.parametrize("cfg_id", list(CONFIGS))
def test_fused_norm_feeds_float8_linear_bit_for_bit(cfg_id, zero_centered):
    cfg = CONFIGS[cfg_id]
    for train in (True, False):
        got = _layer_step(cfg, True, zero_centered, train)
        want = _layer_step(cfg, False, zero_centered, train)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert torch.equal(a, b), f"train={train}: tensor {i} differs"


def test_result_types_and_leading_dims():
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    out = rmsnorm_fp8(x, None, config=CONFIGS["rowwise"])
    assert isinstance(out, QuantizedTensor) and out.shape == (6, 64) and out.dtype == torch.bfloat16
    assert out.quantized_axis == 1 and out.real_dtype == E4M3
    pair = rmsnorm_fp8(x, None, config=CONFIGS["mx"], with_trans=True)
    assert isinstance(pair, QuantizedTensorPair) and pair.data_t.shape == (64, 6)
    lin = Float8Linear(64, 8, config=CONFIGS["mx"])
    assert lin(pair).shape == (6, 8)


def test_errors():
    x, g = torch.randn(4, 32), torch.randn(32)
    with pytest.raises(ValueError, match=r"^granularity: rmsnorm_fwd_fp8 takes ROWWISE, BLOCKWISE or MX_BLOCKWISE"):
        rmsnorm_fp8(x, g, config=Float8QuantConfig())
    with pytest.raises(TypeError, match=r"^config: expected a Float8QuantConfig"):
        rmsnorm_fp8(x, g, config="ROWWISE")
    with pytest.raises(TypeError, match=r"^with_trans: expected a bool"):
        rmsnorm_fp8(x, g, config=CONFIGS["rowwise"], with_trans=1)
    with pytest.raises(ValueError, match=r"^x: expected at least a 1-D tensor"):
        rmsnorm_fp8(torch.tensor(1.0), None, config=CONFIGS["rowwise"])
    with pytest.raises(ValueError, match=r"^gamma: expected shape \(32,\)"):
        rmsnorm_fp8(x, torch.randn(31), config=CONFIGS["rowwise"])
    with pytest.raises(TypeError, match=r"^out_dtype: "):
        rmsnorm_fwd_fp8(x, g, out_dtype=torch.bfloat16, granularity="ROWWISE", eps=1e-6)
    with pytest.raises(TypeError, match=r"^out_dtype: MX_BLOCKWISE needs an OCP FP8 dtype"):
        rmsnorm_fwd_fp8(x, g, out_dtype=torch.float8_e4m3fnuz, granularity="MX_BLOCKWISE", block_size=32, eps=1e-6)
    with pytest.raises(ValueError, match=r"^block_size: "):
        rmsnorm_fwd_fp8(x, g, out_dtype=E4M3, granularity="BLOCKWISE", eps=1e-6)
    with pytest.raises(TypeError, match=r"^store_y: expected a bool"):
        rmsnorm_fwd_fp8(x, g, out_dtype=E4M3, granularity="ROWWISE", eps=1e-6, store_y="yes")
    with pytest.raises(ValueError, match=r"^eps: "):
        rmsnorm_fwd_fp8(x, g, out_dtype=E4M3, granularity="ROWWISE", eps=0.0)
    lin = Float8Linear(32, 8, config=CONFIGS["rowwise"])
    q = QuantizedTensor.quantize(torch.randn(2, 4, 32), E4M3, "ROWWISE", axis=-1)
    with pytest.raises(ValueError, match=r"^x: a pre-quantized x must be 2-D \[T, 32\]"):
        lin(q)
    with pytest.raises(ValueError, match=r"^x: expected last dim 32"):
        lin(rmsnorm_fp8(torch.randn(4, 16), None, config=CONFIGS["rowwise"]))


def _opcheck(args):
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    torch.library.opcheck(torch.ops.turbo.rmsnorm_fwd_fp8.default, args,
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
    after = [a for a in args if isinstance(a, torch.Tensor)]
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_opcheck_custom_op():
    x, r, g = torch.randn(5, 96), torch.randn(5, 96), torch.randn(96)
    _opcheck((x, g, None, 1e-6, False, E4M3, "ROWWISE", None, False))
    _opcheck((x, g, r, 1e-6, True, torch.float8_e5m2, "BLOCKWISE", 32, True))
    _opcheck((x.bfloat16(), None, None, 1e-6, False, E4M3, "MX_BLOCKWISE", 32, True))


def test_a_quantized_gradient_is_taken_at_its_values():
    """torch.compile traces the backward with a gradient shaped like the output (a QuantizedTensor);
    such a gradient counts as its dequantized values: the same dx and dgamma as rmsnorm's backward
    of those values."""
    from turbo_core.ops import quantize_fp8

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 64, generator=gen, requires_grad=True)
    g = (1 + 0.1 * torch.randn(64, generator=gen)).requires_grad_(True)
    cfg = Float8QuantConfig(granularity="ROWWISE")
    out = rmsnorm_fp8(x, g, config=cfg)
    q, s = quantize_fp8(torch.randn(6, 64, generator=gen), torch.float8_e4m3fn, "ROWWISE", axis=-1)
    grad = QuantizedTensor(q, s, shape=(6, 64), orig_dtype=torch.float32, granularity="ROWWISE", block_size=None,
                           quantized_axis=-1)
    dx, dg = torch.autograd.grad(out, (x, g), grad_outputs=grad)
    x2, g2 = x.detach().requires_grad_(True), g.detach().requires_grad_(True)
    ref_dx, ref_dg = torch.autograd.grad(rmsnorm(x2, g2), (x2, g2), grad_outputs=grad.dequantize(torch.float32))
    torch.testing.assert_close(dx, ref_dx, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dg, ref_dg, rtol=1e-6, atol=1e-6)
