"""``rmsnorm_fp8``: RMSNorm whose output is the FP8 operand of the GEMM after it, with autograd.

The forward is the ``rmsnorm_fwd_fp8`` primitive (RMSNorm and the row-wise FP8 quantization of its
output in one pass over x) and, with ``with_trans``, a ``quantize_fp8`` of the stored ``y`` for the
column copy that the following GEMM's wgrad needs. The result is a :class:`QuantizedTensor` (or a
:class:`QuantizedTensorPair`) that ``gemm_fp8`` and ``Float8Linear`` take as ``a`` without
quantizing it again. The backward is ``rmsnorm_bwd`` of the gradient the GEMM returns for ``a``.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import normalization as norm_launch
from turbo_core.dispatch.launch import normalization_fp8 as launch
from turbo_core.dispatch.launch import quantization as quant_launch
from turbo_core.dispatch.specs.normalization_fp8 import RMSNORM_FWD_FP8, RmsNormFwdFp8Args
from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_bool, require_nonempty_last_dim, require_tensor
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity, fp8_dtype_for
from turbo_core.ops.gemm_fp8 import fp8_config
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["rmsnorm_fp8"]

G = ScalingGranularity


def _wrap(q: torch.Tensor, s: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype, gran: G,
          block_size: int | None) -> QuantizedTensor:
    return QuantizedTensor(q, s, shape=shape, orig_dtype=dtype, granularity=gran, block_size=block_size,
                           quantized_axis=-1)


class _RmsNormFp8Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps, zero_centered, out_dtype, gran, block_size, with_trans):
        q, s, y, rstd, _ = launch.rmsnorm_fwd_fp8(x, gamma, out_dtype=out_dtype, granularity=gran,
                                                  block_size=block_size, eps=eps, zero_centered=zero_centered,
                                                  store_y=with_trans)
        data = _wrap(q, s, tuple(x.shape), x.dtype, gran, block_size)
        ctx.save_for_backward(x, gamma, rstd)
        ctx.zero_centered = zero_centered
        if not with_trans:
            return data
        # The column copy: y quantized along T, as the GEMM's wgrad contracts; stored [H, T] (K-major).
        qt, st = quant_launch.quantize_fp8(y.t(), out_dtype, gran, axis=-1, block_size=block_size)
        data_t = _wrap(qt, st, (x.shape[1], x.shape[0]), x.dtype, gran, block_size)
        ctx.mark_non_differentiable(data_t)
        return data, data_t

    @staticmethod
    def backward(ctx, grad_y, *_grad_t):
        x, gamma, rstd = ctx.saved_tensors
        if isinstance(grad_y, QuantizedTensor):
            # torch.compile traces this backward with a gradient shaped like the output, a QuantizedTensor;
            # its values in x's dtype are the gradient. Eager calls get the GEMM's plain dgrad.
            grad_y = grad_y.dequantize(x.dtype)
        dx, dgamma = norm_launch.rmsnorm_bwd(grad_y.contiguous(), x, gamma, rstd, zero_centered=ctx.zero_centered)
        return dx, (dgamma if ctx.needs_input_grad[1] else None), None, None, None, None, None, None


def rmsnorm_fp8(x: torch.Tensor, gamma: torch.Tensor | None, eps: float = 1e-6, zero_centered: bool = False, *,
                config: Float8QuantConfig, with_trans: bool = False) -> QuantizedTensor | QuantizedTensorPair:
    """RMSNorm of ``x`` over its last dim, returned quantized to FP8 for the GEMM that follows.

    Args:
        x: ``[..., H]``, fp16/bf16/fp32; leading dims are flattened to ``[T, H]`` (a non-contiguous x
            is copied).
        gamma, eps, zero_centered: as in :func:`turbo_core.ops.rmsnorm`.
        config: the recipe of the following ``gemm_fp8`` / ``Float8Linear`` (its granularity,
            block size and format; the E4M3 or E5M2 dtype of the forward, for x's device). ROWWISE,
            BLOCKWISE and MX_BLOCKWISE: scales within a row, so the norm's pass computes them.
        with_trans: also return the column copy (``y`` quantized along T, stored ``[H, T]``), which
            the following GEMM's wgrad needs in training: pass ``True`` when that GEMM's weight
            gets a gradient.

    Returns:
        A :class:`QuantizedTensor` of logical shape ``[T, H]`` and x's dtype, quantized along H
        (``quantize_fp8(rmsnorm(x), axis=-1)``; the norm's ``rstd`` may differ from a separate
        ``rmsnorm`` call in its last bit, see ``RmsNormFwdFp8Args``), or with
        ``with_trans`` a :class:`QuantizedTensorPair` whose ``data_t`` ``[H, T]`` is
        ``quantize_fp8(rmsnorm(x).t(), axis=-1)``. ``gemm_fp8(result, W, trans_b=True,
        config=config)`` computes what ``gemm_fp8(rmsnorm(x), W, ...)`` computes. The result
        carries the norm's autograd: the gradient the GEMM returns for it goes through
        ``rmsnorm_bwd`` to x and gamma (``data_t`` takes no gradient).

    Raises:
        TypeError / ValueError naming the argument: as :func:`turbo_core.ops.rmsnorm`, ``config``
        (and a TENSORWISE one, whose scale needs the whole output), ``with_trans``.
    """
    config = fp8_config(config)
    require_bool("with_trans", with_trans)
    require_tensor("x", x, dtypes=FLOAT_DTYPES)
    if x.dim() == 0:
        raise ValueError("x: expected at least a 1-D tensor (normalized over its last dim), got a scalar")
    require_nonempty_last_dim("x", x)
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    if isinstance(gamma, torch.Tensor) and gamma.dim() == 1:
        gamma = gamma.contiguous()
    gran = config.granularity
    out_dtype = fp8_dtype_for(config.format, x.device, True)
    RMSNORM_FWD_FP8.check_args(RmsNormFwdFp8Args(x2d, gamma, out_dtype, gran, config.block_size, eps, zero_centered))
    out = _RmsNormFp8Function.apply(x2d, gamma, float(eps), zero_centered, out_dtype, gran, config.block_size,
                                    with_trans)
    return QuantizedTensorPair(*out) if with_trans else out
