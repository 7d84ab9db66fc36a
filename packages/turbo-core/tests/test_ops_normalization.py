"""``rmsnorm`` / ``rmsnorm_residual`` and the ``RMSNorm`` module: the conformance cases on TORCH,
validation messages, opcheck, torch.compile, parity and state_dict with torch.nn.RMSNorm."""

import pytest
import torch

from turbo_core.dispatch import dispatcher, get_primitive
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.modules import RMSNorm
from turbo_core.ops import rmsnorm, rmsnorm_residual
from turbo_core.testing.cases.normalization import CASES


def test_cases_catch_a_wrong_kernel(monkeypatch):
    # The cases must be able to fail: a reference that ignores zero_centered is caught.
    import turbo_core.reference.normalization as ref

    monkeypatch.setattr(ref, "_weight", lambda gamma, zero_centered: None if gamma is None else gamma.double())
    case = next(c for c in CASES if c.id == "rmsnorm-zero_centered-5x33-float32")
    with pytest.raises(AssertionError, match="y"):
        case.run()


def test_primitives_and_families():
    assert get_primitive("rmsnorm_fwd").family == "rmsnorm"
    assert get_primitive("rmsnorm_bwd").family == "rmsnorm"
    assert get_primitive("rmsnorm_fwd").precision.name == "BF16_FP16_FP32"


def test_autograd_runs_the_two_primitives():
    x = torch.randn(4, 9, requires_grad=True)
    g = torch.ones(9, requires_grad=True)
    rmsnorm(x, g).sum().backward()
    calls = {prim for (prim, _backend, _how) in dispatcher.stats()}
    assert {"rmsnorm_fwd", "rmsnorm_bwd"} <= calls



# The family scope "rmsnorm" selects both primitives, from code and from TURBO_RMSNORM_BACKEND.
@pytest.mark.parametrize("layer", ["env", "code"])
def test_family_scope_selects_the_backend(monkeypatch, layer):
    from turbo_core.dispatch.manager import GlobalBackendManager

    if layer == "env":
        monkeypatch.setenv("TURBO_RMSNORM_BACKEND", "TORCH")
    else:
        GlobalBackendManager.set_backend("rmsnorm", "TORCH")
    x = torch.randn(4, 9, requires_grad=True)
    rmsnorm(x, torch.ones(9)).sum().backward()
    hows = {(prim, how) for (prim, _backend, how) in dispatcher.stats()}
    assert {("rmsnorm_fwd", layer), ("rmsnorm_bwd", layer)} <= hows

def test_validation_names_the_argument():
    x, g = torch.randn(4, 33), torch.randn(33)
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor"):
        rmsnorm([1.0, 2.0], g)
    with pytest.raises(TypeError, match="^x: expected dtype in"):
        rmsnorm(torch.ones(4, 33, dtype=torch.int32), g)
    with pytest.raises(ValueError, match="^x: expected at least a 1-D"):
        rmsnorm(torch.tensor(1.0), None)
    with pytest.raises(ValueError, match="^x: expected a non-empty last"):
        rmsnorm(torch.randn(4, 0), None)
    with pytest.raises(ValueError, match=r"^gamma: expected shape \(33,\)"):
        rmsnorm(x, torch.randn(32))
    with pytest.raises(ValueError, match="^gamma: expected a 1-D tensor"):
        rmsnorm(x, torch.randn(1, 33))
    with pytest.raises(TypeError, match="^gamma: expected dtype in"):
        rmsnorm(x, torch.ones(33, dtype=torch.float64))
    with pytest.raises(ValueError, match="^gamma: expected a tensor on cpu"):
        rmsnorm(x, torch.ones(33, device="meta"))
    for eps in (0.0, -1e-6, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="^eps: expected a finite float > 0"):
            rmsnorm(x, g, eps=eps)
    for eps in ("1e-6", True, None):
        with pytest.raises(TypeError, match="^eps: expected a float > 0"):
            rmsnorm(x, g, eps=eps)
    with pytest.raises(TypeError, match="^zero_centered: expected a bool"):
        rmsnorm(x, g, zero_centered=1)
    with pytest.raises(ValueError, match=r"^residual: expected shape \(4, 33\)"):
        rmsnorm_residual(x, torch.randn(4, 32), g)
    with pytest.raises(TypeError, match="^residual: expected the dtype of x"):
        rmsnorm_residual(x, torch.randn(4, 33).half(), g)
    with pytest.raises(TypeError, match="^residual: expected a torch.Tensor"):
        rmsnorm_residual(x, None, g)


def test_primitive_validation_names_the_argument():
    fwd, bwd = get_primitive("rmsnorm_fwd"), get_primitive("rmsnorm_bwd")
    x = torch.randn(6, 10)
    rstd = torch.ones(6)
    with pytest.raises(ValueError, match="^x: expected a contiguous tensor"):
        fwd.check_args(RmsNormFwdArgs(torch.randn(10, 6).t(), None))
    with pytest.raises(ValueError, match="^x: expected a 2-D tensor"):
        fwd.check_args(RmsNormFwdArgs(torch.randn(2, 3, 10), None))
    with pytest.raises(TypeError, match="^dy: expected the dtype of x"):
        bwd.check_args(RmsNormBwdArgs(x.half(), x, None, rstd))
    with pytest.raises(ValueError, match=r"^dy: expected shape \(6, 10\)"):
        bwd.check_args(RmsNormBwdArgs(torch.randn(5, 10), x, None, rstd))
    with pytest.raises(TypeError, match="^rstd: expected dtype in"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, rstd.double()))
    with pytest.raises(ValueError, match=r"^rstd: expected shape \(6,\)"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, torch.ones(5)))
    with pytest.raises(ValueError, match=r"^gamma: expected shape \(10,\)"):
        bwd.check_args(RmsNormBwdArgs(x, x, torch.ones(9), rstd))
    bwd.check_args(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(6, 10)))
    with pytest.raises(TypeError, match="^dresidual: expected the dtype of x"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, rstd, False, x.half()))
    with pytest.raises(ValueError, match=r"^dresidual: expected shape \(6, 10\)"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(6, 9)))
    with pytest.raises(ValueError, match="^dresidual: expected a contiguous tensor"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(10, 6).t()))
    with pytest.raises(ValueError, match="^dresidual: expected a tensor on cpu"):
        bwd.check_args(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(6, 10, device="meta")))


def test_residual_backward_is_one_primitive_call_with_dresidual(monkeypatch):
    # rmsnorm_residual's backward hands grad_x_plus_r to rmsnorm_bwd (dresidual): one call, no add after it.
    from turbo_core.dispatch.launch import normalization as launch

    seen = []
    real = launch.call
    monkeypatch.setattr(launch, "call", lambda name, args: seen.append((name, args)) or real(name, args))
    x, r = torch.randn(4, 9, requires_grad=True), torch.randn(4, 9, requires_grad=True)
    g = torch.randn(9, requires_grad=True)
    ds = torch.randn(4, 9)
    y, s = rmsnorm_residual(x, r, g)
    torch.autograd.backward([y, s], [torch.randn(4, 9), ds])
    bwd = [a for name, a in seen if name == "rmsnorm_bwd"]
    assert len(bwd) == 1 and bwd[0].dresidual is not None
    torch.testing.assert_close(bwd[0].dresidual, ds)
    torch.testing.assert_close(x.grad, r.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_dresidual_is_added_before_the_one_rounding(dtype):
    torch.manual_seed(5)
    x, dy, dres = (torch.randn(7, 33).to(dtype) for _ in range(3))
    gamma = torch.randn(33).to(dtype)
    rstd = torch.rsqrt(x.double().square().mean(-1) + 1e-6).float()
    from turbo_core.reference.normalization import rmsnorm_bwd as ref_bwd

    dx0, dg0 = ref_bwd(RmsNormBwdArgs(dy, x, gamma, rstd))
    dx1, dg1 = ref_bwd(RmsNormBwdArgs(dy, x, gamma, rstd, False, dres))
    assert torch.equal(dg0, dg1) and dx1.dtype == dtype
    # one rounding of the float64 sum
    n = x.double() * rstd.double()[:, None]
    dn = dy.double() * gamma.double()
    want = rstd.double()[:, None] * (dn - n * (dn * n).mean(-1, keepdim=True)) + dres.double()
    assert torch.equal(dx1, want.to(dtype))


def test_non_contiguous_input_and_gamma():
    torch.manual_seed(0)
    x = torch.randn(33, 6).t()  # [6, 33], strides (1, 6)
    g = torch.randn(66)[::2]
    y = rmsnorm(x, g)
    want = x.double() / torch.sqrt(x.double().square().mean(-1, keepdim=True) + 1e-6) * g.double()
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


def test_no_affine_has_no_gamma_grad_and_zero_centered_without_gamma_is_plain():
    x = torch.randn(3, 7, requires_grad=True)
    y = rmsnorm(x, None)
    torch.testing.assert_close(y, rmsnorm(x, None, zero_centered=True))
    y.square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_gamma_without_grad_and_x_without_grad():
    x = torch.randn(3, 7)
    g = torch.randn(7, requires_grad=True)
    rmsnorm(x, g).sum().backward()
    assert g.grad.shape == (7,)
    x2 = torch.randn(3, 7, requires_grad=True)
    rmsnorm(x2, torch.randn(7)).sum().backward()
    assert x2.grad.shape == (3, 7)


def test_opcheck_custom_ops():
    x, r, g = torch.randn(5, 33), torch.randn(5, 33), torch.randn(33)
    for gamma in (g, None):
        torch.library.opcheck(torch.ops.turbo.rmsnorm_fwd.default, (x, gamma, None, 1e-6, False))
        torch.library.opcheck(torch.ops.turbo.rmsnorm_fwd.default, (x, gamma, r, 1e-5, True))
        rstd = torch.rand(5) + 0.5
        torch.library.opcheck(torch.ops.turbo.rmsnorm_bwd.default, (torch.randn(5, 33), x, gamma, rstd, True))
    xb = x.bfloat16()
    torch.library.opcheck(torch.ops.turbo.rmsnorm_fwd.default, (xb, g, r.bfloat16(), 1e-6, False))
    torch.library.opcheck(torch.ops.turbo.rmsnorm_bwd.default, (xb, xb, g, torch.ones(5), False))
    torch.library.opcheck(torch.ops.turbo.rmsnorm_bwd.default, (xb, xb, g, torch.ones(5), False, xb))
    torch.library.opcheck(torch.ops.turbo.rmsnorm_bwd.default, (x, x, None, torch.ones(5), True, r))


def _float64_rmsnorm(x, g, eps, zero_centered=False):
    y = x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps)
    return y if g is None else y * ((1 + g) if zero_centered else g)


@pytest.mark.parametrize("affine", ["gamma", "zero_centered", "none"])
def test_compile_fullgraph_forward_backward(affine):
    torch.manual_seed(1)
    x = torch.randn(2, 5, 33, requires_grad=True)
    g = torch.randn(33, requires_grad=True) if affine != "none" else None
    zc = affine == "zero_centered"
    fn = torch.compile(lambda a, b: rmsnorm(a, b, 1e-5, zc), fullgraph=True, backend="aot_eager")
    out = fn(x, g)
    out.square().sum().backward()
    x2 = x.detach().double().requires_grad_()
    g2 = g.detach().double().requires_grad_() if g is not None else None
    _float64_rmsnorm(x2, g2, 1e-5, zc).square().sum().backward()
    torch.testing.assert_close(out.double(), _float64_rmsnorm(x2, g2, 1e-5, zc).detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    if g is not None:
        torch.testing.assert_close(g.grad.double(), g2.grad, rtol=1e-4, atol=1e-4)


def test_compile_fullgraph_residual():
    torch.manual_seed(2)
    x = torch.randn(6, 17, requires_grad=True)
    r = torch.randn(6, 17, requires_grad=True)
    g = torch.randn(17, requires_grad=True)
    fn = torch.compile(lambda a, b, c: rmsnorm_residual(a, b, c), fullgraph=True, backend="aot_eager")
    y, s = fn(x, r, g)
    (y.square().sum() + (s * 3).sum()).backward()
    x2, r2, g2 = (t.detach().double().requires_grad_() for t in (x, r, g))
    s2 = x2 + r2
    y2 = _float64_rmsnorm(s2, g2, 1e-6)
    (y2.square().sum() + (s2 * 3).sum()).backward()
    torch.testing.assert_close(y.double(), y2.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s.double(), s2.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g.grad.double(), g2.grad, rtol=1e-4, atol=1e-4)


# -- the module ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_module_matches_torch_nn_rmsnorm(dtype):
    torch.manual_seed(3)
    ref = torch.nn.RMSNorm(45, eps=1e-5, dtype=dtype)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(45))
    ours = RMSNorm(45, eps=1e-5, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 45, dtype=dtype, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y, y2 = ours(x), ref(x2)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(y, y2, rtol=tol, atol=tol)
    grad = torch.randn_like(y)
    y.backward(grad)
    y2.backward(grad)
    torch.testing.assert_close(x.grad, x2.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.weight.grad.float(), ref.weight.grad.float(), rtol=tol, atol=tol * 4)


def test_module_state_dict_round_trips_with_torch_nn_rmsnorm():
    ours = RMSNorm((16,), eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.arange(16.0))
    ref = torch.nn.RMSNorm(16, eps=1e-6)
    ref.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == set(ref.state_dict()) == {"weight"}
    torch.testing.assert_close(ref.weight, ours.weight)
    back = RMSNorm(16)
    back.load_state_dict(ref.state_dict())
    torch.testing.assert_close(back.weight, torch.arange(16.0))
    # No affine: no parameters on either side.
    plain = RMSNorm(16, elementwise_affine=False)
    plain.load_state_dict(torch.nn.RMSNorm(16, elementwise_affine=False).state_dict())
    assert plain.weight is None and not list(plain.parameters())


def test_module_init_repr_and_options():
    m = RMSNorm(8)
    assert m.eps == 1e-6 and m.normalized_shape == (8,) and torch.equal(m.weight, torch.ones(8))
    assert repr(m) == "RMSNorm((8,), eps=1e-06, elementwise_affine=True, zero_centered_gamma=False)"
    zc = RMSNorm(8, zero_centered_gamma=True, dtype=torch.bfloat16)
    assert torch.equal(zc.weight, torch.zeros(8, dtype=torch.bfloat16)) and "zero_centered_gamma=True" in repr(zc)
    x = torch.randn(5, 8, dtype=torch.bfloat16)
    # zero-centred zeros and plain ones give the same result; so does no affine at all.
    torch.testing.assert_close(zc(x), m.to(torch.bfloat16)(x))
    torch.testing.assert_close(RMSNorm(8, elementwise_affine=False)(x), zc(x))
    zc.reset_parameters()
    assert torch.count_nonzero(zc.weight) == 0


def test_module_no_affine_backward_works():
    # Primus-Turbo's RMSNorm(elementwise_affine=False) fails; this one runs forward and backward.
    m = RMSNorm(12, elementwise_affine=False)
    x = torch.randn(4, 12, requires_grad=True)
    m(x).pow(3).sum().backward()
    x2 = x.detach().double().requires_grad_()
    _float64_rmsnorm(x2, None, 1e-6).pow(3).sum().backward()
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)


def test_module_validation():
    for bad in ((3, 4), [], "8", 0, True, (2.0,)):
        with pytest.raises(ValueError, match="^normalized_shape:"):
            RMSNorm(bad)
    with pytest.raises(ValueError, match="^eps: expected a finite float > 0"):
        RMSNorm(8, eps=0.0)
    with pytest.raises(ValueError, match="^x: expected last dim 8"):
        RMSNorm(8)(torch.randn(2, 7))


@pytest.mark.parametrize("affine", [True, False])
def test_module_compiles_fullgraph(affine):
    torch.manual_seed(4)
    m = RMSNorm(24, eps=1e-5, elementwise_affine=affine, zero_centered_gamma=affine)
    if affine:
        with torch.no_grad():
            m.weight.normal_()
    x = torch.randn(3, 24, requires_grad=True)
    out = torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    out.sum().backward()
    x2 = x.detach().double().requires_grad_()
    w = m.weight.detach().double() if affine else None
    want = _float64_rmsnorm(x2, w, 1e-5, zero_centered=True)
    want.sum().backward()
    torch.testing.assert_close(out.double(), want.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    if affine:
        assert m.weight.grad is not None and m.weight.grad.shape == (24,)


def test_compile_dynamic_shapes_and_eps():
    # A second token count recompiles with symbolic shapes; eps may arrive as a traced float.
    fn = torch.compile(lambda a, b, e: rmsnorm(a, b, e), fullgraph=True, backend="aot_eager", dynamic=True)
    for tokens in (3, 7):
        x = torch.randn(2, tokens, 9, requires_grad=True)
        g = torch.randn(9, requires_grad=True)
        eps = 1e-5 * tokens
        out = fn(x, g, eps)
        out.sum().backward()
        x2, g2 = x.detach().double().requires_grad_(), g.detach().double().requires_grad_()
        want = _float64_rmsnorm(x2, g2, eps)
        want.sum().backward()
        torch.testing.assert_close(out.double(), want.detach(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(g.grad.double(), g2.grad, rtol=1e-4, atol=1e-4)
