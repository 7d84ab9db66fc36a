"""Tile configurations for the grouped GEMM kernels, per architecture, chosen by a heuristic table.

Forward/dgrad: the tile count depends on the group lengths, which live on the device; the host
estimates it from ``M_total`` and ``G`` (groups ending on row-tile edges, or in half a tile each, the
two efficiencies averaged) and picks the candidate with the least wave-quantization loss, a smaller
tile only by a clear margin. Variable-K (wgrad): ``G`` output matrices of ``K x N``, so the tile
count is exact.

The sm90 entries start from the dense GEMM's tuned table (turbo_triton.gemm.configs) and are tuned
on sm90 (the ``grouped_gemm`` suite measures them); gfx942/gfx950 follow from what is known of the
chips (LDS 64 KB / 160 KB), not tuned.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from turbo_triton.gemm.configs import SMEM_LIMIT, shrink


@dataclass(frozen=True)
class GroupedConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # TMA kernels only: Triton's flattened persistent loop (forward only); the output tile stored in
    # two halves
    flatten: bool = False
    subtile: bool = False


#: Candidates by arch, largest tile first. For the variable-K kernel BLOCK_M tiles K, BLOCK_N tiles
#: N and BLOCK_K runs over a group's rows.
_FWD: dict[str, list[GroupedConfig]] = {
    # sm90 large: the dense GEMM's large tile (flattened persistent loop, epilogue in halves); with a
    # whole-tile epilogue the flattened 3-stage kernel needs more than the 227 KB of an SM. A 64x128 tile
    # is the slowest in the forward/dgrad cases of the `grouped_gemm` suite, so it is not a candidate.
    "sm90": [
        GroupedConfig(128, 256, 64, 8, 8, 3, flatten=True, subtile=True),
        GroupedConfig(128, 128, 64, 8, 4, 4),
    ],
    "gfx942": [
        GroupedConfig(128, 128, 64, 8, 4, 2),
        GroupedConfig(64, 128, 64, 4, 4, 2),
        GroupedConfig(64, 64, 64, 4, 4, 2),
    ],
    "gfx950": [
        GroupedConfig(256, 128, 64, 8, 8, 2),
        GroupedConfig(128, 128, 64, 8, 4, 2),
        GroupedConfig(64, 128, 64, 4, 4, 2),
    ],
    "default": [
        GroupedConfig(128, 128, 32, 8, 4, 3),
        GroupedConfig(64, 128, 32, 4, 4, 3),
        GroupedConfig(64, 64, 32, 4, 4, 3),
    ],
    # The CPU interpreter: one tile covers the small test shapes, so few program iterations.
    "interpreter": [GroupedConfig(32, 64, 64, 4, 1, 1)],
}

_VARK: dict[str, list[GroupedConfig]] = {
    # the whole-tile epilogue, faster than the epilogue in halves in the wgrad cases of the `grouped_gemm`
    # suite (bf16 out); an fp32 out (fused wgrad) does not fit it with three stages, and _fitted stores
    # that one in halves
    "sm90": [
        GroupedConfig(128, 256, 64, 8, 8, 3),
        GroupedConfig(128, 128, 64, 8, 4, 4),
    ],
    "gfx942": [GroupedConfig(128, 128, 64, 8, 4, 2), GroupedConfig(64, 64, 64, 4, 4, 2)],
    "gfx950": [GroupedConfig(256, 128, 64, 8, 8, 2), GroupedConfig(128, 128, 64, 8, 4, 2)],
    "default": [GroupedConfig(128, 128, 32, 8, 4, 3), GroupedConfig(64, 64, 32, 4, 4, 3)],
    "interpreter": [GroupedConfig(64, 64, 32, 4, 1, 1)],
}

#: A candidate must keep at least this fraction of the best efficiency to beat a larger tile.
_TILE_PREFERENCE = 0.9


def _efficiency(tiles: int, num_sms: int) -> float:
    """Fraction of the SM-waves doing work when ``tiles`` equal tiles run on ``num_sms`` SMs."""
    if tiles <= 0:
        return 1.0
    waves = -(-tiles // num_sms)
    return tiles / (waves * num_sms)


def _choose(cands: list[GroupedConfig], tiles_of, num_sms: int) -> GroupedConfig:
    """``tiles_of(cfg)``: the possible tile counts of a launch; their efficiencies are averaged."""

    def eff_of(cfg: GroupedConfig) -> float:
        counts = tiles_of(cfg)
        return sum(_efficiency(t, num_sms) for t in counts) / len(counts)

    best, best_eff = cands[0], eff_of(cands[0])
    for cfg in cands[1:]:
        eff = eff_of(cfg)
        # a smaller tile wins only by a clear margin: it also moves more bytes per FLOP
        if eff * _TILE_PREFERENCE > best_eff:
            best, best_eff = cfg, eff
    return best


def estimated_fwd_tiles(cfg: GroupedConfig, m_total: int, n: int, groups: int) -> tuple[int, int]:
    """Tiles of a forward launch when the groups end on row-tile edges, and when each group ends in
    half a row tile on average (the lengths are on the device: the host cannot tell)."""
    n_tiles = -(-n // cfg.block_n)
    m_tiles = -(-m_total // cfg.block_m)
    return m_tiles * n_tiles, (m_tiles + groups // 2) * n_tiles


@functools.lru_cache(maxsize=256)
def pick_fwd(arch: str, m_total: int, n: int, k: int, groups: int, num_sms: int, elem_bytes: int) -> GroupedConfig:
    cands = _FWD.get(arch, _FWD["default"])
    cfg = _choose(cands, lambda c: estimated_fwd_tiles(c, m_total, n, groups), num_sms)
    return _fitted(cfg, arch, elem_bytes, elem_bytes)


@functools.lru_cache(maxsize=256)
def pick_variable_k(arch: str, k: int, n: int, groups: int, num_sms: int, elem_bytes: int,
                    out_bytes: int) -> GroupedConfig:
    cands = _VARK.get(arch, _VARK["default"])
    cfg = _choose(cands, lambda c: (groups * -(-k // c.block_m) * -(-n // c.block_n),), num_sms)
    return _fitted(cfg, arch, elem_bytes, out_bytes)


def smem_bytes(cfg: GroupedConfig, elem_bytes: int, out_bytes: int) -> int:
    """Pipelined operand tiles plus the epilogue tile (half of it with ``subtile``; a flattened loop
    keeps a second one in flight). An estimate: the launcher shrinks and retries a config the
    compiled kernel finds too large."""
    per_stage = (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * elem_bytes
    epilogue = cfg.block_m * cfg.block_n * out_bytes // (2 if cfg.subtile else 1)
    return cfg.num_stages * per_stage + epilogue * (2 if cfg.flatten else 1)


def _fitted(cfg: GroupedConfig, arch: str, elem_bytes: int, out_bytes: int) -> GroupedConfig:
    if elem_bytes == 4 and arch != "interpreter":
        # fp32 tiles take twice the shared memory: halve the K step
        cfg = replace(cfg, block_k=cfg.block_k // 2)
    limit = SMEM_LIMIT.get(arch)
    while limit is not None and smem_bytes(cfg, elem_bytes, out_bytes) > limit:
        if not cfg.subtile:  # first the epilogue in halves, which keeps the pipeline's stages
            cfg = replace(cfg, subtile=True)
            continue
        smaller = shrink(cfg)  # one stage fewer (down to 2), then half the N tile (down to 64)
        if smaller is None:
            break
        cfg = smaller
    return cfg
