"""Conformance cases for ``rmsnorm`` / ``rmsnorm_residual`` (forward and backward).

Hidden sizes 1, 33, 127, 1000 (a single element, odd, just under a power of two, and a wide
unaligned row that spans several blocks) times 1, 5 and 64 tokens in fp32/fp16/bf16: the edges
that break row tiling and masked tails. Then zero-centred gamma, the fused residual add (whose
backward adds x_plus_r's gradient inside ``rmsnorm_bwd``: its ``dresidual``), no affine,
a gamma in fp32 under a bf16 input, leading dims, and zero tokens. The expected values are float64
autograd of the formula written here, never a backend's output.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import rmsnorm, rmsnorm_residual
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

HIDDEN = [1, 33, 127, 1000]
TOKENS = [1, 5, 64]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-5


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _expected(x, residual, gamma, zero_centered, eps, dy, ds):
    """float64 values and gradients of ``y = s / sqrt(mean(s^2) + eps) * g`` with ``s = x``, or
    ``s = x + residual`` rounded to x's dtype."""
    x64 = x.double().requires_grad_()
    r64 = residual.double().requires_grad_() if residual is not None else None
    g64 = gamma.double().requires_grad_() if gamma is not None else None
    s64 = x64
    if r64 is not None:
        # The documented semantics: the sum is rounded to x's dtype (it is also an output) and the
        # norm reads that rounded sum; the rounding passes the gradient through unchanged.
        s64 = x64 + r64
        s64 = s64 + (s64.detach().to(x.dtype).double() - s64.detach())
    y64 = s64 / torch.sqrt((s64 * s64).mean(dim=-1, keepdim=True) + eps)
    if g64 is not None:
        y64 = y64 * ((1.0 + g64) if zero_centered else g64)
    loss = (y64 * dy.double()).sum()
    if ds is not None:
        loss = loss + (s64 * ds.double()).sum()
    loss.backward()
    grads = {"x": x64.grad}
    if r64 is not None:
        grads["residual"] = r64.grad
    if g64 is not None:
        grads["gamma"] = g64.grad
    return y64.detach(), s64.detach(), grads


def _run(shape, dtype, *, affine="gamma", residual=False, gamma_dtype=None, eps=EPS, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    hidden = shape[-1]
    gen = torch.Generator().manual_seed(sum(shape) * 131 + hidden + len(shape))
    x = torch.randn(shape, generator=gen).to(dtype)
    r = torch.randn(shape, generator=gen).to(dtype) if residual else None
    zero_centered = affine == "zero_centered"
    gamma = None
    if affine != "none":
        base = 0.0 if zero_centered else 1.0
        gamma = (base + 0.5 * torch.randn(hidden, generator=gen)).to(gamma_dtype or dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    ds = torch.randn(shape, generator=gen).to(dtype) if residual else None
    y64, s64, grads = _expected(x, r, gamma, zero_centered, eps, dy, ds)

    xt = x.to(device).clone().requires_grad_()
    rt = r.to(device).clone().requires_grad_() if residual else None
    gt = gamma.to(device).clone().requires_grad_() if gamma is not None else None
    if residual:
        y, s = rmsnorm_residual(xt, rt, gt, eps, zero_centered)
        assert s.dtype == dtype and s.shape == x.shape, f"x_plus_r: {s.dtype} {tuple(s.shape)}"
        assert_close_to_reference(s.cpu(), s64, dtype=dtype, what="x_plus_r")
        torch.autograd.backward([y, s], [dy.to(device), ds.to(device)])
    else:
        y = rmsnorm(xt, gt, eps, zero_centered)
        y.backward(dy.to(device))
    assert y.dtype == dtype and y.shape == x.shape, f"y: {y.dtype} {tuple(y.shape)}"
    assert_close_to_reference(y.cpu(), y64, dtype=dtype, what="y")
    assert xt.grad.dtype == dtype
    assert_close_to_reference(xt.grad.cpu(), grads["x"], dtype=dtype, what="grad_x")
    if residual:
        assert_close_to_reference(rt.grad.cpu(), grads["residual"], dtype=dtype, what="grad_residual")
    if gamma is not None:
        assert gt.grad.dtype == gamma.dtype and gt.grad.shape == gamma.shape
        assert_close_to_reference(gt.grad.cpu(), grads["gamma"], dtype=dtype, what="grad_gamma")


_PRIMS = ("rmsnorm_fwd", "rmsnorm_bwd")


def _case(label, shape, dtype, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"rmsnorm-{label}-{dims}-{_name(dtype)}", _PRIMS, functools.partial(_run, shape, dtype, **kw))


CASES = (
    [_case("gamma", (t, h), dt) for h, t, dt in itertools.product(HIDDEN, TOKENS, DTYPES)]
    + [_case("zero_centered", (5, h), dt, affine="zero_centered") for h, dt in itertools.product(HIDDEN, DTYPES)]
    + [_case("residual", (t, h), dt, residual=True)
       for (t, h), dt in itertools.product([(5, 1), (5, 33), (64, 127), (5, 1000)], DTYPES)]
    + [_case("residual-zero_centered", (7, 127), dt, residual=True, affine="zero_centered") for dt in DTYPES]
    + [_case("residual-no_affine", (t, h), dt, residual=True, affine="none")
       for (t, h), dt in itertools.product([(3, 1), (64, 127), (5, 1000)], DTYPES)]
    + [_case("no_affine", (t, h), dt, affine="none") for (t, h), dt in itertools.product([(5, 1), (64, 127)], DTYPES)]
    + [_case("fp32_gamma", (5, 127), torch.bfloat16, gamma_dtype=torch.float32),
       _case("fp32_gamma", (5, 33), torch.float16, gamma_dtype=torch.float32, residual=True),
       _case("eps1e-6", (64, 33), torch.float32, eps=1e-6)]
    + [_case("leading_dims", (2, 3, 33), dt) for dt in DTYPES]
    + [_case("zero_tokens", (0, 33), torch.float32), _case("zero_tokens", (0, 33), torch.bfloat16, residual=True)]
)
