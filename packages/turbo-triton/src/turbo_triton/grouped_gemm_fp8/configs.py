"""Tile configurations for the grouped FP8 GEMM kernels, per architecture, chosen by the bf16 grouped
GEMM's heuristic (``turbo_triton.grouped_gemm.configs``: the least wave-quantization loss, a smaller
tile only by a clear margin).

FP8 tiles are half the bytes of bf16 ones, so the K step doubles to 128 (the same shared memory per
stage as the bf16 tables' 64). BLOCKWISE needs a K step that divides the block size: the launcher
lowers ``block_k`` to the largest power of two dividing ``block_size`` when the table's is larger.
BLOCKWISE keeps two fp32 tiles live (the accumulator and the fresh partial product), so its sm90
tiles give each thread half the accumulator of the TENSORWISE/ROWWISE ones (128x128 on 8 warps).

The sm90 rows are derived from the bf16 grouped table and the dense FP8 table
(``turbo_triton.gemm_fp8.configs``), not tuned for FP8 (the ``grouped-gemm-fp8`` suite measures them);
gfx942/gfx950 follow from what is known of the chips (LDS 64 KB / 160 KB).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from turbo_triton.gemm.configs import SMEM_LIMIT, shrink
from turbo_triton.grouped_gemm.configs import GroupedConfig, _choose, estimated_fwd_tiles, smem_bytes

__all__ = ["Fp8GroupedConfig", "blockwise_block_k", "hybrid_native", "min_block_k", "pick_fwd", "pick_variable_k"]


@dataclass(frozen=True)
class Fp8GroupedConfig(GroupedConfig):
    """A :class:`GroupedConfig` plus ``precise_acc``: promote the FP8 MMA accumulator into fp32 once
    per K step in the TENSORWISE/ROWWISE kernels (Triton's ``max_num_imprecise_acc = BLOCK_K``; its
    sm90 default never promotes; BLOCKWISE always does: its scaled add is the promotion), and
    ``defer_scale``: the BLOCKWISE TMA kernels scale each K step's product one step later."""

    precise_acc: bool = False
    defer_scale: bool = False


C = Fp8GroupedConfig

#: Candidates by arch, largest tile first; ``(scaling, arch)`` with scaling "epilogue" (TENSORWISE,
#: ROWWISE) or "blockwise". For the variable-K kernels BLOCK_M tiles K, BLOCK_N tiles N and BLOCK_K
#: runs over a group's rows.
_FWD: dict[tuple[str, str], list[Fp8GroupedConfig]] = {
    # no flatten: Triton 3.6's nested-loop fusion fails to compile the flattened FP8 TMA forward for sm90
    ("epilogue", "sm90"): [C(128, 256, 128, 8, 8, 3, subtile=True), C(128, 128, 128, 8, 4, 4),
                           C(64, 128, 128, 4, 4, 4)],
    ("blockwise", "sm90"): [C(128, 128, 128, 8, 8, 4), C(64, 128, 128, 4, 4, 4)],
    # 64 KB LDS: a 64-deep K step keeps two stages of 128x128 tiles and the epilogue tile inside it
    ("epilogue", "gfx942"): [C(128, 128, 64, 8, 4, 2), C(64, 128, 64, 4, 4, 2), C(64, 64, 64, 4, 4, 2)],
    ("blockwise", "gfx942"): [C(128, 128, 64, 8, 4, 2), C(64, 64, 64, 4, 4, 2)],
    ("epilogue", "gfx950"): [C(256, 128, 128, 8, 8, 2), C(128, 128, 128, 8, 4, 2), C(64, 128, 128, 4, 4, 2)],
    ("blockwise", "gfx950"): [C(128, 128, 128, 8, 8, 2), C(64, 128, 128, 4, 4, 2)],
    ("epilogue", "default"): [C(128, 128, 128, 8, 4, 3), C(64, 128, 128, 4, 4, 3), C(64, 64, 128, 4, 4, 3)],
    ("blockwise", "default"): [C(128, 128, 128, 8, 8, 3), C(64, 64, 128, 4, 4, 3)],
    # the CPU interpreter: one tile covers the small test shapes
    ("epilogue", "interpreter"): [C(32, 64, 32, 4, 1, 1)],
    ("blockwise", "interpreter"): [C(32, 64, 32, 4, 1, 1)],
}

_VARK: dict[tuple[str, str], list[Fp8GroupedConfig]] = {
    # K-major operands (tma+kmajor) with the promoted sum: 128x128 tiles, as the blockwise kernel
    ("epilogue", "sm90"): [C(128, 128, 128, 8, 8, 4), C(64, 128, 128, 4, 4, 4)],
    ("blockwise", "sm90"): [C(128, 128, 128, 8, 8, 4), C(64, 128, 128, 4, 4, 4)],
    ("epilogue", "gfx942"): [C(128, 128, 64, 8, 4, 2), C(64, 64, 64, 4, 4, 2)],
    ("blockwise", "gfx942"): [C(128, 128, 64, 8, 4, 2), C(64, 64, 64, 4, 4, 2)],
    ("epilogue", "gfx950"): [C(256, 128, 128, 8, 8, 2), C(128, 128, 128, 8, 4, 2)],
    ("blockwise", "gfx950"): [C(128, 128, 128, 8, 8, 2), C(64, 128, 128, 4, 4, 2)],
    ("epilogue", "default"): [C(128, 128, 128, 8, 4, 3), C(64, 64, 128, 4, 4, 3)],
    ("blockwise", "default"): [C(128, 128, 128, 8, 8, 3), C(64, 64, 128, 4, 4, 3)],
    ("epilogue", "interpreter"): [C(32, 32, 32, 4, 1, 1)],
    ("blockwise", "interpreter"): [C(32, 32, 32, 4, 1, 1)],
}

#: Archs whose Triton multiplies mixed FP8 types (E4M3 x E5M2, HYBRID) natively: the interpreter (checked
#: here), NVIDIA sm89+ (mma/wgmma take the two types separately) and CDNA3/4 (MFMA fp8 x bf8). Elsewhere
#: HYBRID pairs are upcast to fp16 before the dot. The GPU tests of the grouped FP8 GEMM run HYBRID pairs
#: on the native path where these say so.
_HYBRID_NATIVE_PREFIXES = ("interpreter", "gfx942", "gfx950")


def hybrid_native(arch: str) -> bool:
    if arch.startswith("sm") and arch[2:].isdigit():
        return int(arch[2:]) >= 89
    return arch.startswith(_HYBRID_NATIVE_PREFIXES)


def min_block_k(arch: str) -> int:
    """The smallest K step of an FP8 dot: 32 on GPUs (NVIDIA's FP8 MMA is 32 deep), 16 in the interpreter."""
    return 16 if arch == "interpreter" else 32


def blockwise_block_k(block_k: int, block_size: int) -> int:
    """The largest power of two that divides ``block_size`` and is at most ``block_k``."""
    step = block_size & -block_size
    return min(block_k, step)


def _table(tables, scaling: str, arch: str) -> list[Fp8GroupedConfig]:
    return tables.get((scaling, arch), tables[(scaling, "default")])


@functools.lru_cache(maxsize=256)
def pick_fwd(arch: str, m_total: int, n: int, k: int, groups: int, num_sms: int, out_bytes: int,
             block_size: int | None) -> Fp8GroupedConfig:
    """Forward/dgrad config; ``block_size`` for BLOCKWISE (else None)."""
    cands = _table(_FWD, "blockwise" if block_size else "epilogue", arch)
    cfg = _choose(cands, lambda c: estimated_fwd_tiles(c, m_total, n, groups), num_sms)
    return _fitted(cfg, arch, out_bytes, block_size)


@functools.lru_cache(maxsize=256)
def pick_variable_k(arch: str, k: int, n: int, groups: int, num_sms: int, out_bytes: int,
                    block_size: int | None) -> Fp8GroupedConfig:
    """Variable-K (wgrad) config; the tile count is exact (``G`` matrices of ``K x N``)."""
    cands = _table(_VARK, "blockwise" if block_size else "epilogue", arch)
    cfg = _choose(cands, lambda c: (groups * -(-k // c.block_m) * -(-n // c.block_n),), num_sms)
    return _fitted(cfg, arch, out_bytes, block_size)


def _fitted(cfg: Fp8GroupedConfig, arch: str, out_bytes: int, block_size: int | None) -> Fp8GroupedConfig:
    if block_size:
        cfg = replace(cfg, block_k=blockwise_block_k(cfg.block_k, block_size))
    limit = SMEM_LIMIT.get(arch)
    while limit is not None and smem_bytes(cfg, 1, out_bytes) > limit:
        smaller = shrink(cfg)  # one stage fewer (down to 2), then half the N tile (down to 64)
        if smaller is None:
            break
        cfg = smaller
    return cfg
