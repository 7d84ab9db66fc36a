"""``swiglu_with_probs_fp8`` / ``geglu_with_probs_fp8``: the gated activation whose output is the FP8
operand of the GEMM after it (an MLP's or an expert's down projection), with autograd.

The forward is the ``<kind>_fwd_fp8`` primitive (the activation and the row-wise FP8 quantization of
its output in one pass over x) and, with ``with_trans``, a ``quantize_fp8`` of the stored ``y`` for
the column copy that the following GEMM's wgrad needs. The result is a :class:`QuantizedTensor` (or a
:class:`QuantizedTensorPair`) that ``gemm_fp8``, ``Float8Linear`` and (ROWWISE) ``grouped_gemm_fp8``
take as ``a`` without quantizing it again. The backward is ``<kind>_bwd`` of the gradient the GEMM
returns for ``a``.
"""

from __future__ import annotations

import math

import torch

from turbo_core.dispatch.launch import activation as glu_launch
from turbo_core.dispatch.launch import activation_fp8 as launch
from turbo_core.dispatch.launch import quantization as quant_launch
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args, glu_fp8_primitive
from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_bool, require_even_last_dim, require_tensor
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity, fp8_dtype_for
from turbo_core.ops.gemm_fp8 import fp8_config
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["geglu_with_probs_fp8", "swiglu_with_probs_fp8"]

G = ScalingGranularity


def _wrap(q: torch.Tensor, s: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype, gran: G,
          block_size: int | None) -> QuantizedTensor:
    return QuantizedTensor(q, s, shape=shape, orig_dtype=dtype, granularity=gran, block_size=block_size,
                           quantized_axis=-1)


class _GluFp8Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, probs, row_mask, kind, out_dtype, gran, block_size, with_trans):
        q, s, y = launch.glu_fwd_fp8(kind, x, probs, row_mask, out_dtype=out_dtype, granularity=gran,
                                     block_size=block_size, store_y=with_trans)
        shape = (x.shape[0], x.shape[1] // 2)
        data = _wrap(q, s, shape, x.dtype, gran, block_size)
        ctx.save_for_backward(x, probs, row_mask)
        ctx.kind = kind
        if not with_trans:
            return data
        # The column copy: y quantized along T, as the GEMM's wgrad contracts; stored [H, T] (K-major).
        qt, st = quant_launch.quantize_fp8(y.t(), out_dtype, gran, axis=-1, block_size=block_size)
        data_t = _wrap(qt, st, (shape[1], shape[0]), x.dtype, gran, block_size)
        ctx.mark_non_differentiable(data_t)
        return data, data_t

    @staticmethod
    def backward(ctx, grad_y, *_grad_t):
        x, probs, row_mask = ctx.saved_tensors
        if isinstance(grad_y, QuantizedTensor):
            # torch.compile traces this backward with a gradient shaped like the output, a QuantizedTensor;
            # its values in x's dtype are the gradient. Eager calls get the GEMM's plain dgrad.
            grad_y = grad_y.dequantize(x.dtype)
        grad_x, grad_probs = glu_launch.glu_bwd(ctx.kind, grad_y.contiguous(), x, probs, row_mask)
        return grad_x, (grad_probs if ctx.needs_input_grad[1] else None), None, None, None, None, None, None


def _glu_fp8(kind: str, x: object, probs: object, row_mask: object, config: object,
             with_trans: object) -> QuantizedTensor | QuantizedTensorPair:
    config = fp8_config(config)
    require_bool("with_trans", with_trans)
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
    gran = config.granularity
    out_dtype = fp8_dtype_for(config.format, x.device, True)
    glu_fp8_primitive(kind).check_args(GluFwdFp8Args(x2d, p1d, out_dtype, gran, config.block_size, row_mask))
    out = _GluFp8Function.apply(x2d, p1d, row_mask, kind, out_dtype, gran, config.block_size, with_trans)
    return QuantizedTensorPair(*out) if with_trans else out


def swiglu_with_probs_fp8(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None = None, *,
                          config: Float8QuantConfig, with_trans: bool = False) -> QuantizedTensor | QuantizedTensorPair:
    """``swiglu_with_probs(x, probs, row_mask)``, returned quantized to FP8 for the GEMM that follows.

    Args:
        x: ``[..., 2H]``, fp16/bf16/fp32, flattened to ``[T, 2H]`` (a non-contiguous x is copied); the
            FIRST half of the last dim is the gate (SiLU is applied to it), the second half "up".
        probs: fp32, ``T`` elements in any shape: the weight of each token (ones for a dense MLP).
        row_mask: ``None`` or int64 ``[T]``; inactive rows (0) are never read and come out as zero
            rows (zero data, the all-zero block's scale), with zero gradients.
        config: the recipe of the following ``gemm_fp8`` / ``Float8Linear`` / ``grouped_gemm_fp8``
            (its granularity, block size and format; the E4M3 or E5M2 dtype of the forward, for x's
            device). ROWWISE, BLOCKWISE and MX_BLOCKWISE: scales within a row, so the activation's
            pass computes them. TENSORWISE is declined: its one scale needs the whole output's amax
            before any element can be quantized, which one pass cannot have.
        with_trans: also return the column copy (``y`` quantized along T, stored ``[H, T]``), which
            the following GEMM's wgrad needs in training: pass ``True`` when that GEMM's weight
            gets a gradient.

    Returns:
        A :class:`QuantizedTensor` of logical shape ``[T, H]`` and x's dtype, quantized along H:
        ``quantize_fp8(swiglu_with_probs(x, probs, row_mask), axis=-1)`` bit for bit (the activation
        in fp32, rounded once to x's dtype, then quantized; see ``GluFwdFp8Args``). With
        ``with_trans``, a :class:`QuantizedTensorPair` whose ``data_t`` ``[H, T]`` is
        ``quantize_fp8(y.t(), axis=-1)``. ``gemm_fp8(result, W, trans_b=True, config=config)``
        computes what ``gemm_fp8(swiglu_with_probs(x, probs), W, ...)`` computes, bit for bit.
        The result carries the activation's autograd: the gradient the GEMM returns for it goes
        through ``swiglu_bwd`` to x (x's shape and dtype) and probs (fp32, probs' shape);
        ``data_t`` takes no gradient.

    Raises:
        TypeError / ValueError naming the argument: as :func:`turbo_core.ops.swiglu_with_probs`,
        ``config`` (a TENSORWISE one included), ``with_trans``.
    """
    return _glu_fp8("swiglu", x, probs, row_mask, config, with_trans)


def geglu_with_probs_fp8(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None = None, *,
                         config: Float8QuantConfig, with_trans: bool = False) -> QuantizedTensor | QuantizedTensorPair:
    """``geglu_with_probs(x, probs, row_mask)`` (exact erf GELU), returned quantized to FP8: arguments,
    result, numerics and backward (``geglu_bwd``) as :func:`swiglu_with_probs_fp8`."""
    return _glu_fp8("geglu", x, probs, row_mask, config, with_trans)
