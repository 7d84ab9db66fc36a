"""``turbo::swiglu_fwd_fp8`` / ``turbo::geglu_fwd_fp8`` custom ops and their launcher ``glu_fwd_fp8``.

Each custom op returns a list whose length follows from the arguments (never from data):
``[q, scale_inv]``, then ``y`` when ``store_y``. The launcher turns it back into the primitive's
3-tuple. The granularity crosses the custom-op boundary as its string value.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args, glu_fp8_primitive, glu_fwd_fp8_shapes
from turbo_core.low_precision import E8M0_DTYPE, ScalingGranularity, as_granularity

__all__ = ["glu_fwd_fp8"]

G = ScalingGranularity
T = torch.Tensor


def _args(x, probs, row_mask, out_dtype, granularity, block_size, store_y) -> GluFwdFp8Args:
    return GluFwdFp8Args(x, probs, out_dtype, G(granularity), block_size, row_mask, store_y)


def _outs(q: T, s: T, y: T | None, store_y: bool) -> list[T]:
    return [q, s, y] if store_y else [q, s]


@torch.library.custom_op("turbo::swiglu_fwd_fp8", mutates_args=())
def _swiglu_fwd_fp8_op(x: T, probs: T, row_mask: T | None, out_dtype: torch.dtype, granularity: str,
                       block_size: int | None, store_y: bool) -> list[T]:
    q, s, y = call("swiglu_fwd_fp8", _args(x, probs, row_mask, out_dtype, granularity, block_size, store_y))
    return _outs(q, s, y, store_y)


@torch.library.custom_op("turbo::geglu_fwd_fp8", mutates_args=())
def _geglu_fwd_fp8_op(x: T, probs: T, row_mask: T | None, out_dtype: torch.dtype, granularity: str,
                      block_size: int | None, store_y: bool) -> list[T]:
    q, s, y = call("geglu_fwd_fp8", _args(x, probs, row_mask, out_dtype, granularity, block_size, store_y))
    return _outs(q, s, y, store_y)


def _fake(x, probs, row_mask, out_dtype, granularity, block_size, store_y):
    args = _args(x, probs, row_mask, out_dtype, granularity, block_size, store_y)
    q_shape, s_shape = glu_fwd_fp8_shapes(args)
    s_dtype = E8M0_DTYPE if G(granularity) == G.MX_BLOCKWISE else torch.float32
    outs = [x.new_empty(q_shape, dtype=out_dtype), x.new_empty(s_shape, dtype=s_dtype)]
    if store_y:
        outs.append(x.new_empty((x.shape[0], x.shape[1] // 2)))
    return outs


for _op in (_swiglu_fwd_fp8_op, _geglu_fwd_fp8_op):
    _op.register_fake(_fake)


def glu_fwd_fp8(kind: str, x: T, probs: T, row_mask: T | None = None, *, out_dtype: torch.dtype, granularity: G,
                block_size: int | None = None, store_y: bool = False) -> tuple[T, T, T | None]:
    """Run ``<kind>_fwd_fp8`` (``kind``: ``"swiglu"``/``"geglu"``; see :class:`GluFwdFp8Args`):
    ``(q, scale_inv, y or None)``."""
    name = glu_fp8_primitive(kind).name
    if torch.compiler.is_compiling():
        gran = granularity.value if isinstance(granularity, G) else str(granularity)
        outs = getattr(torch.ops.turbo, name)(x, probs, row_mask, out_dtype, gran, block_size, store_y)
        return outs[0], outs[1], (outs[2] if store_y else None)
    return call(name, GluFwdFp8Args(x, probs, out_dtype, as_granularity(granularity), block_size, row_mask, store_y))
