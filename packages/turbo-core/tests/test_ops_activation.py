"""``swiglu_with_probs`` / ``geglu_with_probs``: the conformance cases on TORCH, validation messages,
opcheck, torch.compile, shapes, row_mask semantics."""

import pytest
import torch

from turbo_core.dispatch import dispatcher, get_primitive
from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs, glu_primitive
from turbo_core.ops import geglu_with_probs, swiglu_with_probs
from turbo_core.testing.cases.activation import CASES

OPS = {"swiglu": swiglu_with_probs, "geglu": geglu_with_probs}


def _float64(kind, x, probs):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    act = torch.nn.functional.silu(a) if kind == "swiglu" else torch.nn.functional.gelu(a)
    return (act * b).reshape(-1, half) * probs.reshape(-1, 1)


@pytest.mark.parametrize("mutation", ["swap_halves", "tanh_gelu"])
def test_cases_catch_a_wrong_kernel(monkeypatch, mutation):
    # The cases must be able to fail: the up half taken as gate, or GELU's tanh approximation.
    import turbo_core.reference.activation as ref

    if mutation == "swap_halves":
        real = ref._split
        monkeypatch.setattr(ref, "_split", lambda x: real(x)[::-1])
        case_id = "swiglu-probs-5x66-float32"
    else:
        monkeypatch.setattr(ref, "_act", lambda kind, a: torch.nn.functional.gelu(a, approximate="tanh"))
        case_id = "geglu-probs-64x2000-float32"
    case = next(c for c in CASES if c.id == case_id)
    with pytest.raises(AssertionError):
        case.run()


def test_primitives_and_families():
    for kind in ("swiglu", "geglu"):
        for direction in ("fwd", "bwd"):
            prim = get_primitive(f"{kind}_{direction}")
            assert prim.family == "glu" and prim.precision.name == "BF16_FP16_FP32"
            assert glu_primitive(kind, direction) is prim
    with pytest.raises(ValueError, match="^kind:"):
        glu_primitive("reglu", "fwd")


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_autograd_runs_the_two_primitives(kind):
    x = torch.randn(4, 10, requires_grad=True)
    OPS[kind](x, torch.rand(4)).sum().backward()
    calls = {prim for (prim, _backend, _how) in dispatcher.stats()}
    assert {f"{kind}_fwd", f"{kind}_bwd"} <= calls



# The family scope "glu" selects both primitives, from code and from TURBO_GLU_BACKEND.
@pytest.mark.parametrize("layer", ["env", "code"])
def test_family_scope_selects_the_backend(monkeypatch, layer):
    from turbo_core.dispatch.manager import GlobalBackendManager

    if layer == "env":
        monkeypatch.setenv("TURBO_GLU_BACKEND", "TORCH")
    else:
        GlobalBackendManager.set_backend("glu", "TORCH")
    x = torch.randn(4, 8, requires_grad=True)
    swiglu_with_probs(x, torch.rand(4)).sum().backward()
    hows = {(prim, how) for (prim, _backend, how) in dispatcher.stats()}
    assert {("swiglu_fwd", layer), ("swiglu_bwd", layer)} <= hows

@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_validation_names_the_argument(kind):
    op = OPS[kind]
    x, p = torch.randn(5, 8), torch.rand(5)
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor"):
        op([[1.0, 2.0]], p)
    with pytest.raises(TypeError, match="^x: expected dtype in"):
        op(torch.ones(5, 8, dtype=torch.int64), p)
    with pytest.raises(ValueError, match="^x: expected at least a 1-D"):
        op(torch.tensor(1.0), torch.rand(1))
    with pytest.raises(ValueError, match="^x: expected an even last dim"):
        op(torch.randn(5, 7), p)
    with pytest.raises(TypeError, match="^probs: expected a torch.Tensor"):
        op(x, 0.5)
    with pytest.raises(TypeError, match="^probs: expected dtype in \\(float32\\)"):
        op(x, p.bfloat16())
    with pytest.raises(ValueError, match="^probs: expected 5 elements"):
        op(x, torch.rand(4))
    with pytest.raises(ValueError, match="^probs: expected a tensor on cpu"):
        op(x, torch.rand(5, device="meta"))
    with pytest.raises(TypeError, match="^row_mask: expected dtype in \\(int64\\)"):
        op(x, p, torch.ones(5, dtype=torch.int32))
    with pytest.raises(TypeError, match="^row_mask: expected dtype in \\(int64\\)"):
        op(x, p, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="^row_mask: expected a 1-D tensor"):
        op(x, p, torch.ones(5, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^row_mask: expected shape \(5,\)"):
        op(x, p, torch.ones(6, dtype=torch.int64))
    with pytest.raises(TypeError, match="^row_mask: expected a torch.Tensor"):
        op(x, p, [1, 1, 1, 1, 1])


def test_primitive_validation_names_the_argument():
    fwd, bwd = get_primitive("swiglu_fwd"), get_primitive("geglu_bwd")
    x, p = torch.randn(4, 6), torch.rand(4)
    with pytest.raises(ValueError, match="^x: expected a contiguous tensor"):
        fwd.check_args(GluFwdArgs(torch.randn(6, 4).t(), p))
    with pytest.raises(ValueError, match="^x: expected a 2-D tensor"):
        fwd.check_args(GluFwdArgs(torch.randn(1, 4, 6), p))
    with pytest.raises(ValueError, match=r"^probs: expected a 1-D tensor"):
        fwd.check_args(GluFwdArgs(x, p.reshape(4, 1)))
    with pytest.raises(ValueError, match=r"^grad_out: expected shape \(4, 3\)"):
        bwd.check_args(GluBwdArgs(torch.randn(4, 6), x, p))
    with pytest.raises(TypeError, match="^grad_out: expected the dtype of x"):
        bwd.check_args(GluBwdArgs(torch.randn(4, 3).half(), x, p))
    with pytest.raises(ValueError, match=r"^probs: expected shape \(4,\)"):
        bwd.check_args(GluBwdArgs(torch.randn(4, 3), x, torch.rand(3)))


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_shapes_output_is_2d_and_grads_keep_input_shapes(kind):
    x = torch.randn(2, 3, 10, dtype=torch.bfloat16, requires_grad=True)
    p = torch.rand(3, 2, requires_grad=True)  # any shape with T elements
    out = OPS[kind](x, p)
    assert out.shape == (6, 5) and out.dtype == torch.bfloat16
    out.sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == torch.bfloat16
    assert p.grad.shape == p.shape and p.grad.dtype == torch.float32


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_row_mask_rows_are_zero_and_get_no_grad(kind):
    torch.manual_seed(5)
    x = torch.randn(6, 8, requires_grad=True)
    p = torch.rand(6, requires_grad=True)
    mask = torch.tensor([1, 0, 2, 0, 0, 1])  # any non-zero value means active
    out = OPS[kind](x, p, mask)
    assert torch.equal(out[mask == 0], torch.zeros(3, 4))
    torch.testing.assert_close(out[mask != 0], OPS[kind](x.detach()[mask != 0], p.detach()[mask != 0]))
    out.square().sum().backward()
    assert torch.count_nonzero(x.grad[mask == 0]) == 0 and torch.count_nonzero(p.grad[mask == 0]) == 0
    assert torch.count_nonzero(x.grad[mask != 0]) > 0
    all_masked = OPS[kind](x.detach(), p.detach(), torch.zeros(6, dtype=torch.int64))
    assert torch.equal(all_masked, torch.zeros(6, 4))


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_non_contiguous_inputs(kind):
    torch.manual_seed(6)
    x = torch.randn(10, 7).t()  # [7, 10], non-contiguous
    p = torch.rand(14)[::2]
    mask = torch.tensor([1, 0, 1, 1, 0, 1, 1, 0])[:7]
    out = OPS[kind](x, p, mask)
    want = _float64(kind, x.double(), p.double()) * (mask != 0).double()[:, None]
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_zero_half_width():
    x = torch.randn(3, 0, requires_grad=True)
    p = torch.rand(3, requires_grad=True)
    out = swiglu_with_probs(x, p)
    assert out.shape == (3, 0)
    out.sum().backward()
    assert x.grad.shape == (3, 0) and torch.count_nonzero(p.grad) == 0


def test_opcheck_custom_ops():
    torch.manual_seed(7)
    x, p = torch.randn(5, 14), torch.rand(5)
    mask = torch.tensor([1, 0, 1, 1, 0])
    for kind in ("swiglu", "geglu"):
        fwd = getattr(torch.ops.turbo, f"{kind}_fwd").default
        bwd = getattr(torch.ops.turbo, f"{kind}_bwd").default
        for m in (None, mask):
            torch.library.opcheck(fwd, (x, p, m))
            torch.library.opcheck(bwd, (torch.randn(5, 7), x, p, m))
        torch.library.opcheck(fwd, (x.bfloat16(), p, mask))
        torch.library.opcheck(bwd, (torch.randn(5, 7).half(), x.half(), p, None))


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
@pytest.mark.parametrize("masked", [False, True])
def test_compile_fullgraph_forward_backward(kind, masked):
    torch.manual_seed(8)
    x = torch.randn(2, 3, 18, requires_grad=True)
    p = torch.rand(6, 1, requires_grad=True)
    mask = torch.tensor([1, 1, 0, 1, 0, 1]) if masked else None
    op = OPS[kind]
    fn = torch.compile(lambda a, b, m: op(a, b, m), fullgraph=True, backend="aot_eager")
    out = fn(x, p, mask)
    out.square().sum().backward()
    x2, p2 = x.detach().double().requires_grad_(), p.detach().double().requires_grad_()
    want = _float64(kind, x2, p2)
    if masked:
        want = want * (mask != 0).double()[:, None]
    want.square().sum().backward()
    torch.testing.assert_close(out.double(), want.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(p.grad.double(), p2.grad, rtol=1e-4, atol=1e-4)


def test_compile_dynamic_shapes():
    # A second token count recompiles with symbolic shapes (T and H both symbolic).
    fn = torch.compile(lambda a, b, m: geglu_with_probs(a, b, m), fullgraph=True, backend="aot_eager", dynamic=True)
    for tokens, half in ((3, 4), (7, 5)):
        x = torch.randn(tokens, 2 * half, requires_grad=True)
        p = torch.rand(tokens, requires_grad=True)
        mask = (torch.arange(tokens) % 3 != 1).long()
        out = fn(x, p, mask)
        out.sum().backward()
        x2, p2 = x.detach().double().requires_grad_(), p.detach().double().requires_grad_()
        want = _float64("geglu", x2, p2) * (mask != 0).double()[:, None]
        want.sum().backward()
        torch.testing.assert_close(out.double(), want.detach(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(p.grad.double(), p2.grad, rtol=1e-4, atol=1e-4)
