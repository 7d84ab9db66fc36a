"""Conformance cases for ``grouped_gemm`` (forward, dgrad, variable-K wgrad, fused wgrad accumulation).

The reference answer is float64 math done for each group on its own slice (no masking, no
variable-K primitive). Group lengths include 0 (an empty group, first, middle or last), 1, 5 and
17 rows (tile edges), G in {1, 3, 4}, odd K and N (and N=1, K=1), both layouts of b, every dtype,
an over-allocated M (the tail rows must come out zero, and get a zero dgrad), and the Megatron
fused-wgrad path.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import grouped_gemm
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

#: group lengths by G: empty groups at the start, middle and end; 1, 5 and 17 rows.
GROUP_LENS = {1: (17,), 3: (5, 0, 17), 4: (0, 1, 17, 5)}
KN = [(45, 33), (1, 19), (23, 1)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def reference_grouped_gemm(a64: torch.Tensor, b64: torch.Tensor, lens: tuple[int, ...], trans_b: bool) -> torch.Tensor:
    """float64 ``[M_total, N]``: each group's slice times its own matrix, zero tail (differentiable)."""
    n = b64.shape[1] if trans_b else b64.shape[2]
    pieces, start = [], 0
    for g, length in enumerate(lens):
        w = b64[g].t() if trans_b else b64[g]
        pieces.append(a64[start:start + length] @ w)
        start += length
    pieces.append(a64.new_zeros((a64.shape[0] - start, n)))
    return torch.cat(pieces)


def reference_grouped_gemm_variable_k(a: torch.Tensor, b: torch.Tensor, lens, trans_c: bool = False) -> torch.Tensor:
    """float64 ``[G, K, N]`` (``[G, N, K]`` with ``trans_c``) of the variable-K (wgrad) GEMM: group g's
    rows of ``a`` ``[M, K]``, transposed, times the same rows of ``b`` ``[M, N]``; a zero matrix for an
    empty group. Rows past ``sum(lens)`` take no part."""
    a64, b64 = a.double(), b.double()
    k, n = a64.shape[1], b64.shape[1]
    mats, start = [], 0
    for length in lens:
        c = a64[start:start + length].t() @ b64[start:start + length]
        mats.append(c.t() if trans_c else c)
        start += length
    if not mats:
        return a64.new_zeros((0, n, k) if trans_c else (0, k, n))
    return torch.stack(mats)


def _run(lens, k, n, trans_b, dtype, tail, fused, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    g = len(lens)
    m = sum(lens) + tail
    gen = torch.Generator().manual_seed(1000 * g + 10 * k + n + tail)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(*((g, n, k) if trans_b else (g, k, n)), generator=gen).to(dtype)
    grad = torch.randn(m, n, generator=gen).to(dtype)
    group_lens = torch.tensor(lens, dtype=torch.int64, device=device)

    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    c64 = reference_grouped_gemm(a64, b64, lens, trans_b)
    c64.backward(grad.double())

    a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
    if fused:
        b.main_grad = torch.ones(b.shape, dtype=torch.float32, device=device)
    c = grouped_gemm(a, b, group_lens, trans_b=trans_b, fuse_bgrad_accum_pattern="megatron" if fused else None)
    assert c.dtype == dtype and c.shape == (m, n), f"out: {c.dtype} {tuple(c.shape)}"
    c_host = c.cpu()
    assert_close_to_reference(c_host, c64, dtype=dtype, what="out")
    if tail:
        assert torch.count_nonzero(c_host[m - tail:]) == 0, "out: the rows past sum(group_lens) must be zero"
    c.backward(grad.to(device))
    assert a.grad.dtype == dtype and a.grad.shape == a.shape
    grad_a = a.grad.cpu()
    assert_close_to_reference(grad_a, a64.grad, dtype=dtype, what="grad_a")
    if tail:
        assert torch.count_nonzero(grad_a[m - tail:]) == 0, "grad_a: the rows past sum(group_lens) must be zero"
    if fused:
        assert b.grad_added_to_main_grad is True
        assert_close_to_reference(b.main_grad.cpu(), b64.grad + 1.0, dtype=dtype, what="main_grad")
    else:
        assert b.grad.dtype == dtype and b.grad.shape == b.shape
        assert_close_to_reference(b.grad.cpu(), b64.grad, dtype=dtype, what="grad_b")


def _id(lens, k, n, trans_b, dtype, tail=0, fused=False) -> str:
    kind = "grouped_gemm-fused-wgrad" if fused else "grouped_gemm"
    tail_s = f"-tail{tail}" if tail else ""
    return f"{kind}-G{len(lens)}-K{k}-N{n}-{'NT' if trans_b else 'NN'}{tail_s}-{str(dtype)[6:]}"


_PRIMS = ("grouped_gemm", "grouped_gemm_variable_k")

CASES = [
    Case(_id(GROUP_LENS[g], k, n, tb, dt), _PRIMS, functools.partial(_run, GROUP_LENS[g], k, n, tb, dt, 0, False))
    for g, (k, n), tb, dt in itertools.product(GROUP_LENS, KN, (False, True), DTYPES)
] + [
    Case(_id(GROUP_LENS[3], 45, 33, tb, dt, tail=7), _PRIMS,
         functools.partial(_run, GROUP_LENS[3], 45, 33, tb, dt, 7, False))
    for tb, dt in itertools.product((False, True), DTYPES)
] + [
    Case(_id(GROUP_LENS[4], 37, 21, tb, dt, fused=True), _PRIMS,
         functools.partial(_run, GROUP_LENS[4], 37, 21, tb, dt, 0, True))
    for tb, dt in itertools.product((False, True), (torch.float32, torch.bfloat16))
]
