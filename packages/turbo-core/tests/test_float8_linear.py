"""``Float8Linear``: parity with ``torch.nn.Linear`` (within the FP8 SNR floor, and exactly with
``gemm_fp8`` + bias), state_dict round trips, ``from_float`` in place and by copy, fused wgrad,
config handling and fullgraph compile."""

import pytest
import torch

from turbo_core import Float8QuantConfig
from turbo_core.dispatch.manager import use_backend
from turbo_core.modules.float8_linear import Float8Linear
from turbo_core.ops.gemm_fp8 import gemm_fp8
from turbo_core.testing.numerics import assert_snr


@pytest.fixture(autouse=True)
def _fp8_kernels(monkeypatch):
    """Register the FP8/FP4 GEMM reference kernels with TORCH for these tests, until
    ``turbo_core.reference.plugin.FAMILIES`` lists them (then this does nothing)."""
    import turbo_core.dispatch.specs.gemm_fp8  # noqa: F401  (defines the primitives the kernels serve)
    import turbo_core.dispatch.specs.grouped_gemm_fp8  # noqa: F401
    from turbo_core.reference import plugin

    missing = tuple(f for f in ("gemm_fp8", "grouped_gemm_fp8") if f not in plugin.FAMILIES)
    if missing:
        monkeypatch.setattr(plugin, "FAMILIES", plugin.FAMILIES + missing)


CONFIGS = [None, Float8QuantConfig(granularity="ROWWISE", format="HYBRID"),
           Float8QuantConfig(granularity="BLOCKWISE", block_size=32), Float8QuantConfig(granularity="MX_BLOCKWISE")]


def test_defaults_state_dict_and_repr():
    torch.manual_seed(0)
    mod = Float8Linear(12, 7)
    assert isinstance(mod, torch.nn.Linear)
    assert mod.config == Float8QuantConfig() and mod.config.granularity == "TENSORWISE" and mod.config.format == "E4M3"
    ref = torch.nn.Linear(12, 7)
    assert set(mod.state_dict()) == set(ref.state_dict()) == {"weight", "bias"}
    ref.load_state_dict(mod.state_dict())
    other = Float8Linear(12, 7, config=Float8QuantConfig(granularity="ROWWISE"))
    other.load_state_dict(ref.state_dict())
    assert torch.equal(other.weight, mod.weight) and torch.equal(other.bias, mod.bias)
    nb = Float8Linear(12, 7, bias=False, dtype=torch.bfloat16)
    assert nb.bias is None and nb.weight.dtype == torch.bfloat16
    nb.load_state_dict(torch.nn.Linear(12, 7, bias=False).state_dict())
    assert repr(mod) == "Float8Linear(in_features=12, out_features=7, bias=True, format=E4M3, granularity=TENSORWISE)"
    assert "granularity=BLOCKWISE, block_size=32" in repr(Float8Linear(4, 4, config=CONFIGS[2]))
    with pytest.raises(TypeError, match=r"^config: expected a Float8QuantConfig"):
        Float8Linear(4, 4, config="TENSORWISE")


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "rowwise-hybrid", "blockwise", "mx"])
def test_matches_torch_linear_and_gemm_fp8(config):
    torch.manual_seed(1)
    mod = Float8Linear(64, 48, config=config)
    # Gaussian weights, the data the SNR floors are calibrated on. (nn.Linear's uniform init puts many
    # values near each block's max; under MX's OCP floor-exponent rule those saturate at 448 and E4M3
    # lands at ~24-25 dB.)
    torch.nn.init.normal_(mod.weight, std=0.125)
    ref = torch.nn.Linear(64, 48).double()
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(3, 5, 64, requires_grad=True)
    x_ref = x.detach().double().requires_grad_()
    y = mod(x)
    y_ref = ref(x_ref)
    assert y.shape == (3, 5, 48) and y.dtype == torch.float32
    fmt = "E4M3" if config is None else config.format.value
    assert_snr(y_ref, y, "E4M3", what="out")
    # exactly the op: gemm_fp8 on the flattened input, then the bias
    with torch.no_grad():
        want = gemm_fp8(x.reshape(-1, 64), mod.weight, trans_b=True, config=mod.config) + mod.bias
    assert torch.equal(y.detach(), want.reshape(3, 5, 48))
    g = torch.randn(3, 5, 48)
    y.backward(g)
    y_ref.backward(g.double())
    assert_snr(x_ref.grad, x.grad, fmt, what="grad_x")
    assert_snr(ref.weight.grad, mod.weight.grad, fmt, what="grad_w")
    torch.testing.assert_close(mod.bias.grad.double(), ref.bias.grad, rtol=1e-6, atol=1e-5)  # not quantized


def test_from_float_in_place_and_by_copy():
    torch.manual_seed(2)
    lin = torch.nn.Linear(16, 8)
    w, b = lin.weight, lin.bias
    parent = torch.nn.Sequential(lin)
    cfg = Float8QuantConfig(granularity="ROWWISE")
    out = Float8Linear.from_float(lin, config=cfg)
    assert out is lin and type(parent[0]) is Float8Linear and parent[0].config == cfg
    assert parent[0].weight is w and parent[0].bias is b  # the same parameters
    parent(torch.randn(2, 16)).sum().backward()
    assert w.grad is not None

    src = torch.nn.Linear(16, 8, bias=False, dtype=torch.bfloat16)
    src.weight.requires_grad_(False)
    copy = Float8Linear.from_float(src, inplace=False)
    assert type(src) is torch.nn.Linear and copy is not src
    assert copy.config == Float8QuantConfig() and copy.bias is None
    assert copy.weight is not src.weight and torch.equal(copy.weight, src.weight)
    assert copy.weight.dtype == torch.bfloat16 and not copy.weight.requires_grad
    with torch.no_grad():
        copy.weight.add_(1)
    assert not torch.equal(copy.weight, src.weight)  # a copy, not a view
    with pytest.raises(TypeError, match=r"^mod: expected a torch.nn.Linear"):
        Float8Linear.from_float(torch.nn.Conv1d(2, 2, 1))
    with pytest.raises(TypeError, match=r"^config: expected a Float8QuantConfig"):
        Float8Linear.from_float(torch.nn.Linear(2, 2), config="ROWWISE")


def test_main_grad_and_input_checks():
    torch.manual_seed(3)
    mod = Float8Linear(8, 4)
    mod.weight.main_grad = torch.zeros(4, 8)
    x = torch.randn(5, 8)
    mod(x).sum().backward()
    assert mod.weight.grad_added_to_main_grad is True and torch.count_nonzero(mod.weight.main_grad) > 0
    plain = Float8Linear(8, 4)
    plain.load_state_dict(mod.state_dict())
    plain(x).sum().backward()
    torch.testing.assert_close(mod.weight.main_grad, plain.weight.grad, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"^x: expected last dim 8"):
        mod(torch.randn(2, 7))


def test_bf16_module_and_1d_input():
    torch.manual_seed(4)
    mod = Float8Linear(32, 16, dtype=torch.bfloat16)
    y = mod(torch.randn(32, dtype=torch.bfloat16))
    assert y.shape == (16,) and y.dtype == torch.bfloat16


def test_compiles_fullgraph():
    torch.manual_seed(5)
    mod = Float8Linear(32, 16, config=Float8QuantConfig(granularity="ROWWISE"))
    x = torch.randn(6, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out = torch.compile(mod, fullgraph=True, backend="aot_eager")(x)
    out.sum().backward()
    grad_w = mod.weight.grad.clone()
    mod.weight.grad = None
    want = mod(x2)
    want.sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad_w, mod.weight.grad, rtol=1e-6, atol=1e-6)


def test_runs_pinned_to_the_reference_backend():
    mod = Float8Linear(8, 8)
    with use_backend("TORCH"):
        assert mod(torch.randn(2, 8)).shape == (2, 8)
