"""``rmsnorm_fwd_fp8`` on Triton: RMSNorm and the FP8 quantization of its output in one pass over x.

Rows are normalized on the tile ``rmsnorm_fwd`` uses (``normalization.launch.pick``), so ``y`` and
``rstd`` have that kernel's bits, and ``q`` / ``scale_inv`` the bits of ``quantize_fp8`` of that
``y``. The kernel keeps whole rows in one tile; it declines rows that ``rmsnorm_fwd`` walks in
chunks (wider than ``FWD_WHOLE_ROW_MAX``), BLOCKWISE blocks that are not a power of two or wider
than the tile, and MX rows whose padded width exceeds the tile (rows under 64 elements): the
dispatcher's next backend (TORCH's composition) serves those.
"""

from __future__ import annotations

import torch
import triton.language as tl

from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args, rmsnorm_fwd_fp8_shapes
from turbo_core.low_precision import E8M0_DTYPE, MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.normalization import launch as norm
from turbo_triton.normalization.launch import RowConfig

__all__ = ["can_handle", "rmsnorm_fwd_fp8"]

G = ScalingGranularity
_GRAN = {G.ROWWISE: 0, G.BLOCKWISE: 1, G.MX_BLOCKWISE: 2}
_TL = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


def can_handle(args: RmsNormFwdFp8Args) -> str | None:
    from turbo_triton.quantization import common

    reason = norm.can_handle(args.norm_args()) or common.device_reason(args.x, args.out_dtype)
    if reason:
        return reason
    hidden = args.x.shape[1]
    width = next_power_of_2(hidden)
    if width > norm.FWD_WHOLE_ROW_MAX:
        return (f"TRITON rmsnorm_fwd_fp8 keeps whole rows in one tile: rows of {hidden} (> "
                f"{norm.FWD_WHOLE_ROW_MAX}) are walked in chunks by rmsnorm_fwd")
    gran = G(args.granularity)
    if gran == G.BLOCKWISE:
        bs = args.block_size
        if bs & (bs - 1) or bs > width:
            return (f"TRITON rmsnorm_fwd_fp8 needs a power-of-two block_size within the row tile ({width}), "
                    f"got {bs}")
    if gran == G.MX_BLOCKWISE and rmsnorm_fwd_fp8_shapes(args)[0][1] > width:
        return f"TRITON rmsnorm_fwd_fp8: rows of {hidden} pad to 128 for MX, past the row tile of {width}"
    return None


def rmsnorm_fwd_fp8(args: RmsNormFwdFp8Args, config: RowConfig | None = None):
    """``(q, scale_inv, y or None, rstd, x_plus_r or None)``; ``config`` overrides the tile (tests:
    it must be the one ``rmsnorm_fwd`` uses for ``y`` to have its bits)."""
    from turbo_triton.normalization import fp8_kernels
    from turbo_triton.quantization import common

    x, gamma, residual, dtype = args.x, args.gamma, args.residual, args.out_dtype
    gran = G(args.granularity)
    tokens, hidden = x.shape
    interp = _runtime.interpreting()
    q_shape, s_shape = rmsnorm_fwd_fp8_shapes(args)
    q = torch.empty(q_shape, dtype=dtype, device=x.device)
    scale = torch.empty(s_shape, dtype=E8M0_DTYPE if gran == G.MX_BLOCKWISE else torch.float32, device=x.device)
    y = torch.empty_like(x) if args.store_y else None
    rstd = torch.empty(tokens, dtype=torch.float32, device=x.device)
    s = torch.empty_like(x) if residual is not None else None
    if tokens == 0:
        return q, scale, y, rstd, s
    cfg = config or norm.pick(hidden, False, _runtime.interpreter_tiles())
    group = {G.ROWWISE: cfg.block_n, G.BLOCKWISE: args.block_size, G.MX_BLOCKWISE: MXFP8_BLOCK_SIZE}[gran]
    fmt = common.fmt_constexprs(dtype)
    fast_kernel(fp8_kernels.rmsnorm_fwd_fp8_kernel)[(cdiv(tokens, cfg.block_m),)](
        x, residual if residual is not None else x, gamma if gamma is not None else x, y if y is not None else x,
        s if s is not None else x, rstd, common.data_arg(q),
        scale.view(torch.uint8) if gran == G.MX_BLOCKWISE else scale, tokens, hidden, q_shape[1], s_shape[1],
        float(args.eps), common.eps(),
        HAS_RESIDUAL=residual is not None, HAS_GAMMA=gamma is not None, ZERO_CENTERED=bool(args.zero_centered),
        ROUND_BF16=interp and x.dtype == torch.bfloat16, STORE_Y=y is not None, Y_DTYPE=_TL[x.dtype],
        GRAN=_GRAN[gran], GS=group, **fmt, **common.hw_sat(),
        EMAX=common.mx_emax_of(dtype) if gran == G.MX_BLOCKWISE else 0,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    return q, scale, y, rstd, s
