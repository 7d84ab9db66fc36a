"""``swiglu_fwd_fp8`` / ``geglu_fwd_fp8`` on Triton: the GLU and the FP8 quantization of its output in
one pass over x.

``y`` has ``glu_fwd``'s bits (the same elementwise arithmetic; no reduction is involved, so the tile
does not matter), and ``q`` / ``scale_inv`` the bits of ``quantize_fp8`` of that ``y``. BLOCKWISE and
MX tiles hold whole scale blocks and may split a row across programs; ROWWISE keeps whole rows in one
tile, so the kernel declines ROWWISE rows wider than ``WHOLE_ROW_MAX`` and BLOCKWISE blocks that are
not a power of two or wider than that: the dispatcher's next backend (TORCH's composition) serves
those. No host sync: the row mask is read by the kernel, every output element is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl

from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args, glu_fwd_fp8_shapes
from turbo_core.low_precision import E8M0_DTYPE, MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_triton import _runtime
from turbo_triton.activation import launch as glu
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel

__all__ = ["WHOLE_ROW_MAX", "GluFp8Config", "can_handle", "geglu_fwd_fp8", "glu_fwd_fp8", "pick", "swiglu_fwd_fp8"]

G = ScalingGranularity
_GRAN = {G.ROWWISE: 0, G.BLOCKWISE: 1, G.MX_BLOCKWISE: 2}
_TL = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}

#: Widest ROWWISE row (elements, a power of two) and widest BLOCKWISE block kept in one tile.
WHOLE_ROW_MAX = 32768


@dataclass(frozen=True)
class GluFp8Config:
    """One program's tile: ``block_m`` rows x ``block_n`` columns of the output (a power of two, a
    multiple of the scale group; ROWWISE: at least the row)."""

    block_m: int
    block_n: int
    num_warps: int


def _group(gran: G, block_size: int | None, row_tile: int) -> int:
    return {G.ROWWISE: row_tile, G.BLOCKWISE: block_size, G.MX_BLOCKWISE: MXFP8_BLOCK_SIZE}[gran]


def pick(half: int, gran: G, block_size: int | None, interp: bool) -> GluFp8Config:
    """Tile heuristic for a half width of ``half`` elements: ``glu_fwd``'s tile (about 4096 elements
    a program on a GPU, 16 a thread at 8 warps), widened to a whole row for ROWWISE and to a whole
    block for BLOCKWISE blocks wider than it; rows of 8192 and more take 16 warps (about 16-32
    elements of each operand a thread, as ``rmsnorm_fwd``'s whole-row tiles)."""
    base = glu.pick(half, False, interp)
    width = next_power_of_2(max(1, half))
    block_n = width if gran == G.ROWWISE else max(base.block_n, _group(gran, block_size, 0))
    if block_n <= base.block_n:
        return GluFp8Config(base.block_m, base.block_n, base.num_warps)
    if interp:
        return GluFp8Config(max(1, min(64, 8192 // block_n)), block_n, 4)
    block_m = max(1, 4096 // block_n)
    return GluFp8Config(block_m, block_n, 16 if block_n >= 8192 else 8)


def _check_config(cfg: GluFp8Config, gran: G, block_size: int | None, half: int) -> None:
    group = {G.ROWWISE: next_power_of_2(half), G.BLOCKWISE: block_size, G.MX_BLOCKWISE: MXFP8_BLOCK_SIZE}[gran]
    n = cfg.block_n
    if n & (n - 1) or n < group or n % group:
        raise ValueError(f"config.block_n: expected a power of two holding whole {gran.value} groups of {group}, "
                         f"got {n}")


def can_handle(args: GluFwdFp8Args) -> str | None:
    from turbo_triton.quantization import common

    reason = glu.can_handle(args.glu_args()) or common.device_reason(args.x, args.out_dtype)
    if reason:
        return reason
    half = args.x.shape[1] // 2
    gran = G(args.granularity)
    if gran == G.ROWWISE and next_power_of_2(half) > WHOLE_ROW_MAX:
        return (f"TRITON glu_fwd_fp8 keeps ROWWISE rows whole in one tile: rows of {half} (> {WHOLE_ROW_MAX}) "
                f"need the amax of a row before its first element is quantized")
    if gran == G.BLOCKWISE:
        bs = args.block_size
        if bs & (bs - 1) or bs > WHOLE_ROW_MAX:
            return f"TRITON glu_fwd_fp8 needs a power-of-two block_size up to {WHOLE_ROW_MAX}, got {bs}"
    return None


def glu_fwd_fp8(kind: str, args: GluFwdFp8Args, config: GluFp8Config | None = None):
    """``(q, scale_inv, y or None)``; ``kind`` is ``"swiglu"`` or ``"geglu"``; ``config`` overrides
    the tile (tests)."""
    from turbo_triton.activation import fp8_kernels
    from turbo_triton.quantization import common

    x, dtype = args.x, args.out_dtype
    gran = G(args.granularity)
    tokens, half = x.shape[0], x.shape[1] // 2
    q_shape, s_shape = glu_fwd_fp8_shapes(args)
    q = torch.empty(q_shape, dtype=dtype, device=x.device)
    scale = torch.empty(s_shape, dtype=E8M0_DTYPE if gran == G.MX_BLOCKWISE else torch.float32, device=x.device)
    y = torch.empty((tokens, half), dtype=x.dtype, device=x.device) if args.store_y else None
    if tokens == 0:
        return q, scale, y
    if half == 0:  # no data; scales of empty (zero) groups where the layout has any (ROWWISE: [T, 1])
        common.fill_zero_block(scale, dtype)
        return q, scale, y
    interp = _runtime.interpreting()
    cfg = config or pick(half, gran, args.block_size, _runtime.interpreter_tiles())
    if config is not None:
        _check_config(config, gran, args.block_size, half)
    mask = args.row_mask if args.row_mask is not None else args.probs
    grid = (cdiv(tokens, cfg.block_m), cdiv(q_shape[1], cfg.block_n))
    fast_kernel(fp8_kernels.glu_fwd_fp8_kernel)[grid](
        x, args.probs, mask, y if y is not None else x, common.data_arg(q),
        scale.view(torch.uint8) if gran == G.MX_BLOCKWISE else scale, tokens, half, q_shape[1], s_shape[1],
        common.eps(),
        GELU=kind == "geglu", HAS_MASK=args.row_mask is not None, ROUND_BF16=interp and x.dtype == torch.bfloat16,
        STORE_Y=y is not None, Y_DTYPE=_TL[x.dtype], GRAN=_GRAN[gran], GS=_group(gran, args.block_size, cfg.block_n),
        **common.fmt_constexprs(dtype), **common.hw_sat(),
        EMAX=common.mx_emax_of(dtype) if gran == G.MX_BLOCKWISE else 0,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    return q, scale, y


def swiglu_fwd_fp8(args: GluFwdFp8Args):
    return glu_fwd_fp8("swiglu", args)


def geglu_fwd_fp8(args: GluFwdFp8Args):
    return glu_fwd_fp8("geglu", args)
