"""``fp8_all_to_all`` / ``FP8AllToAll``: an all-to-all(-v) along dim 0 whose payload travels as
TENSORWISE FP8 with one scale agreed by every rank (Primus-Turbo's ``dist.FP8AllToAll``).

Forward (``fwd_quant``): every rank takes the amax of its input (fp32), the ranks agree on the
largest (one ``all_reduce(MAX)`` of a single value), and each rank quantizes with that shared scale
(``scale = fp8_max / max(amax, 1e-12)``, ``q = clamp(x * scale, ±fp8_max)`` rounded to nearest
even: ``quantize_fp8``'s TENSORWISE arithmetic, ``turbo_core.low_precision.fp8_scale`` /
``fp8_cast``), sends ``q``'s bytes with ``all_to_all_single``, and dequantizes what it
receives with the same ``scale_inv = 1 / scale`` into the input's dtype. Because the scale is
shared, every received row (from any rank) is ``q * scale_inv`` of one tensorwise scale: a consumer
may keep ``q`` and one ``scale_inv`` for the whole output. Backward (``bwd_quant``): the same for
the gradient, all-to-all in the reverse direction; E4M3 for both, or E5M2 for the gradient with
``Format.HYBRID``. Without quantization a pass is a plain ``all_to_all_single``. One rank: the
input comes back unchanged (a copy).

Departure from Primus-Turbo: Primus quantizes with each rank's own scale and then all-reduces
``scale_inv`` with MIN for the dequantization, so the rows of a rank whose amax is not the smallest
come back scaled by the wrong factor. Here the ranks agree *before* quantizing (the largest amax: no
rank's values saturate), so every row dequantizes to its own value within FP8's rounding.

Shapes: ``input_`` ``[N, ...]`` (any float dtype, any trailing dims); ``output_split_sizes`` /
``input_split_sizes`` list the rows received from / sent to each rank (``None``: ``N`` split
equally); the output is ``[sum(output_split_sizes), ...]`` in ``input_``'s dtype.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from turbo_core.low_precision import (
    Float8QuantConfig,
    Format,
    ScalingGranularity,
    ScalingStrategy,
    fp8_cast,
    fp8_scale,
)

__all__ = ["FP8AllToAll", "fp8_all_to_all"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check(group, input_: torch.Tensor, output_split_sizes, input_split_sizes, config: Float8QuantConfig) -> None:
    if group is None:
        raise ValueError("group: expected a torch.distributed process group, got None")
    if not isinstance(input_, torch.Tensor) or input_.dtype not in _FLOATS or input_.dim() < 1:
        what = f"{input_.dtype} tensor of {input_.dim()} dims" if isinstance(input_, torch.Tensor) else type(input_)
        raise ValueError(f"input_: expected a floating-point tensor with a row dim, got {what}")
    if not isinstance(config, Float8QuantConfig):
        raise ValueError(f"config: expected a Float8QuantConfig, got {type(config).__name__}")
    config.validate()
    if config.granularity != ScalingGranularity.TENSORWISE or config.strategy != ScalingStrategy.DYNAMIC:
        raise ValueError(f"config: FP8AllToAll supports TENSORWISE DYNAMIC scaling, got {config.granularity.value} "
                         f"{config.strategy.value}")
    if config.format not in (Format.E4M3, Format.HYBRID):
        raise ValueError(f"config: FP8AllToAll supports the E4M3 and HYBRID formats, got {config.format.value}")
    world = dist.get_world_size(group)
    for name, sizes in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
        if sizes is not None and (len(sizes) != world or any(int(s) < 0 for s in sizes)):
            raise ValueError(f"{name}: expected {world} non-negative row counts (one per rank), got {list(sizes)}")
    if input_split_sizes is not None and sum(int(s) for s in input_split_sizes) != input_.shape[0]:
        raise ValueError(f"input_split_sizes: must sum to input_'s {input_.shape[0]} rows, got "
                         f"{sum(int(s) for s in input_split_sizes)}")
    if input_split_sizes is None and input_.shape[0] % world:
        raise ValueError(f"input_: {input_.shape[0]} rows do not split equally over {world} ranks; pass "
                         "input_split_sizes")


def _exchange(x: torch.Tensor, group, out_rows: int, out_splits, in_splits, quant_dtype: torch.dtype | None):
    """All-to-all ``x`` (rows), FP8-quantized with an agreed scale when ``quant_dtype`` is given."""
    x = x.contiguous()
    out_shape = (out_rows, *x.shape[1:])
    if quant_dtype is None:
        out = x.new_empty(out_shape)
        dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
        return out
    amax = x.detach().abs().amax().float().reshape(1) if x.numel() else x.new_zeros(1, dtype=torch.float32)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=group)
    scale = fp8_scale(amax, quant_dtype)  # quantize_fp8's arithmetic, on the agreed amax
    q = fp8_cast(x.detach().float(), scale, quant_dtype)
    recv = torch.empty(out_shape, dtype=torch.uint8, device=x.device)
    dist.all_to_all_single(recv, q.view(torch.uint8), out_splits, in_splits, group=group)
    return (recv.view(quant_dtype).float() * (1.0 / scale)).to(x.dtype)


def _rows(sizes, n: int) -> int:
    return n if sizes is None else sum(int(s) for s in sizes)


class FP8AllToAll(torch.autograd.Function):
    """``FP8AllToAll.apply(group, input_, output_split_sizes, input_split_sizes, fwd_quant,
    bwd_quant, config)``: Primus-Turbo's signature; see the module docstring."""

    @staticmethod
    def forward(ctx, group, input_, output_split_sizes, input_split_sizes, fwd_quant, bwd_quant, config):
        config = config if config is not None else Float8QuantConfig()
        _check(group, input_, output_split_sizes, input_split_sizes, config)
        world = dist.get_world_size(group)
        ctx.group, ctx.config, ctx.bwd_quant, ctx.world = group, config, bool(bwd_quant), world
        ctx.out_splits = None if output_split_sizes is None else [int(s) for s in output_split_sizes]
        ctx.in_splits = None if input_split_sizes is None else [int(s) for s in input_split_sizes]
        ctx.in_rows = input_.shape[0]
        if world == 1:
            return input_.clone()
        dtype = config.dtype(input_.device, is_fwd_stage=True) if fwd_quant else None
        return _exchange(input_, group, _rows(ctx.out_splits, input_.shape[0]), ctx.out_splits, ctx.in_splits,
                         dtype)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.world == 1:
            return None, grad_output, None, None, None, None, None
        dtype = ctx.config.dtype(grad_output.device, is_fwd_stage=False) if ctx.bwd_quant else None
        grad = _exchange(grad_output, ctx.group, ctx.in_rows, ctx.in_splits, ctx.out_splits, dtype)
        return None, grad, None, None, None, None, None


def fp8_all_to_all(input_: torch.Tensor, group, output_split_sizes: list[int] | None = None,
                   input_split_sizes: list[int] | None = None, *, fwd_quant: bool = True, bwd_quant: bool = True,
                   config: Float8QuantConfig | None = None) -> torch.Tensor:
    """All-to-all of ``input_``'s rows over ``group`` with an FP8 payload (module docstring);
    differentiable. ``config``: TENSORWISE ``Float8QuantConfig`` (default E4M3; HYBRID sends the
    gradient as E5M2)."""
    return FP8AllToAll.apply(group, input_, output_split_sizes, input_split_sizes, fwd_quant, bwd_quant, config)
