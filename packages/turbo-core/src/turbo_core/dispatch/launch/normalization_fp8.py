"""``turbo::rmsnorm_fwd_fp8`` custom op and its launcher.

The custom op returns a list whose length follows from the arguments (never from data):
``[q, scale_inv, rstd]``, then ``y`` when ``store_y``, then ``x_plus_r`` with a residual. The
launcher turns it back into the primitive's 5-tuple. The granularity crosses the custom-op
boundary as its string value.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args, rmsnorm_fwd_fp8_shapes
from turbo_core.low_precision import E8M0_DTYPE, ScalingGranularity, as_granularity

__all__ = ["rmsnorm_fwd_fp8"]

G = ScalingGranularity
T = torch.Tensor


def _args(x, gamma, residual, eps, zero_centered, out_dtype, granularity, block_size, store_y) -> RmsNormFwdFp8Args:
    return RmsNormFwdFp8Args(x, gamma, out_dtype, G(granularity), block_size, eps, zero_centered, residual, store_y)


@torch.library.custom_op("turbo::rmsnorm_fwd_fp8", mutates_args=())
def _rmsnorm_fwd_fp8_op(x: T, gamma: T | None, residual: T | None, eps: float, zero_centered: bool,
                        out_dtype: torch.dtype, granularity: str, block_size: int | None,
                        store_y: bool) -> list[T]:
    q, s, y, rstd, x_plus_r = call("rmsnorm_fwd_fp8", _args(x, gamma, residual, eps, zero_centered, out_dtype,
                                                             granularity, block_size, store_y))
    return [q, s, rstd] + ([y] if store_y else []) + ([x_plus_r] if residual is not None else [])


@_rmsnorm_fwd_fp8_op.register_fake
def _rmsnorm_fwd_fp8_fake(x, gamma, residual, eps, zero_centered, out_dtype, granularity, block_size, store_y):
    args = _args(x, gamma, residual, eps, zero_centered, out_dtype, granularity, block_size, store_y)
    q_shape, s_shape = rmsnorm_fwd_fp8_shapes(args)
    s_dtype = E8M0_DTYPE if G(granularity) == G.MX_BLOCKWISE else torch.float32
    outs = [x.new_empty(q_shape, dtype=out_dtype), x.new_empty(s_shape, dtype=s_dtype),
            x.new_empty((x.shape[0],), dtype=torch.float32)]
    if store_y:
        outs.append(torch.empty_like(x))
    if residual is not None:
        outs.append(torch.empty_like(x))
    return outs


def rmsnorm_fwd_fp8(x: T, gamma: T | None, *, out_dtype: torch.dtype, granularity: G, block_size: int | None = None,
                    eps: float, zero_centered: bool = False, residual: T | None = None,
                    store_y: bool = False) -> tuple[T, T, T | None, T, T | None]:
    """Run ``rmsnorm_fwd_fp8`` (see :class:`RmsNormFwdFp8Args`): ``(q, scale_inv, y, rstd, x_plus_r)``."""
    if torch.compiler.is_compiling():
        gran = granularity.value if isinstance(granularity, G) else str(granularity)
        outs = torch.ops.turbo.rmsnorm_fwd_fp8(x, gamma, residual, eps, zero_centered, out_dtype, gran, block_size,
                                               store_y)
        y = outs[3] if store_y else None
        x_plus_r = outs[-1] if residual is not None else None
        return outs[0], outs[1], y, outs[2], x_plus_r
    return call("rmsnorm_fwd_fp8", RmsNormFwdFp8Args(x, gamma, out_dtype, as_granularity(granularity), block_size, eps,
                                                     zero_centered, residual, store_y))
