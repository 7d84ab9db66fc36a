"""Ops called on inputs that need no gradient skip their autograd ``Function`` (``ops._autograd``):
the same result bit for bit as the recorded call, no graph node, and the recorded call still
differentiates."""

from __future__ import annotations

import pytest
import torch

from turbo_core.ops import flash_attn_func, gemm, grouped_gemm, rmsnorm, rmsnorm_residual, swiglu_with_probs


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _cases():
    g = _gen()
    x = torch.randn(12, 16, generator=g)
    w = torch.randn(8, 16, generator=g)
    gamma = torch.randn(16, generator=g)
    res = torch.randn(12, 16, generator=g)
    glu = torch.randn(12, 32, generator=g)
    probs = torch.rand(12, generator=g)
    q, k, v = (torch.randn(2, 6, 2, 8, generator=g) for _ in range(3))
    lens = torch.tensor([5, 0, 7])
    gw = torch.randn(3, 8, 16, generator=g)
    return {
        "gemm": (lambda a, b: gemm(a, b, trans_b=True), (x, w)),
        "rmsnorm": (lambda a, b: rmsnorm(a, b), (x, gamma)),
        "rmsnorm_residual": (lambda a, b, c: torch.cat(rmsnorm_residual(a, b, c)), (x, res, gamma)),
        "swiglu_with_probs": (swiglu_with_probs, (glu, probs)),
        "flash_attn_func": (lambda a, b, c: flash_attn_func(a, b, c, causal=True), (q, k, v)),
        "grouped_gemm": (lambda a, b: grouped_gemm(a, b, lens, trans_b=True), (x, gw)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_no_grad_calls_skip_the_function_and_compute_the_same(name):
    fn, inputs = _cases()[name]
    plain = fn(*inputs)
    assert plain.grad_fn is None
    with torch.no_grad():
        assert torch.equal(fn(*[t.clone().requires_grad_() for t in inputs]), plain)
    leaves = [t.clone().requires_grad_() for t in inputs]
    recorded = fn(*leaves)
    assert recorded.grad_fn is not None
    assert torch.equal(recorded.detach(), plain)
    recorded.square().sum().backward()
    assert all(t.grad is not None for t in leaves[:1])
