"""Attention tiles per architecture and head dim.

``Tile(block_m, block_n, num_warps, num_stages[, warp_specialize])``: ``block_m`` query rows by
``block_n`` key rows; ``warp_specialize`` (forward only) splits the unmasked key loop into
producer/consumer warps (``tl.range(warp_specialize=True)``).
The forward and the deterministic ``dq`` kernel walk key tiles for a query tile; the ``dk/dv``
kernel walks query tiles for a key tile. sm90 (H100/H200: 228 KB shared memory, wgmma on 64-row
warpgroup tiles) is tuned on sm90 (the ``attention`` suite measures it); gfx942 (MI300X: 64 KB LDS)
and gfx950 (MI355X: 160 KB LDS) follow from those facts, not tuned. fp32 inputs (IEEE dots)
take the next-smaller tiles.

``TURBO_TRITON_ATTN_TILES="fwd=128,64,8,3;dkdv=64,128,8,2;dq=128,64,8,2"`` overrides the table
(for sweeps; any subset of the three kernels; a fifth value 1 turns on warp specialization).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from turbo_triton.intmath import next_power_of_2


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    warp_specialize: bool = False


MLA = "192x128"  # the bucket of q/k wider than 128 (up to 192) with v at most 128 wide; else 256's tiles

# head-dim bucket -> kernel -> tile. sm90: tuned at B x S = 16k tokens, causal and not, S = 512..16384 for
# d = 64/128 and S = 4096/16384 for MLA and d = 256 (the `attention` suite measures them); d=128's backward
# takes 4-warp 64x64 tiles at every length.
_SM90 = {
    64: {"fwd": Tile(128, 64, 8, 4), "dkdv": Tile(64, 64, 4, 3), "dq": Tile(64, 64, 4, 3)},
    128: {"fwd": Tile(128, 128, 8, 3), "dkdv": Tile(64, 64, 4, 2), "dq": Tile(64, 64, 4, 2)},
    # MLA's 192-wide q/k with 128-wide v fits smaller, 4-warp backward tiles that spill at d = 256, so it
    # has its own bucket rather than d = 256's tiles.
    MLA: {"fwd": Tile(128, 64, 8, 2), "dkdv": Tile(32, 64, 4, 2), "dq": Tile(64, 32, 4, 2)},
    256: {"fwd": Tile(64, 64, 4, 3), "dkdv": Tile(64, 32, 4, 2), "dq": Tile(128, 32, 8, 2)},
}
# head-dim bucket -> kernel -> (longest walk, tile): the tile that replaces the table's when the kernel's
# loop walks at most that many rows (keys for "fwd"/"dq", queries for "dkdv"). Short walks favour
# 4-warp 64-row programs, two or more per SM, which hide each other's prologue and epilogue; longer
# walks keep the 8-warp tile (the `attention` suite measures both).
_SM90_SHORT = {
    64: {"fwd": (4096, Tile(64, 64, 4, 3))},
    128: {"fwd": (8192, Tile(64, 64, 4, 3))},
}
_AMD = {
    64: {"fwd": Tile(128, 64, 4, 1), "dkdv": Tile(32, 64, 4, 1), "dq": Tile(64, 32, 4, 1)},
    128: {"fwd": Tile(128, 64, 4, 1), "dkdv": Tile(32, 64, 4, 1), "dq": Tile(64, 32, 4, 1)},
    256: {"fwd": Tile(64, 32, 4, 1), "dkdv": Tile(16, 32, 4, 1), "dq": Tile(32, 16, 4, 1)},
}
_DEFAULT = {
    64: {"fwd": Tile(64, 64, 4, 2), "dkdv": Tile(32, 64, 4, 2), "dq": Tile(64, 32, 4, 2)},
    128: {"fwd": Tile(64, 64, 4, 2), "dkdv": Tile(32, 64, 4, 2), "dq": Tile(64, 32, 4, 2)},
    256: {"fwd": Tile(64, 32, 4, 2), "dkdv": Tile(16, 32, 4, 2), "dq": Tile(32, 16, 4, 2)},
}
_INTERP = Tile(16, 16, 4, 1)

_TABLES = {"sm90": _SM90, "gfx942": _AMD, "gfx950": _AMD}
_SHORT = {"sm90": _SM90_SHORT}


def _bucket(head_dim: int, d_v: int | None = None) -> int | str:
    """The table key of the larger head dim ``head_dim``; :data:`MLA` when ``d_v`` (v's width) is
    given, at most 128, and ``head_dim`` is in (128, 192]."""
    if head_dim <= 64:
        return 64
    if head_dim <= 128:
        return 128
    return MLA if head_dim <= 192 and d_v is not None and d_v <= 128 else 256


def _entry(table: dict, bucket):
    return table.get(bucket) or table[256]


def override(kernel: str, variable: str = "TURBO_TRITON_ATTN_TILES") -> Tile | None:
    """The tile that ``variable`` (``"fwd=128,64,8,3;dq=..."``) sets for ``kernel``, or None."""
    spec = os.environ.get(variable, "")
    for part in spec.split(";"):
        name, _, values = part.partition("=")
        if name.strip() == kernel:
            nums = [int(v) for v in values.split(",")]
            if len(nums) not in (4, 5) or (len(nums) == 5 and nums[4] not in (0, 1)):
                raise ValueError(f"{variable}: {kernel}= needs 4 ints (block_m,block_n,warps,stages) and an "
                                 f"optional warp_specialize 0/1, got {values!r}")
            return Tile(*nums[:4], *(bool(n) for n in nums[4:]))
    return None


def _halve(tile: Tile) -> Tile:
    return replace(tile, block_m=max(16, tile.block_m // 2), block_n=max(16, tile.block_n // 2))


def _of_arch(tables: dict, arch: str):
    """``tables``' entry for ``arch`` (e.g. ``"gfx942:sramecc+:xnack-"``), else for its base name, else None."""
    return tables.get(arch) or tables.get(arch.split(":")[0])


def pick(kernel: str, arch: str, head_dim: int, elem_bytes: int, walk: int | None = None,
         d_v: int | None = None) -> Tile:
    """The tile of ``kernel`` ("fwd", "dkdv", "dq") for the larger of the two head dims; ``walk``
    is the length of the kernel's loop (the key length for "fwd"/"dq", the query length for "dkdv";
    the longest sequence when varlen), which picks the short-walk tile where the arch has one;
    ``d_v``, v's head dim, picks MLA's tiles (q/k up to 192 wide, v up to 128) where the arch has them."""
    if arch == "interpreter":
        return _INTERP
    tile = override(kernel)
    if tile is not None:
        return tile
    bucket = _bucket(head_dim, d_v)
    tile = _entry(_of_arch(_TABLES, arch) or _DEFAULT, bucket)[kernel]
    short = (_of_arch(_SHORT, arch) or {}).get(bucket, {}).get(kernel)
    if short is not None and walk is not None and walk <= short[0]:
        tile = short[1]
    return _halve(tile) if elem_bytes == 4 else tile


def block_d(head_dim: int) -> int:
    """Head-dim tile: the next power of two, at least 16 (the smallest dot)."""
    return max(16, next_power_of_2(head_dim))


def atomic_dq(arch: str, head_dim: int, causal: bool) -> bool:
    """Whether a non-deterministic backward should add ``dq`` with fp32 atomics from the ``dk/dv``
    kernel rather than run the ``dq`` kernel. On sm90 the separate kernel is as fast or faster except
    for causal d <= 64 (the ``attention`` suite measures both); archs not tuned take the deterministic
    kernel; the interpreter takes the atomics so that the CPU tests run both paths."""
    if arch == "interpreter":
        return True
    return arch == "sm90" and head_dim <= 64 and causal
