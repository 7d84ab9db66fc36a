"""The TRITON SwiGLU/GeGLU kernels directly (CPU interpreter): forward and backward against
float64 math with tiles smaller than the row (several column blocks in the forward grid, several
chunks in the backward walk, ragged tails), row_mask with NaN in the masked rows, NaN/Inf in
active rows, empty shapes, and what the capability check declines."""

import pytest
import torch

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.reference import activation as reference
from turbo_triton.activation.launch import GluConfig, can_handle, glu_bwd, glu_fwd

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
KINDS = ["swiglu", "geglu"]
# 4-row x 32-column tiles: H=100 spans 4 column blocks (the last one ragged), T=13 4 row blocks.
SMALL = GluConfig(block_m=4, block_n=32, num_warps=4)


def _act(kind, a):
    return torch.nn.functional.silu(a) if kind == "swiglu" else torch.nn.functional.gelu(a, approximate="none")


def _expected(kind, x, probs, grad, active):
    """float64 ``out``, ``grad_x``, ``grad_probs`` by autograd on the active rows; zeros elsewhere."""
    half = x.shape[1] // 2
    xa = x[active].double().requires_grad_()
    pa = probs[active].double().requires_grad_()
    out_a = _act(kind, xa[:, :half]) * xa[:, half:] * pa[:, None]
    (out_a * grad[active].double()).sum().backward()
    out = torch.zeros(x.shape[0], half, dtype=torch.float64)
    gx = torch.zeros(x.shape, dtype=torch.float64)
    gp = torch.zeros(x.shape[0], dtype=torch.float64)
    out[active], gx[active], gp[active] = out_a.detach(), xa.grad, pa.grad
    return out, gx, gp


def _close(actual, expected, dtype, what):
    tol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tokens,half,cfg", [(13, 100, SMALL), (5, 1, None), (9, 33, None)])
@pytest.mark.parametrize("masked", [False, True], ids=["all_rows", "row_mask"])
def test_forward_and_backward_against_float64(kind, tokens, half, cfg, dtype, masked):
    torch.manual_seed(tokens + half + masked)
    x = (1.5 * torch.randn(tokens, 2 * half)).to(dtype)
    probs = torch.rand(tokens)
    grad = torch.randn(tokens, half).to(dtype)
    row_mask, active = None, torch.ones(tokens, dtype=torch.bool)
    if masked:
        row_mask = torch.tensor([1, 0] * tokens)[:tokens] * torch.randint(1, 9, (tokens,))  # any non-zero is active
        active = row_mask != 0
        x[~active], probs[~active], grad[~active] = float("nan"), float("nan"), float("nan")
    out64, gx64, gp64 = _expected(kind, x, probs, grad, active)

    out = glu_fwd(kind, GluFwdArgs(x, probs, row_mask), cfg)
    assert out.dtype == dtype and out.shape == (tokens, half)
    _close(out, out64, dtype, "out")
    grad_x, grad_probs = glu_bwd(kind, GluBwdArgs(grad, x, probs, row_mask), cfg)
    assert grad_x.dtype == dtype and grad_probs.dtype == torch.float32
    _close(grad_x, gx64, dtype, "grad_x")
    _close(grad_probs, gp64, dtype, "grad_probs")
    if masked:  # inactive rows: exact zeros, whatever NaN they held
        assert torch.equal(out[~active], torch.zeros_like(out[~active]))
        assert torch.equal(grad_x[~active], torch.zeros_like(grad_x[~active]))
        assert torch.equal(grad_probs[~active], torch.zeros_like(grad_probs[~active]))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the interpreter's numpy sees inf * 0
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("kind", KINDS)
def test_nan_and_inf_propagate_like_the_reference(kind):
    x = torch.randn(6, 2 * 40)
    x[0, 3] = float("nan")      # gate
    x[1, 45] = float("nan")     # up
    x[2, 5] = float("inf")
    x[3, 6] = -float("inf")
    x[4, 7] = -100.0            # exp overflows in fp32: the limit, not NaN
    probs = torch.rand(6)
    grad = torch.randn(6, 40)
    fwd, bwd = GluFwdArgs(x, probs), GluBwdArgs(grad, x, probs)
    out = glu_fwd(kind, fwd, SMALL)
    torch.testing.assert_close(out, getattr(reference, f"{kind}_fwd")(fwd), rtol=1e-4, atol=1e-4, equal_nan=True)
    gx, gp = glu_bwd(kind, bwd, SMALL)
    gx_ref, gp_ref = getattr(reference, f"{kind}_bwd")(bwd)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(gp, gp_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert torch.isfinite(out[5]).all() and torch.isfinite(gx[5]).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tokens,half", [(0, 33), (4, 0)])
def test_empty(kind, tokens, half):
    x = torch.randn(tokens, 2 * half).bfloat16()
    probs = torch.rand(tokens)
    out = glu_fwd(kind, GluFwdArgs(x, probs))
    assert out.shape == (tokens, half)
    gx, gp = glu_bwd(kind, GluBwdArgs(torch.randn(tokens, half).bfloat16(), x, probs))
    assert gx.shape == x.shape and torch.equal(gp, torch.zeros(tokens))


def test_declines_with_reasons(monkeypatch):
    x = torch.randn(4, 8)
    probs = torch.rand(4)
    assert can_handle(GluFwdArgs(x, probs)) is None
    assert "float64" in can_handle(GluFwdArgs(x.double(), probs))
    assert "contiguous row_mask" in can_handle(GluFwdArgs(x, probs, torch.ones(8, dtype=torch.int64)[::2]))
    assert "contiguous grad_out" in can_handle(GluBwdArgs(torch.randn(4, 4).t(), x, probs))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(GluFwdArgs(x, probs))
