"""Conformance cases for ``gemm`` (forward, dgrad, wgrad, fused wgrad accumulation).

Odd, unaligned sizes (67x45x93, M=1, N=1, K=1), every layout and dtype: the sizes that break tile
edge handling, and the layouts the Linear forward/backward uses.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import gemm
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

SHAPES = [(67, 45, 93), (1, 33, 17), (29, 1, 64), (16, 24, 1), (128, 96, 80)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = [(False, False), (False, True), (True, False)]  # NN, NT, TN


def _operands(m, n, k, ta, tb, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(dtype)
    b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(dtype)
    return a, b


def _run(m, n, k, ta, tb, dtype, fused, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    a, b = _operands(m, n, k, ta, tb, dtype, seed=m * 7919 + n * 31 + k)
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    c64 = (a64.t() if ta else a64) @ (b64.t() if tb else b64)
    grad = torch.randn(c64.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    c64.backward(grad.double())

    a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
    if fused:
        b.main_grad = torch.ones(b.shape, dtype=torch.float32, device=device)
    c = gemm(a, b, ta, tb, fuse_bgrad_accum_pattern="megatron" if fused else None)
    assert c.dtype == dtype and c.shape == c64.shape
    assert_close_to_reference(c.cpu(), c64, dtype=dtype, what="out")
    c.backward(grad.to(device))
    assert_close_to_reference(a.grad.cpu(), a64.grad, dtype=dtype, what="grad_a")
    if fused:
        assert b.grad_added_to_main_grad is True
        assert_close_to_reference(b.main_grad.cpu(), b64.grad + 1.0, dtype=dtype, what="main_grad")
    else:
        assert_close_to_reference(b.grad.cpu(), b64.grad, dtype=dtype, what="grad_b")


CASES = [
    Case(f"gemm-{m}x{n}x{k}-{'T' if ta else 'N'}{'T' if tb else 'N'}-{str(dt)[6:]}", ("gemm",),
         functools.partial(_run, m, n, k, ta, tb, dt, False))
    for (m, n, k), (ta, tb), dt in itertools.product(SHAPES, LAYOUTS, DTYPES)
] + [
    Case(f"gemm-fused-wgrad-{'T' if ta else 'N'}{'T' if tb else 'N'}-{str(dt)[6:]}", ("gemm",),
         functools.partial(_run, 37, 21, 53, ta, tb, dt, True))
    for (ta, tb), dt in itertools.product(LAYOUTS, [torch.float32, torch.bfloat16])
]
