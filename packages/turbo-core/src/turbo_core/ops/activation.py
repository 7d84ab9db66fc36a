"""``swiglu_with_probs`` and ``geglu_with_probs``: gated activations weighted per token, with
autograd (``<kind>_fwd`` + ``<kind>_bwd`` primitives)."""

from __future__ import annotations

import math

import torch

from turbo_core.dispatch.launch import activation as launch
from turbo_core.dispatch.specs.activation import GluFwdArgs, glu_primitive
from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_even_last_dim, require_tensor
from turbo_core.ops._autograd import grad_needed

__all__ = ["geglu_with_probs", "swiglu_with_probs"]


class _GluFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, probs, row_mask, kind):
        ctx.save_for_backward(x, probs, row_mask)
        ctx.kind = kind
        return launch.glu_fwd(kind, x, probs, row_mask)

    @staticmethod
    def backward(ctx, grad_out):
        x, probs, row_mask = ctx.saved_tensors
        grad_x, grad_probs = launch.glu_bwd(ctx.kind, grad_out.contiguous(), x, probs, row_mask)
        return grad_x, (grad_probs if ctx.needs_input_grad[1] else None), None, None


def _glu(kind: str, x: object, probs: object, row_mask: object) -> torch.Tensor:
    require_tensor("x", x, dtypes=FLOAT_DTYPES)
    if x.dim() == 0:
        raise ValueError("x: expected at least a 1-D tensor [..., 2H], got a scalar")
    require_even_last_dim("x", x)
    width = x.shape[-1]
    # (reshape cannot infer -1 when the last dim is 0)
    x2d = (x.reshape(-1, width) if width else x.reshape(math.prod(x.shape[:-1]), 0)).contiguous()
    tokens = x2d.shape[0]
    require_tensor("probs", probs, dtypes=(torch.float32,))
    if probs.numel() != tokens:
        raise ValueError(
            f"probs: expected {tokens} elements (one per token of x {tuple(x.shape)} flattened to"
            f" [{tokens}, {width}]), got shape {tuple(probs.shape)}"
        )
    p1d = probs.reshape(-1).contiguous()
    if isinstance(row_mask, torch.Tensor) and row_mask.dim() == 1:
        row_mask = row_mask.contiguous()
    if torch.compiler.is_compiling() or not (row_mask is None or isinstance(row_mask, torch.Tensor)):
        # Eagerly the dispatcher validates these very arguments before any kernel runs (its verdict
        # cached per signature); at trace time the check runs here.
        glu_primitive(kind, "fwd").check_args(GluFwdArgs(x2d, p1d, row_mask))
    if not grad_needed(x2d, p1d):
        return launch.glu_fwd(kind, x2d, p1d, row_mask)
    return _GluFunction.apply(x2d, p1d, row_mask, kind)


def swiglu_with_probs(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``out[t] = silu(x[t, :H]) * x[t, H:] * probs[t]`` for the active rows, zeros elsewhere.

    Args:
        x: ``[..., 2H]``, fp16/bf16/fp32, flattened to ``[T, 2H]``. The FIRST half of the last dim
            is the gate (SiLU is applied to it), the second half is "up".
        probs: fp32, ``T`` elements in any shape (e.g. ``[T]`` or ``[T, 1]``): the routing weight of
            each token.
        row_mask: ``None`` or int64 ``[T]``; rows where it is 0 are inactive: never read, zeros in
            the output, zero ``grad_x`` rows and zero ``grad_probs``.

    Returns:
        ``out``, 2-D ``[T, H]`` in x's dtype (not reshaped back, as Primus-Turbo). Activation and
        products in fp32 (or wider), rounded once. The backward (``swiglu_bwd``) gives ``grad_x``
        in x's shape and dtype and ``grad_probs`` in probs' shape, fp32 (accumulated over H in fp32).
    """
    return _glu("swiglu", x, probs, row_mask)


def geglu_with_probs(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``out[t] = gelu(x[t, :H]) * x[t, H:] * probs[t]`` with the exact (erf) GELU.

    Arguments, result and backward (``geglu_bwd``) as :func:`swiglu_with_probs`, with
    ``gelu(a) = 0.5 * a * (1 + erf(a / sqrt(2)))``.
    """
    return _glu("geglu", x, probs, row_mask)
