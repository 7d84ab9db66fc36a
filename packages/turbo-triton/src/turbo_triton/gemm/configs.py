"""Tile configurations per architecture, chosen by a heuristic table.

A config is ``(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)``. The tables come from
what is known of each chip: sm90 (H100/H200: 228 KB shared memory per SM, wgmma on 64-row
warpgroup tiles), gfx942 (MI300X: 64 KB LDS, 304 CUs, MFMA 32x32x8) and gfx950 (MI355X: 160 KB LDS,
256 CUs). Small problems use smaller tiles so that every SM gets work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GemmConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    # TMA-kernel options (ignored by the portable kernel)
    flatten: bool = False
    warp_specialize: bool = False
    subtile: bool = False
    # FP8 TENSORWISE/ROWWISE on Hopper (TMA kernel): promote the tensor cores' reduced-precision
    # sum into fp32 every this many products along K (None: never); see turbo_triton.gemm_fp8
    imprecise_acc: int | None = None


_TABLE: dict[str, dict[str, GemmConfig]] = {
    # key "large" for M*N >= 4096*4096-ish, "medium", "small" (few tiles)
    "sm90": {
        # H200 sweep (benchmarks/gemm-h200-2026-11-29.md, gemm_variant_sweep.py): 128x256x64, 3 stages,
        # flattened persistent loop, epilogue stored in two halves: 817/767/813 TFLOP/s NT/NN/TN at
        # 8192^3 (torch.matmul 717/703/703 in the same run); 256x128 tiles were slower.
        "large": GemmConfig(128, 256, 64, 8, 8, 3, flatten=True, subtile=True),
        "medium": GemmConfig(128, 128, 64, 8, 4, 4),
        "small": GemmConfig(64, 128, 64, 4, 4, 4),
    },
    "gfx942": {
        "large": GemmConfig(256, 256, 64, 8, 8, 2),
        "medium": GemmConfig(128, 128, 64, 8, 4, 2),
        "small": GemmConfig(64, 64, 64, 4, 4, 2),
    },
    "gfx950": {
        "large": GemmConfig(256, 256, 64, 8, 8, 2),
        "medium": GemmConfig(128, 128, 64, 8, 4, 2),
        "small": GemmConfig(64, 64, 64, 4, 4, 2),
    },
    "default": {
        "large": GemmConfig(128, 128, 32, 8, 4, 3),
        "medium": GemmConfig(128, 64, 32, 8, 4, 3),
        "small": GemmConfig(64, 64, 32, 4, 4, 3),
    },
    # The CPU interpreter: small tiles keep it quick.
    "interpreter": {
        "large": GemmConfig(32, 32, 16, 4, 1, 1),
        "medium": GemmConfig(32, 32, 16, 4, 1, 1),
        "small": GemmConfig(16, 16, 16, 4, 1, 1),
    },
}


#: Shared memory per block (bytes) the kernels may use, by arch.
SMEM_LIMIT = {"sm90": 232448, "gfx942": 65536, "gfx950": 163840}


def smem_bytes(cfg: GemmConfig, elem_bytes: int, out_bytes: int) -> int:
    """Pipelined operand tiles plus the epilogue tile (TMA stores stage C through shared memory)."""
    per_stage = (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * elem_bytes
    # An estimate: the compiler may need some scratch on top, which the launcher's
    # shrink-and-retry on OutOfResources covers.
    return cfg.num_stages * per_stage + cfg.block_m * cfg.block_n * out_bytes


def shrink(cfg: GemmConfig) -> GemmConfig | None:
    """The next smaller config: one stage fewer (down to 2), then half the N tile (down to 64)."""
    if cfg.num_stages > 2:
        return replace(cfg, num_stages=cfg.num_stages - 1)
    if cfg.block_n > 64:
        return replace(cfg, block_n=cfg.block_n // 2)
    return None


def fit(cfg: GemmConfig, arch: str, elem_bytes: int, out_bytes: int) -> GemmConfig:
    """Fewer stages (down to 2), then narrower N tiles, until the config fits the arch's limit."""
    limit = SMEM_LIMIT.get(arch)
    if limit is None:
        return cfg
    while smem_bytes(cfg, elem_bytes, out_bytes) > limit:
        smaller = shrink(cfg)
        if smaller is None:
            break
        cfg = smaller
    return cfg


def pick(arch: str, m: int, n: int, k: int, num_sms: int, elem_bytes: int, out_bytes: int | None = None,
         b_row_major: bool = False) -> GemmConfig:
    """The config for an ``M x N x K`` problem; ``b_row_major`` when op(B) is B itself (not trans_b)."""
    cfg = _pick(arch, m, n, k, num_sms, elem_bytes, b_row_major)
    return fit(cfg, arch, elem_bytes, out_bytes or elem_bytes)


def _pick(arch: str, m: int, n: int, k: int, num_sms: int, elem_bytes: int, b_row_major: bool) -> GemmConfig:
    table = _TABLE.get(arch, _TABLE["default"])
    large = table.get("large_b_row_major", table["large"]) if b_row_major else table["large"]
    if elem_bytes == 4 and arch != "interpreter":
        # fp32 tiles take twice the shared memory: halve K.
        large = replace(large, block_k=large.block_k // 2)
    tiles = -(-m // large.block_m) * -(-n // large.block_n)
    if tiles >= num_sms:
        return large
    medium = table["medium"]
    if -(-m // medium.block_m) * -(-n // medium.block_n) >= num_sms // 2:
        return medium
    return table["small"]
