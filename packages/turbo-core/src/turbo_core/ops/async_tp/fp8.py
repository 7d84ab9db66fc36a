"""Quantize-once FP8 for the all-gather: each rank quantizes its high-precision shard once, before the
exchange, so that FP8 bytes (half of bf16's) travel and no rank quantizes the gathered A again.

* TENSORWISE: one scale for the whole gathered A, so the ranks first agree on its amax: each takes
  the amax of its shard (fp32), one ``all_reduce(MAX)`` of that single value, then each quantizes
  with the shared ``scale = fp8_max / max(amax, 1e-12)``: ``q = clamp(x * scale, ±fp8_max)``
  rounded to nearest even (``quantize_fp8``'s TENSORWISE arithmetic,
  ``turbo_core.low_precision.fp8_scale`` / ``fp8_cast``); the dequantization multiplier is
  ``1 / scale``.
* ROWWISE: each row's scale depends on that row only, so each rank quantizes its rows on its own
  (the ``quantize_fp8`` primitive, ``axis=-1``); the scales ``[*lead, 1]`` are gathered with their rows.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from turbo_core.low_precision import ScalingGranularity, fp8_cast, fp8_scale
from turbo_core.ops.quantization import quantize_fp8

__all__ = ["quantize_shard"]


def quantize_shard(x: torch.Tensor, dtype: torch.dtype, granularity: ScalingGranularity, group
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale_inv)``: ``x`` in ``dtype`` and its dequantization multipliers, a 0-dim fp32 tensor
    (TENSORWISE, the same on every rank of ``group``) or ``[*x.shape[:-1], 1]`` (ROWWISE)."""
    if granularity == ScalingGranularity.ROWWISE:
        return quantize_fp8(x, dtype, granularity, axis=-1)
    x = x.detach()
    amax = x.abs().amax().float().reshape(1) if x.numel() else x.new_zeros(1, dtype=torch.float32)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=group)
    scale = fp8_scale(amax, dtype)
    return fp8_cast(x.float(), scale, dtype), (1.0 / scale).reshape(())
