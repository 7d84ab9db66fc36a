"""``rmsnorm_fwd`` / ``rmsnorm_bwd`` on Triton: capability check, tile heuristics and launchers.

No host syncs: shapes decide everything (grid, tiles, whether a row is walked in chunks). The
dgamma partials (``[programs, H]`` fp32) are reduced with one ``torch.sum`` on the device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: Longest row (elements, power of two) kept whole in registers; longer rows are walked in chunks.
FWD_WHOLE_ROW_MAX = 32768
BWD_WHOLE_ROW_MAX = 16384


@dataclass(frozen=True)
class RowConfig:
    """Tile of one program: ``block_m`` rows x ``block_n`` columns (``block_n < H``: the row is
    walked in chunks; the forward then takes one row a program, the backward ``block_m`` rows a
    step). ``programs_per_sm`` sizes the persistent backward grid; ``stages`` (whole-row backward
    only) is the software-pipelining depth of its row loop (1: none). ``chunks`` > 1 (backward only,
    2..4, ``block_n * chunks >= H``): the split kernel, rows walked twice in ``chunks`` unrolled
    chunks with the dgamma partial in registers (``stages`` applies to its row loop too)."""

    block_m: int
    block_n: int
    num_warps: int
    programs_per_sm: int = 2
    stages: int = 1
    chunks: int = 1


def _warps(elements: int, lo: int = 1, hi: int = 16) -> int:
    """About 16 elements per thread (two 16-byte vectors of bf16)."""
    return max(lo, min(hi, next_power_of_2(max(1, elements // 512))))


@functools.lru_cache(maxsize=256)
def pick(hidden: int, backward: bool, interp: bool) -> RowConfig:
    """Tile heuristic for rows of ``hidden`` elements.

    From 4096 up, the configurations tuned on sm90 at 16384 tokens, bf16 (the ``norm`` suite measures
    them): the forward keeps rows whole to 32768 (8 warps, 16 at 32768); the backward keeps them whole
    to 16384 with a 1-2 programs a SM persistent grid and walks longer rows in 4-row x 2048 chunks. At
    4096 and 8192 wide the backward's row loop is software-pipelined 3 deep, which brings it closer to
    the copy bandwidth; at 16384 that costs (two rows of 32 KB a stage). At 16384 the backward takes the
    split kernel (2 unrolled chunks of 8192, 16 warps, one program a SM, row loop pipelined 2 deep),
    because the whole-row tile spills there.

    Cached per ``(hidden, backward, interp)``: the answer is a function of them, and a launch asks
    for it every call.
    """
    width = next_power_of_2(hidden)
    if interp:  # few, large programs: the interpreter's cost is per program and per op
        return RowConfig(max(1, min(64, 16384 // width)), width, 4, 1)
    limit = BWD_WHOLE_ROW_MAX if backward else FWD_WHOLE_ROW_MAX
    if width > limit:
        return RowConfig(4, 2048, 8, 4) if backward else RowConfig(1, 4096, 16, 2)
    if width < 4096:
        block_m = max(1, 2048 // width)
        warps = _warps(block_m * width, lo=4)
        return RowConfig(block_m, width, warps, max(1, 32 // warps))
    if backward:
        return {4096: RowConfig(2, 4096, 16, 1, 3), 8192: RowConfig(1, 8192, 16, 1, 3),
                16384: RowConfig(1, 8192, 16, 1, 2, chunks=2)}.get(width, RowConfig(1, width, 8, 2))
    warps = 16 if width >= 32768 else 8
    return RowConfig(1, width, warps, max(1, 32 // warps))


def _tensors_reason(named: dict[str, torch.Tensor | None]) -> str | None:
    for name, t in named.items():
        if t is None:
            continue
        if t.dtype not in _DTYPES:
            return f"TRITON rmsnorm serves fp16/bf16/fp32 {name}, not {t.dtype}"
        if not t.is_contiguous():
            return f"TRITON rmsnorm needs a contiguous {name}"
    return None


def can_handle(args: RmsNormFwdArgs | RmsNormBwdArgs) -> str | None:
    reason = _runtime.device_reason(args.x)
    if reason:
        return reason
    if isinstance(args, RmsNormFwdArgs):
        named = {"x": args.x, "gamma": args.gamma, "residual": args.residual}
    else:
        named = {"x": args.x, "dy": args.dy, "gamma": args.gamma, "rstd": args.rstd, "dresidual": args.dresidual}
    return _tensors_reason(named)


def _sms(t: torch.Tensor) -> int:
    if _runtime.interpreting():
        return 4
    return _runtime.num_sms(t.device.index if t.device.index is not None else torch.cuda.current_device())


def rmsnorm_fwd(args: RmsNormFwdArgs, config: RowConfig | None = None):
    """``(y, rstd, x_plus_r or None)``; ``config`` overrides the tile heuristic (tests, tuning)."""
    from turbo_triton.normalization import kernels

    x, gamma, residual = args.x, args.gamma, args.residual
    tokens, hidden = x.shape
    interp = _runtime.interpreting()
    y = torch.empty_like(x)
    rstd = torch.empty(tokens, dtype=torch.float32, device=x.device)
    s = torch.empty_like(x) if residual is not None else None
    if tokens == 0:
        return y, rstd, s
    cfg = config or pick(hidden, False, _runtime.interpreter_tiles())
    flags = dict(HAS_RESIDUAL=residual is not None, HAS_GAMMA=gamma is not None,
                 ZERO_CENTERED=bool(args.zero_centered), ROUND_BF16=interp and x.dtype == torch.bfloat16)
    ptrs = (x, residual if residual is not None else x, gamma if gamma is not None else x, y,
            s if s is not None else x, rstd, tokens, hidden, float(args.eps))
    if cfg.block_n >= hidden:
        fast_kernel(kernels.rmsnorm_fwd_kernel)[(cdiv(tokens, cfg.block_m),)](
            *ptrs, **flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    else:
        fast_kernel(kernels.rmsnorm_fwd_chunked_kernel)[(tokens,)](
            *ptrs, **flags, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    return y, rstd, s


def rmsnorm_bwd(args: RmsNormBwdArgs, config: RowConfig | None = None):
    """``(dx, dgamma or None)``; dgamma from per-program fp32 partials summed on the device. With
    ``args.dresidual``, ``dx`` includes it (read in the same pass, added in fp32, rounded once)."""
    from turbo_triton.normalization import kernels

    dy, x, gamma, rstd, dres = args.dy, args.x, args.gamma, args.rstd, args.dresidual
    tokens, hidden = x.shape
    interp = _runtime.interpreting()
    dx = torch.empty_like(x)
    if tokens == 0:
        return dx, (torch.zeros_like(gamma) if gamma is not None else None)
    cfg = config or pick(hidden, True, _runtime.interpreter_tiles())
    split = cfg.chunks > 1
    if split and not (2 <= cfg.chunks <= 4 and cfg.block_n * cfg.chunks >= hidden):
        raise ValueError(f"split backward tile {cfg} does not cover rows of {hidden}")
    chunked = cfg.block_n < hidden and not split
    blocks = cdiv(tokens, cfg.block_m)
    programs = max(1, min(blocks, _sms(x) * cfg.programs_per_sm))
    partials = (torch.empty((programs, hidden), dtype=torch.float32, device=x.device)
                if gamma is not None else rstd)
    flags = dict(HAS_GAMMA=gamma is not None, ZERO_CENTERED=bool(args.zero_centered),
                 ROUND_BF16=interp and x.dtype == torch.bfloat16, HAS_DRES=dres is not None)
    ptrs = (dy, x, gamma if gamma is not None else x, rstd, dx, dres if dres is not None else x, partials, tokens,
            hidden, programs)
    if split:
        fast_kernel(kernels.rmsnorm_bwd_split_kernel)[(programs,)](
            *ptrs, **flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CHUNKS=cfg.chunks, STAGES=cfg.stages,
            num_warps=cfg.num_warps)
    elif chunked:
        fast_kernel(kernels.rmsnorm_bwd_chunked_kernel)[(programs,)](
            *ptrs, **flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    else:
        fast_kernel(kernels.rmsnorm_bwd_kernel)[(programs,)](
            *ptrs, **flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, STAGES=cfg.stages, num_warps=cfg.num_warps)
    if gamma is None:
        return dx, None
    return dx, partials.sum(dim=0).to(gamma.dtype)
