"""Tile configurations for the FP8 GEMM, by architecture (same :class:`GemmConfig` as the dense GEMM).

FP8 tiles are half the bytes of bf16 ones, so the K tile doubles to 128 — which is also the
BLOCKWISE block edge (a K step must lie in one scale block) and four MX blocks. sm90: wgmma on
64-row warpgroup tiles, 228 KB shared memory per SM; 128x256x128 with 3 stages takes 144 KB of
operand buffers. gfx942/gfx950: MFMA FP8 (gfx942 FNUZ, gfx950 OCP), 64 / 160 KB LDS.
"""

from __future__ import annotations

import os
from dataclasses import replace

from turbo_triton.gemm.configs import GemmConfig, fit

_TABLE: dict[str, dict[str, GemmConfig]] = {
    # Tuned on sm90 (the `gemm-fp8` suite measures them). large: 256x128x128, 3 stages, warp-specialized,
    # the sum promoted to fp32 every 128 products (torch._scaled_mm's accuracy). large_fast
    # (TURBO_TRITON_FP8_FAST_ACCUM=1): 128x256, flattened loop, never promoting, as
    # _scaled_mm(use_fast_accum=True): faster, with 2-3x the error. blockwise scales every 128-K step's
    # product: 128x128 tiles, 8 warps, warp-specialized (128x256 tiles spill the second accumulator).
    "sm90": {
        "large": GemmConfig(256, 128, 128, 8, 8, 3, warp_specialize=True, imprecise_acc=128),
        "large_fast": GemmConfig(128, 256, 128, 8, 8, 3, flatten=True, subtile=True),
        "blockwise": GemmConfig(128, 128, 128, 8, 8, 6, warp_specialize=True),
        "medium": GemmConfig(128, 128, 128, 8, 4, 4, imprecise_acc=128),
        "small": GemmConfig(64, 128, 128, 4, 4, 4, imprecise_acc=128),
    },
    "gfx942": {
        "large": GemmConfig(256, 256, 128, 8, 8, 2),
        "medium": GemmConfig(128, 128, 128, 8, 4, 2),
        "small": GemmConfig(64, 64, 128, 4, 4, 2),
    },
    "gfx950": {
        "large": GemmConfig(256, 256, 128, 8, 8, 2),
        "medium": GemmConfig(128, 128, 128, 8, 4, 2),
        "small": GemmConfig(64, 64, 128, 4, 4, 2),
    },
    "default": {
        "large": GemmConfig(128, 128, 128, 8, 4, 3),
        "medium": GemmConfig(128, 64, 128, 8, 4, 3),
        "small": GemmConfig(64, 64, 128, 4, 4, 3),
    },
    "interpreter": {
        "large": GemmConfig(32, 32, 32, 4, 1, 1),
        "medium": GemmConfig(32, 32, 32, 4, 1, 1),
        "small": GemmConfig(16, 16, 32, 4, 1, 1),
    },
}


def fast_accumulate() -> bool:
    """``TURBO_TRITON_FP8_FAST_ACCUM=1``: never promote Hopper's reduced-precision FP8 sums (like
    ``torch._scaled_mm(use_fast_accum=True)``): faster, with 2-3x the rounding error (the ``gemm-fp8``
    suite measures both)."""
    return os.environ.get("TURBO_TRITON_FP8_FAST_ACCUM", "0").strip().lower() in ("1", "true", "yes", "on")


def pick(arch: str, m: int, n: int, k: int, num_sms: int, out_bytes: int, block_k: int | None = None,
         tma_store: bool = True, blockwise: bool = False) -> GemmConfig:
    """The config for an ``M x N x K`` FP8 problem. ``block_k`` forces the K tile (BLOCKWISE: the
    block size); ``tma_store``: the output tile is staged in shared memory (counted by ``fit``)."""
    table = _TABLE.get(arch, _TABLE["default"])
    fast = fast_accumulate()
    cfg = table["small"]
    for size in ("large", "medium"):
        if size == "large" and blockwise and "blockwise" in table:
            size = "blockwise"
        elif size == "large" and fast and "large_fast" in table:
            size = "large_fast"
        cand = table[size]
        tiles = -(-m // cand.block_m) * -(-n // cand.block_n)
        if tiles >= (num_sms if size != "medium" else num_sms // 2):
            cfg = cand
            break
    if block_k is not None and block_k != cfg.block_k:
        cfg = replace(cfg, block_k=block_k)
    if fast or blockwise:
        cfg = replace(cfg, imprecise_acc=None)
    return fit(cfg, arch, 1, out_bytes if tma_store else 0)
