"""Conformance cases for ``swiglu_with_probs`` / ``geglu_with_probs`` (forward and backward).

Half-widths H = 1, 33, 127, 1000 (one element, odd, just under a power of two, wide and unaligned)
times 1, 5 and 64 tokens in fp32/fp16/bf16, for both activations: the edges of column tiling and
of the gate/up split. Then ``row_mask`` with half the rows masked, where the masked rows of x,
probs and grad_out hold NaN (inactive rows must never be read, and must come out as zeros), leading
dims with ``probs [T, 1]``, and zero tokens. The expected values are float64 autograd of the formula
written here (torch's SiLU and exact GELU), computed on the active rows only; never a backend's
output.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import geglu_with_probs, swiglu_with_probs
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

HALF_WIDTHS = [1, 33, 127, 1000]
TOKENS = [1, 5, 64]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
KINDS = ["swiglu", "geglu"]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _act(kind, a):
    if kind == "swiglu":
        return torch.nn.functional.silu(a)
    return torch.nn.functional.gelu(a, approximate="none")


def _expected(kind, x2d, p1d, grad, active):
    """float64 ``out``, ``grad_x`` and ``grad_probs`` over [T, ...], zeros on inactive rows."""
    tokens, width = x2d.shape
    half = width // 2
    xa = x2d[active].double().requires_grad_()
    pa = p1d[active].double().requires_grad_()
    out_a = _act(kind, xa[:, :half]) * xa[:, half:] * pa[:, None]
    (out_a * grad[active].double()).sum().backward()
    out = torch.zeros(tokens, half, dtype=torch.float64)
    grad_x = torch.zeros(tokens, width, dtype=torch.float64)
    grad_p = torch.zeros(tokens, dtype=torch.float64)
    out[active], grad_x[active], grad_p[active] = out_a.detach(), xa.grad, pa.grad
    return out, grad_x, grad_p


def _run(kind, shape, dtype, *, masked=False, probs_2d=False, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    op = swiglu_with_probs if kind == "swiglu" else geglu_with_probs
    width = shape[-1]
    tokens = 1
    for d in shape[:-1]:
        tokens *= d
    gen = torch.Generator().manual_seed(sum(shape) * 7 + width + (kind == "geglu"))
    x = (1.5 * torch.randn(shape, generator=gen)).to(dtype)
    probs = torch.rand(tokens, generator=gen, dtype=torch.float32)
    grad = torch.randn(tokens, width // 2, generator=gen).to(dtype)
    row_mask = None
    active = torch.ones(tokens, dtype=torch.bool)
    if masked:
        row_mask = (torch.rand(tokens, generator=gen) < 0.5).to(torch.int64)
        row_mask[: min(tokens, 2)] = torch.tensor([1, 0])[: min(tokens, 2)]  # at least one of each
        active = row_mask != 0
        x.view(tokens, width)[~active] = float("nan")
        probs[~active] = float("nan")
        grad[~active] = float("nan")
        row_mask = row_mask.to(device)
    out64, gx64, gp64 = _expected(kind, x.reshape(tokens, width), probs, grad, active)

    xt = x.to(device).clone().requires_grad_()
    pt = (probs.reshape(tokens, 1) if probs_2d else probs).to(device).clone().requires_grad_()
    out = op(xt, pt, row_mask)
    assert out.dtype == dtype and out.shape == (tokens, width // 2), f"out: {out.dtype} {tuple(out.shape)}"
    out_host = out.cpu()
    if masked:
        assert torch.equal(out_host[~active], torch.zeros_like(out_host[~active])), "out: inactive rows are not zero"
    assert_close_to_reference(out_host, out64, dtype=dtype, what="out")
    out.backward(grad.to(device))
    assert xt.grad.shape == x.shape and xt.grad.dtype == dtype
    assert pt.grad.shape == pt.shape and pt.grad.dtype == torch.float32
    assert_close_to_reference(xt.grad.cpu().reshape(tokens, width), gx64, dtype=dtype, what="grad_x")
    assert_close_to_reference(pt.grad.cpu().reshape(tokens), gp64, dtype=dtype, what="grad_probs")


def _case(label, kind, shape, dtype, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"{kind}-{label}-{dims}-{_name(dtype)}", (f"{kind}_fwd", f"{kind}_bwd"),
                functools.partial(_run, kind, shape, dtype, **kw))


CASES = (
    [_case("probs", k, (t, 2 * h), dt) for k, h, t, dt in itertools.product(KINDS, HALF_WIDTHS, TOKENS, DTYPES)]
    + [_case("row_mask", k, (t, 2 * h), dt, masked=True)
       for k, (t, h), dt in itertools.product(KINDS, [(64, 33), (5, 127), (64, 1000)], DTYPES)]
    + [_case("leading_dims", k, (2, 3, 2 * 33), dt, probs_2d=True) for k, dt in itertools.product(KINDS, DTYPES)]
    + [_case("zero_tokens", k, (0, 2 * 33), torch.bfloat16) for k in KINDS]
)
