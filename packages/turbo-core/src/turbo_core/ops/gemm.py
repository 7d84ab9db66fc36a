"""``gemm``: dense GEMM with autograd (forward, dgrad and wgrad are three ``gemm`` primitives)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import gemm as launch
from turbo_core.dispatch.specs.gemm import GEMM, GemmArgs
from turbo_core.ops._autograd import grad_needed
from turbo_core.ops._grad_accum import check_pattern, dummy_grad

__all__ = ["gemm"]


class _GemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, trans_a, trans_b, out_dtype, fused_accum):
        ctx.save_for_backward(a, b)
        ctx.trans_a, ctx.trans_b, ctx.fused_accum = trans_a, trans_b, fused_accum
        return launch.gemm(a, b, trans_a=trans_a, trans_b=trans_b, out_dtype=out_dtype)

    @staticmethod
    def backward(ctx, grad_c):
        a, b = ctx.saved_tensors
        ta, tb = ctx.trans_a, ctx.trans_b
        grad_c = grad_c.contiguous()
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            # dgrad: dA = dC @ op(B)^T, written as A's layout ([K, M] when trans_a).
            grad_a = launch.gemm(grad_c, b, trans_a=False, trans_b=not tb, out_dtype=a.dtype, trans_c=ta)
        if ctx.fused_accum:
            # wgrad straight into main_grad (beta=1), in B's layout.
            launch.gemm(a, grad_c, trans_a=not ta, trans_b=False, trans_c=tb, out=b.main_grad)
            grad_b = dummy_grad(b)
        elif ctx.needs_input_grad[1]:
            # wgrad: dB = op(A)^T @ dC, written as B's layout ([N, K] when trans_b).
            grad_b = launch.gemm(a, grad_c, trans_a=not ta, trans_b=False, out_dtype=b.dtype, trans_c=tb)
        return grad_a, grad_b, None, None, None, None


def gemm(a: torch.Tensor, b: torch.Tensor, trans_a: bool = False, trans_b: bool = False,
         out_dtype: torch.dtype | None = None, fuse_bgrad_accum_pattern: str | None = None) -> torch.Tensor:
    """``C = op(A) @ op(B)`` with autograd.

    Args:
        a: ``[M, K]``, or ``[K, M]`` when ``trans_a``; fp16, bf16 or fp32.
        b: ``[K, N]``, or ``[N, K]`` when ``trans_b`` (a Linear weight ``[out, in]`` is NT); a's dtype.
        out_dtype: the result dtype (fp16/bf16/fp32); ``None`` means ``a.dtype``.
        fuse_bgrad_accum_pattern: ``None`` or ``"megatron"`` (accumulate b's gradient into
            ``b.main_grad``; see ``turbo_core.ops._grad_accum``).

    Returns:
        ``[M, N]`` in ``out_dtype``. Products are accumulated in fp32 (or wider) and rounded once.
        The backward computes ``dA = dC @ op(B)^T`` and ``dB = op(A)^T @ dC`` as two more ``gemm``
        primitives, each in the layout of its input, with a's / b's dtype.
    """
    if (torch.compiler.is_compiling() or fuse_bgrad_accum_pattern is not None
            or not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor))):
        # Eagerly the dispatcher validates these very arguments (its verdict cached per signature)
        # before any kernel runs; here the check runs where errors must come first: at trace time,
        # before the Megatron pattern marks b, and before autograd reads non-tensors.
        GEMM.check_args(GemmArgs(a, b, trans_a, trans_b, out_dtype))
    fused = check_pattern(fuse_bgrad_accum_pattern, b)
    if fused:
        b.grad_added_to_main_grad = True
    elif not grad_needed(a, b):
        return launch.gemm(a, b, trans_a=trans_a, trans_b=trans_b, out_dtype=out_dtype)
    return _GemmFunction.apply(a, b, trans_a, trans_b, out_dtype, fused)
