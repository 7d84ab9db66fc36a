"""``grouped_gemm_fp8(..., wgrad_fp8=False)`` and ``GroupedLinear(wgrad_fp8=False)``: the forward and the
input gradient are those of the FP8 recipe, bit for bit; the weight gradient is the high-precision
variable-K GEMM on a and dC, against per-group float64 math (empty groups and tail rows included);
Megatron's fused accumulation; validation."""

import pytest
import torch

from turbo_core import Float8QuantConfig, ScalingGranularity
from turbo_core.modules import GroupedLinear
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_core.ops.quantization import quantize_fp8
from turbo_core.quantized_tensor import QuantizedTensor
from turbo_core.testing.cases.grouped_gemm import reference_grouped_gemm_variable_k

GRANS = ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"]
LENS = (5, 0, 9, 3)  # an empty group; plus two tail rows past the last group


def _config(gran):
    return Float8QuantConfig(granularity=gran, block_size=32 if gran == "BLOCKWISE" else None)


def _inputs(dtype, trans_b, seed=0):
    gen = torch.Generator().manual_seed(seed)
    m, k, n = sum(LENS) + 2, 64, 32
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(*((len(LENS), n, k) if trans_b else (len(LENS), k, n)), generator=gen).to(dtype)
    grad = torch.randn(m, n, generator=gen).to(dtype)
    return a, b, grad, torch.tensor(LENS, dtype=torch.int64)


def _run(a, b, grad, lens, trans_b, gran, wgrad_fp8, **kw):
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = grouped_gemm_fp8(a, b, lens, trans_b=trans_b, config=_config(gran), wgrad_fp8=wgrad_fp8, **kw)
    out.backward(grad)
    return out, a.grad, b.grad


@pytest.mark.parametrize("trans_b", [True, False])
@pytest.mark.parametrize("gran", GRANS)
def test_fp8_forward_and_dgrad_high_precision_wgrad(gran, trans_b):
    a, b, grad, lens = _inputs(torch.float32, trans_b)
    out8, da8, db8 = _run(a, b, grad, lens, trans_b, gran, True)
    out, da, db = _run(a, b, grad, lens, trans_b, gran, False)
    assert torch.equal(out, out8) and torch.equal(da, da8)
    want = reference_grouped_gemm_variable_k(a, grad, LENS, trans_c=trans_b)
    assert db.dtype == torch.float32 and db.shape == want.shape
    torch.testing.assert_close(db.double(), want, rtol=1e-5, atol=1e-4)
    assert torch.count_nonzero(db[1]) == 0
    # the FP8 weight gradient is further from float64 (the check tells the two paths apart)
    assert (db8.double() - want).abs().max() > 100 * (db.double() - want).abs().max()


@pytest.mark.parametrize("gran", ["ROWWISE", "MX_BLOCKWISE"])
def test_bf16_weight_gradient_in_the_weights_dtype(gran):
    a, b, grad, lens = _inputs(torch.bfloat16, True, seed=1)
    _, _, db = _run(a, b, grad, lens, True, gran, False)
    assert db.dtype == torch.bfloat16
    want = reference_grouped_gemm_variable_k(a, grad, LENS, trans_c=True)
    torch.testing.assert_close(db.double(), want, rtol=2**-7, atol=1e-2 * want.abs().max().item())


@pytest.mark.parametrize("gran", ["TENSORWISE", "BLOCKWISE"])
def test_fused_accumulation_into_main_grad(gran):
    a, b, grad, lens = _inputs(torch.float32, True, seed=2)
    w = b.clone().requires_grad_()
    w.main_grad = torch.ones(w.shape)
    for _ in range(2):
        out = grouped_gemm_fp8(a, w, lens, config=_config(gran), fuse_bgrad_accum_pattern="megatron", wgrad_fp8=False)
        out.backward(grad)
    assert torch.count_nonzero(w.grad) == 0 and w.grad_added_to_main_grad is True
    want = 1 + 2 * reference_grouped_gemm_variable_k(a, grad, LENS, trans_c=True)
    torch.testing.assert_close(w.main_grad.double(), want, rtol=1e-5, atol=1e-4)


def test_validation_before_any_kernel():
    a, b, _, lens = _inputs(torch.float32, True)
    with pytest.raises(TypeError, match="wgrad_fp8: expected a bool"):
        grouped_gemm_fp8(a, b, lens, wgrad_fp8=1)
    q, s = quantize_fp8(a, torch.float8_e4m3fn, "ROWWISE", axis=-1)
    qa = QuantizedTensor(q, s, shape=a.shape, orig_dtype=torch.float32, granularity=ScalingGranularity.ROWWISE,
                         quantized_axis=-1)
    with pytest.raises(ValueError, match="wgrad_fp8: False needs a high-precision a"):
        grouped_gemm_fp8(qa, b, lens, config=_config("ROWWISE"), wgrad_fp8=False)
    with pytest.raises(TypeError, match="wgrad_fp8: expected a bool"):
        GroupedLinear(2, 8, 4, config=_config("ROWWISE"), wgrad_fp8="no")


def test_grouped_linear_passes_it_through():
    torch.manual_seed(3)
    layer = GroupedLinear(len(LENS), 64, 32, config=_config("ROWWISE"), wgrad_fp8=False)
    assert "wgrad_fp8=False" in repr(layer)
    a, _, grad, lens = _inputs(torch.float32, True, seed=3)
    layer(a, lens).backward(grad)
    want = reference_grouped_gemm_variable_k(a, grad, LENS, trans_c=True)
    torch.testing.assert_close(layer.weight.grad.double(), want, rtol=1e-5, atol=1e-4)
    layer.wgrad_fp8 = True  # an attribute every forward reads
    layer.weight.grad = None
    layer(a, lens).backward(grad)
    _, _, db8 = _run(a, layer.weight.detach(), grad, lens, True, "ROWWISE", True)
    assert torch.equal(layer.weight.grad, db8)


@pytest.mark.parametrize("gran", ["ROWWISE", "MX_BLOCKWISE"])
def test_compile_fullgraph(gran):
    a, b, grad, lens = _inputs(torch.float32, False, seed=4)

    def fn(x, y, gl):
        return grouped_gemm_fp8(x, y, gl, trans_b=False, config=_config(gran), wgrad_fp8=False)

    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    torch.compile(fn, fullgraph=True, backend="aot_eager")(x, y, lens).backward(grad)
    out, da, db = _run(a, b, grad, lens, False, gran, False)
    torch.testing.assert_close(x.grad, da, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(y.grad, db, rtol=1e-6, atol=1e-6)
