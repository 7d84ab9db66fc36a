"""Tile configurations per architecture, chosen by a heuristic table.

A config is ``(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)``. The tables come from
what is known of each chip: sm90 (H100/H200: 228 KB shared memory per SM, wgmma on 64-row
warpgroup tiles), gfx942 (MI300X: 64 KB LDS, 304 CUs, MFMA 32x32x8) and gfx950 (MI355X: 160 KB LDS,
256 CUs). Small problems use smaller tiles so that every SM gets work.

A tuned config from the tuning database (``turbo tune gemm``; ``turbo_core.tuning``) replaces the
table's choice for its key: :func:`tuning_key` (arch, ``(M, N, K)``, operand and output element
widths, B's orientation: what the table's choice depends on). A tuned config is used as stored (it
was timed as it is; ``launch_fitted`` still shrinks one that does not fit). Without a database entry
:func:`pick` is the table's choice. :data:`CANDIDATES` is the search space per arch that
this module offers to ``turbo tune`` (registered with ``turbo_core.tuning`` when it loads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from turbo_core.tuning import ConfigReader, Key, Space, kernel_config, register_space


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
        # large: 128x256x64, 3 stages, flattened persistent loop, epilogue stored in two halves (faster
        # than 256x128 tiles on every layout; the `gemm` suite measures it).
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
    """The config for an ``M x N x K`` problem; ``b_row_major`` when op(B) is B itself (not trans_b):
    the tuning database's config for this key when it has one, else the table's."""
    out_bytes = out_bytes or elem_bytes
    tuned = kernel_config("TRITON", "gemm", _raw_key(arch, m, n, k, elem_bytes, out_bytes, b_row_major))
    if tuned is not None:
        cfg = _from_db(tuned)
        if cfg is not None:
            return cfg
    return heuristic(arch, m, n, k, num_sms, elem_bytes, out_bytes, b_row_major)


def heuristic(arch: str, m: int, n: int, k: int, num_sms: int, elem_bytes: int, out_bytes: int,
              b_row_major: bool) -> GemmConfig:
    """The table's config (fitted to the arch's shared memory), ignoring the tuning database."""
    return fit(_pick(arch, m, n, k, num_sms, elem_bytes, b_row_major), arch, elem_bytes, out_bytes)


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


# -- tuning (turbo_core.tuning) ---------------------------------------------------------------------

#: Configs ``turbo tune gemm`` tries besides the table's choice, per arch. sm90: the variants within a
#: few percent of the table's large config on some layout (the `gemm` suite measures them); the AMD
#: lists vary tiles and stages around their tables (not yet run on a GPU); the interpreter's keep the CPU
#: runs of the tests quick.
CANDIDATES: dict[str, tuple[GemmConfig, ...]] = {
    "sm90": (
        GemmConfig(128, 256, 64, 8, 8, 4, warp_specialize=True),
        GemmConfig(128, 256, 64, 8, 8, 4, flatten=True, warp_specialize=True),
        GemmConfig(128, 256, 64, 8, 8, 4, flatten=True, warp_specialize=True, subtile=True),
        GemmConfig(128, 256, 64, 8, 8, 3, subtile=True),
        GemmConfig(128, 256, 64, 16, 8, 3, flatten=True, subtile=True),
        GemmConfig(256, 128, 64, 8, 8, 3, flatten=True, warp_specialize=True),
        GemmConfig(128, 128, 64, 8, 4, 4, flatten=True),
        GemmConfig(128, 128, 64, 8, 8, 4),
    ),
    "gfx942": (
        GemmConfig(256, 256, 64, 8, 8, 2), GemmConfig(256, 128, 64, 8, 8, 2), GemmConfig(128, 256, 64, 8, 8, 2),
        GemmConfig(128, 128, 64, 8, 4, 2), GemmConfig(128, 128, 64, 4, 8, 2), GemmConfig(256, 256, 32, 8, 8, 2),
    ),
    "gfx950": (
        GemmConfig(256, 256, 64, 8, 8, 2), GemmConfig(256, 256, 64, 8, 8, 3), GemmConfig(256, 128, 64, 8, 8, 2),
        GemmConfig(128, 256, 64, 8, 8, 2), GemmConfig(128, 128, 64, 8, 4, 2), GemmConfig(256, 256, 128, 8, 8, 2),
    ),
    "default": (
        GemmConfig(128, 128, 32, 8, 4, 3), GemmConfig(128, 64, 32, 8, 4, 3), GemmConfig(64, 128, 32, 8, 4, 3),
        GemmConfig(128, 128, 64, 8, 8, 3),
    ),
    "interpreter": (GemmConfig(32, 32, 16, 4, 1, 1), GemmConfig(16, 16, 16, 4, 1, 1), GemmConfig(32, 64, 32, 4, 1, 1)),
}

_BLOCKS = ("block_m", "block_n", "block_k")
_INTS = ("group_m", "num_warps", "num_stages")
_BOOLS = ("flatten", "warp_specialize", "subtile")
_FIELDS = tuple(f.name for f in fields(GemmConfig))
_WIDTHS: dict[tuple[int, int], tuple[str, str]] = {}


def tuning_key(arch: str, m: int, n: int, k: int, elem_bytes: int, out_bytes: int, b_row_major: bool) -> Key:
    """The tuning-database key of a config choice: what :func:`pick`'s table depends on."""
    return Key(*_raw_key(arch, m, n, k, elem_bytes, out_bytes, b_row_major))


def _raw_key(arch: str, m: int, n: int, k: int, elem_bytes: int, out_bytes: int, b_row_major: bool) -> tuple:
    """:func:`tuning_key` as a plain tuple (equal to the ``Key``, with the same hash; cheaper to build on
    every launch)."""
    widths = _WIDTHS.get((elem_bytes, out_bytes))
    if widths is None:
        widths = _WIDTHS.setdefault((elem_bytes, out_bytes), (f"{8 * elem_bytes}bit", f"{8 * out_bytes}bit"))
    return (arch, (m, n, k), widths, "b_row_major" if b_row_major else "b_col_major")


def to_dict(cfg: GemmConfig) -> dict:
    return asdict(cfg)


def from_dict(d: dict) -> GemmConfig:
    """A config from its database form; ``ValueError`` naming the bad field."""
    unknown = sorted(set(d) - set(_FIELDS))
    if unknown:
        raise ValueError(f"config: unknown field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
    missing = [f for f in (*_BLOCKS, *_INTS) if f not in d]
    if missing:
        raise ValueError(f"config: missing field(s) {', '.join(missing)}")
    for f in _BLOCKS:
        v = d[f]
        if type(v) is not int or v < 16 or v & (v - 1):
            raise ValueError(f"config.{f}: expected a power of two >= 16, got {v!r}")
    for f in _INTS:
        v = d[f]
        if type(v) is not int or v < 1 or (f == "num_warps" and v & (v - 1)):
            what = "a power of two" if f == "num_warps" else "a positive integer"
            raise ValueError(f"config.{f}: expected {what}, got {v!r}")
    for f in _BOOLS:
        if f in d and type(d[f]) is not bool:
            raise ValueError(f"config.{f}: expected true or false, got {d[f]!r}")
    acc = d.get("imprecise_acc")
    if acc is not None and (type(acc) is not int or acc < 1):
        raise ValueError(f"config.imprecise_acc: expected a positive integer or null, got {acc!r}")
    return GemmConfig(**d)


#: The :class:`GemmConfig` of a database dict (converted once per dict; a bad one is reported once and
#: ignored, so the table's choice applies).
_from_db = ConfigReader(from_dict, None, "TRITON gemm")


def _facts(args: Any) -> tuple:
    from turbo_core.dispatch.specs.gemm import gemm_dims
    from turbo_triton import _runtime

    arch, sms = _runtime.device_facts(args.a)
    m, n, k = gemm_dims(args)
    return arch, sms, m, n, k, args.a.element_size(), args.result_dtype.itemsize, not args.trans_b


def _space_key(args: Any) -> Key:
    arch, _, m, n, k, eb, ob, brm = _facts(args)
    return tuning_key(arch, m, n, k, eb, ob, brm)


def _space_candidates(args: Any) -> list[dict]:
    """The arch's candidates for this call, without the table's own choice (``turbo tune`` times that
    one as the baseline). Not fitted: one that needs more shared memory than the device has is shrunk
    by ``launch_fitted`` when it fails to load, when tuned and again when used from the database."""
    arch, sms, m, n, k, eb, ob, brm = _facts(args)
    seen = {heuristic(arch, m, n, k, sms, eb, ob, brm)}
    out = []
    for cfg in CANDIDATES.get(arch, CANDIDATES["default"]):
        if cfg not in seen:
            seen.add(cfg)
            out.append(to_dict(cfg))
    return out


register_space(Space("TRITON", "gemm", candidates=_space_candidates, key=_space_key, libraries=("triton",)))
