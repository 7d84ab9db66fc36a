"""What the quantization launchers share: FP8 format constants, 3-D views, tile heuristic,
capability checks. Imported by the launchers on first use, never by the plugin module."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.low_precision import QUANT_EPS, fp8_max, mx_emax
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2

__all__ = ["Tile", "around_axis", "block_size_reason", "check_tile", "data_arg", "device_reason", "eps", "x_arg",
           "amax_iters", "fill_zero_block", "flat_rows", "fmt_constexprs", "grid", "hw_sat", "mx_emax_of",
           "pick", "pick_amax_cast", "pick_mx", "recipe_reason", "soft", "view3"]

_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")
#: (mantissa bits, exponent bias) of each FP8 dtype.
_LAYOUT = {
    torch.float8_e4m3fn: (3, 7),
    torch.float8_e5m2: (2, 15),
    torch.float8_e4m3fnuz: (3, 8),
    torch.float8_e5m2fnuz: (2, 16),
}
#: Largest BLOCKWISE block edge: 1-D blocks (``1 x bs`` along a dim) and square ``bs x bs`` tiles
#: (one tile a program: 128 x 128 fp32 values already fill the registers of 16 warps).
MAX_BLOCK_1D = 1024
MAX_BLOCK_2D = 128


@dataclass(frozen=True)
class Tile:
    """``block_m x block_n`` elements a program (powers of two, multiples of the scale group)."""

    block_m: int
    block_n: int
    num_warps: int = 4
    #: Two-pass amax (``amax_kernel``): tiles a program walks down M (0: ``amax_iters`` decides).
    iters: int = 0


def soft() -> bool:
    """Software FP8/bf16 rounding: under the CPU interpreter, whose own casts are not exact."""
    return _runtime.interpreting()


def fmt_constexprs(dtype: torch.dtype) -> dict:
    """The format constexprs of ``turbo_triton.quantization.numerics`` for an FP8 dtype."""
    mb, bias = _LAYOUT[dtype]
    return dict(FMAX=fp8_max(dtype), MB=mb, BIAS=bias, FNUZ=dtype in _FNUZ, SOFT=soft())


def hw_sat() -> dict:
    """``HW_SAT`` of ``numerics.to_fp8``: True on NVIDIA GPUs, whose FP8 conversion saturates
    (``satfinite``) exactly as the reference's clamp; the clamp stays under the interpreter and
    on ROCm."""
    return dict(HW_SAT=not soft() and torch.version.hip is None)


def mx_emax_of(dtype: torch.dtype) -> int:
    return mx_emax(dtype)


def data_arg(t: torch.Tensor) -> torch.Tensor:
    """FP8 data as the kernels take it: raw bytes under the interpreter (software rounding)."""
    return t.view(torch.uint8) if soft() else t


def x_arg(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``(tensor, X_BITS)``: high-precision input as the kernels take it (bf16 as int16 bits
    under the interpreter, see ``numerics.load_f32``)."""
    bits = soft() and t.dtype == torch.bfloat16
    return (t.view(torch.int16) if bits else t), bits


def eps() -> float:
    return QUANT_EPS


def fill_zero_block(s: torch.Tensor, dtype: torch.dtype) -> None:
    """Fill ``s`` with the ``scale_inv`` of an all-zero (or empty) group, computed by the
    reference's own fp32 operations (on the device: no host sync)."""
    if s.numel():
        amax = torch.full((), QUANT_EPS, dtype=torch.float32, device=s.device)
        s.copy_((amax.reciprocal() * fp8_max(dtype)).reciprocal().expand(s.shape))


def view3(t: torch.Tensor, b: int, m: int, n: int) -> torch.Tensor:
    """``t`` as ``[b, m, n]`` (its elements in logical order): a strided view when the strides
    allow, else a contiguous copy."""
    try:
        return t.view(b, m, n)
    except RuntimeError:
        return t.contiguous().view(b, m, n)


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def around_axis(shape: tuple[int, ...], ax: int) -> tuple[tuple[int, int, int], bool]:
    """``([B, M, N], along_n)``: the 3-D shape that puts dim ``ax`` on N when it is the last dim
    (``[1, prod(before), size]``) and on M otherwise (``[prod(before), size, prod(after)]``)."""
    if ax == len(shape) - 1:
        return (1, _prod(shape[:-1]), shape[-1]), True
    return (_prod(shape[:ax]), shape[ax], _prod(shape[ax + 1:])), False


def _warps(elements: int, gm: int) -> int:
    """Warps a program. Groups along the contiguous dim only (``gm == 1``): about 32 elements a
    thread. Groups spanning rows (column-direction, 2-D, both directions at once): 4 warps, faster
    than 8 or 16 on 8192-16384-element tiles on sm90, while row-direction tiles of 8192 run best at 8
    (the ``quant`` suite measures them)."""
    if gm == 1:
        return max(2, min(16, elements // 1024))
    return 4


def pick(m: int, n: int, gm: int, gn: int, *, cap_n: int = 1024, target: int = 8192,
         warps: int | None = None) -> Tile:
    """Tile heuristic over ``[M, N]`` with ``gm x gn`` scale groups: about ``target`` elements a
    program on GPUs (16384 under the interpreter, whose cost is per program), ``block_n`` up to
    ``cap_n`` (or the group width) along the contiguous dim; ``warps`` overrides ``_warps``."""
    target = 16384 if _runtime.interpreter_tiles() else target
    bn = max(gn, min(next_power_of_2(max(n, 1)), cap_n, max(1, target // gm)))
    bm = max(gm, min(next_power_of_2(max(m, 1)), max(1, target // bn)))
    return Tile(bm, bn, warps or _warps(bm * bn, gm))


def pick_amax_cast(b: int, m: int, n: int, red_m: bool, red_n: bool) -> tuple[Tile, Tile]:
    """``(amax tile, cast tile)`` of the two-pass path. The amax pass reads rows of up to 1024
    elements (8192 a step, 16384 for TENSORWISE, 8 warps) and walks down M; the cast of a column
    reduction takes 32 x 256 tiles (256 scales loaded a program); the others row tiles as ``pick``
    (tuned on sm90; the ``quant`` suite measures them)."""
    if m == 1:  # one long row (TENSORWISE of an odd-sized tensor): one row tile for both passes
        t = pick(m, n, 1, 1, cap_n=4096)
        return t, t
    row_tile = pick(m, n, 1, 1, cap_n=1024)
    if red_m and red_n:  # TENSORWISE: 16 x 1024 amax steps, 32 a program (faster than 8 x 1024 x 16)
        return Tile(min(16, row_tile.block_m * 2), row_tile.block_n, 8, 32 if m >= 4096 else 0), row_tile
    if red_m:
        return row_tile, pick(m, n, 1, 1, cap_n=256)
    return row_tile, row_tile


def amax_iters(b: int, m: int, n: int, tile: Tile, red_m: bool, *, programs: int = 1024, most: int = 32) -> int:
    """Tiles an amax program walks down M: a power of two up to ``most`` (reductions over M only)
    while the grid keeps at least ``programs`` programs (several a multiprocessor); ``tile.iters``
    when set."""
    if tile.iters:
        return tile.iters
    if not red_m:
        return 1
    tiles_m = cdiv(m, tile.block_m)
    others = b * cdiv(n, tile.block_n)
    it = 1
    while it * 2 <= min(most, tiles_m) and others * cdiv(tiles_m, it * 2) >= programs:
        it *= 2
    return it


def flat_rows(numel: int, width: int = 1024) -> tuple[int, int, int]:
    """``[1, rows, width]`` view of a contiguous tensor for TENSORWISE (rows of ``width`` when it
    divides ``numel``, else one row): the amax pass then walks down rows."""
    if numel % width == 0 and numel > width:
        return 1, numel // width, width
    return 1, 1, numel


def pick_mx(m: int, n: int, gm: int, gn: int) -> Tile:
    """Tiles of MX column-direction and both-direction kernels (and every MXFP4 one): 32 x 128,
    4 warps (faster on sm90 than 32 x 256 x 8 warps for the column direction and 64 x 128 x 8 warps
    for with_trans; the ``quant`` suite measures them). MX FP8 row-direction tiles come from :func:`pick`
    (8 x 1024)."""
    return pick(m, n, gm, gn, cap_n=128, target=4096)


def check_tile(tile: Tile, gm: int, gn: int) -> None:
    for name, v, g in (("block_m", tile.block_m, gm), ("block_n", tile.block_n, gn)):
        if v <= 0 or v & (v - 1) or v % g:
            raise ValueError(f"tile.{name}: expected a power of two multiple of the scale group ({g}), got {v}")


def device_reason(x: torch.Tensor, fp8_dtype: torch.dtype) -> str | None:
    """Why this device cannot run the FP8 conversions of ``fp8_dtype``, or ``None``."""
    reason = _runtime.device_reason(x)
    if reason or _runtime.interpreting():
        return reason
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    arch = _runtime.arch_of(index)
    if fp8_dtype in _FNUZ and arch not in _FNUZ_ARCHS:
        return f"FNUZ FP8 ({fp8_dtype}) is the gfx942 format: Triton converts it on gfx940-gfx942 only, not {arch}"
    if arch.startswith("sm") and int(arch[2:]) < 89:
        return f"Triton's FP8 conversions need sm89 or newer; this GPU is {arch}"
    return None


def block_size_reason(bs: int, *, square: bool) -> str | None:
    limit = MAX_BLOCK_2D if square else MAX_BLOCK_1D
    if bs & (bs - 1) or bs > limit:
        shape = f"{bs} x {bs} tiles" if square else f"1-D blocks of {bs}"
        return f"TRITON quantizes power-of-two blocks up to {limit} ({'square' if square else '1-D'}); got {shape}"
    return None


def recipe_reason(*recipes) -> str | None:
    for r in recipes:
        if r.shuffle_scale or r.shuffle_out:
            return "TRITON does not write AITER pre-shuffled MX layouts (shuffle_scale/shuffle_out)"
    return None


def grid(b: int, m: int, n: int, tile: Tile) -> tuple[int]:
    return (b * cdiv(m, tile.block_m) * cdiv(n, tile.block_n),)
