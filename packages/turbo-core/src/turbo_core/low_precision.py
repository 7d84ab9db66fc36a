"""Low-precision formats, scaling configurations and the FP8/FP4 torch dtypes.

Everything here is cheap to import: no GPU is touched. The concrete FP8 dtypes depend on the
device (OCP ``float8_e4m3fn``/``float8_e5m2`` on CPU, NVIDIA and gfx950; the ``...fnuz`` variants on
gfx942), so they are chosen **per device at call time** by :func:`float8_e4m3_dtype`,
:func:`float8_e5m2_dtype` and :func:`fp8_dtype_for`, never at import.

Primus-Turbo's module-level dtypes ``float8_e4m3``, ``float8_e5m2`` and ``float4_e2m1fn_x2`` (also
exported by ``turbo_core``) are resolved on first access, not at import: the FP8 pair of the current
GPU (of the CPU when torch sees none, which gets the OCP pair), fixed for the process from then on,
as Primus-Turbo fixes them at import. ``float4_e2m1fn_x2`` is ``torch.float4_e2m1fn_x2`` on every
device (turbo's FP4 ops run everywhere, in software where the hardware has no FP4; Primus-Turbo
gives ``None`` on gfx942), ``None`` only on a torch without that dtype. The first access queries
the GPU (and so initialises CUDA / ROCm), as any GPU work would. :func:`check_fp8_support` and its
siblings say whether the hardware has the format.

Enum values are strings (``ScalingGranularity.ROWWISE == "ROWWISE"``), so they cross
``torch.library.custom_op`` boundaries and saved artifacts by name, not by position.

Scale conventions (the library always stores ``scale_inv``, the dequantization multiplier):

* FP32 scales: ``scale = fp8_max / max(amax, QUANT_EPS)``, ``q = clamp(x * scale, -fp8_max, fp8_max)``
  rounded to nearest-even in the FP8 dtype, ``scale_inv = 1 / scale`` (fp32).
* E8M0 (MX) scales follow the OCP Microscaling spec v1.0: for a block with amax ``a``, the shared
  exponent is ``X = floor(log2(a)) - emax_elem`` (``emax_elem`` = exponent of the element format's
  largest normal: 8 for E4M3, 15 for E5M2, 2 for E2M1), clamped to ``[-127, 127]``; the block is
  stored as ``x / 2**X`` rounded (nearest-even, saturating to ``±max``) and ``scale_inv = 2**X``
  as the byte ``X + 127``. An all-zero block gets ``X = -127`` (byte 0), a block with NaN/Inf
  gets the E8M0 NaN byte 0xFF.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from turbo_core.platform import platform_of
from turbo_core.utils import DeviceLike, get_device_compute_capability, resolve_device

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "E8M0_DTYPE",
    "FLOAT4_E2M1FN_X2",
    "FP8_DTYPES",
    "MXFP4_BLOCK_SIZE",
    "MXFP4_GROUP_COL_ALIGN",
    "MXFP4_PADDING_ALIGN_SIZE",
    "MXFP8_BLOCK_SIZE",
    "MXFP8_GROUP_COL_ALIGN",
    "MXFP8_GROUP_ROW_ALIGN",
    "MXFP8_PADDING_ALIGN_SIZE",
    "QUANT_EPS",
    "Float4QuantConfig",
    "Float8QuantConfig",
    "Format",
    "ScaleDtype",
    "ScalingGranularity",
    "ScalingRecipe",
    "ScalingStrategy",
    "as_format",
    "as_granularity",
    "as_recipe",
    "check_fp8_ocp_support",
    "check_fp8_support",
    "check_mxfp4_support",
    "check_mxfp8_support",
    "float4_e2m1_dtype",
    "float8_e4m3_dtype",
    "float8_e5m2_dtype",
    "format_of",
    "fp8_cast",
    "fp8_dtype_for",
    "fp8_max",
    "fp8_scale",
    "is_fp4_dtype",
    "is_fp8_dtype",
    "mx_emax",
    "uses_fnuz",
]


class Format(str, enum.Enum):
    """Element format. ``HYBRID``: E4M3 for the forward operands, E5M2 for ``grad_out``."""

    E4M3 = "E4M3"
    E5M2 = "E5M2"
    E2M1_X2 = "E2M1_X2"  # FP4, two values packed per byte
    HYBRID = "HYBRID"

    def __str__(self) -> str:
        return self.value


class ScalingGranularity(str, enum.Enum):
    """Which elements share one scale (see the scale-layout table in ``turbo_core.ops.quantization``)."""

    TENSORWISE = "TENSORWISE"
    ROWWISE = "ROWWISE"
    BLOCKWISE = "BLOCKWISE"
    MX_BLOCKWISE = "MX_BLOCKWISE"

    def __str__(self) -> str:
        return self.value


class ScaleDtype(str, enum.Enum):
    """Storage of ``scale_inv``: fp32, or E8M0 (a power of two, MX formats)."""

    FP32 = "FP32"
    E8M0 = "E8M0"

    def __str__(self) -> str:
        return self.value


class ScalingStrategy(str, enum.Enum):
    """How scales are obtained. Only ``DYNAMIC`` (from the current tensor's amax) exists."""

    DYNAMIC = "DYNAMIC"

    def __str__(self) -> str:
        return self.value


class ScalingRecipe(NamedTuple):
    """Per-operand quantization options.

    Attributes:
        use_2d_block: square blocks (``bs x bs`` for BLOCKWISE, ``32 x 32`` for MX), for weights.
        use_sr: stochastic rounding (FP4 only).
        use_rht: 16-point random Hadamard transform before quantizing (FP4 only).
        shuffle_scale: write the E8M0 scales in AITER's pre-shuffled layout (MX only).
        shuffle_out: write the data in AITER's 16x16 pre-shuffled layout (MX only).
    """

    use_2d_block: bool = False
    use_sr: bool = False
    use_rht: bool = False
    shuffle_scale: bool = False
    shuffle_out: bool = False


#: The recipe ``None`` stands for (one shared instance: a NamedTuple is immutable).
_DEFAULT_RECIPE = ScalingRecipe()

# Name -> member tables (plain dict lookups, which torch.compile traces; enum calls it may not).
_FORMATS = {f.value: f for f in Format}
_GRANULARITIES = {g.value: g for g in ScalingGranularity}

MXFP8_BLOCK_SIZE = 32
MXFP4_BLOCK_SIZE = 32
#: MX data is zero-padded along the blocked (inner) dim to a multiple of this.
MXFP8_PADDING_ALIGN_SIZE = 128
MXFP4_PADDING_ALIGN_SIZE = 128
DEFAULT_BLOCK_SIZE = 128
#: Grouped MX: each group's rows are padded to a multiple of these (row-wise / col-wise copies).
MXFP8_GROUP_ROW_ALIGN = 32
MXFP8_GROUP_COL_ALIGN = 128
MXFP4_GROUP_COL_ALIGN = 512
#: ``scale = fp8_max / max(amax, QUANT_EPS)``: an all-zero block still gets a finite scale.
QUANT_EPS = 1e-12

#: torch's packed FP4 dtype (two E2M1 values per byte), or ``None`` on a torch without it.
FLOAT4_E2M1FN_X2: torch.dtype | None = getattr(torch, "float4_e2m1fn_x2", None)
#: The dtype MX scales are returned in: ``torch.float8_e8m0fnu`` when torch has it, else uint8.
E8M0_DTYPE: torch.dtype = getattr(torch, "float8_e8m0fnu", torch.uint8)

_E4M3 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
_E5M2 = (torch.float8_e5m2, torch.float8_e5m2fnuz)
#: Every FP8 element dtype the library accepts.
FP8_DTYPES: tuple[torch.dtype, ...] = _E4M3 + _E5M2
#: GPU architectures whose FP8 is the FNUZ flavour (no negative zero, NaN = 0x80, bias+1).
_FNUZ_ARCHS = frozenset({"gfx940", "gfx941", "gfx942"})


def uses_fnuz(device: torch.device | str | None = None) -> bool:
    """Whether FP8 on ``device`` is the FNUZ flavour (gfx942); ``None``/CPU: OCP."""
    dev = torch.device(device) if isinstance(device, str) else device
    return platform_of(dev).arch in _FNUZ_ARCHS


def float8_e4m3_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """``float8_e4m3fnuz`` on gfx942, ``float8_e4m3fn`` elsewhere (CPU, NVIDIA, gfx950)."""
    return torch.float8_e4m3fnuz if uses_fnuz(device) else torch.float8_e4m3fn


def float8_e5m2_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """``float8_e5m2fnuz`` on gfx942, ``float8_e5m2`` elsewhere (CPU, NVIDIA, gfx950)."""
    return torch.float8_e5m2fnuz if uses_fnuz(device) else torch.float8_e5m2


def float4_e2m1_dtype() -> torch.dtype:
    """``torch.float4_e2m1fn_x2``; raises ``RuntimeError`` on a torch without it."""
    if FLOAT4_E2M1FN_X2 is None:
        raise RuntimeError(f"FP4 needs torch.float4_e2m1fn_x2, which torch {torch.__version__} lacks")
    return FLOAT4_E2M1FN_X2


# -- hardware support, Primus-Turbo's check_* ------------------------------------------------------------
#
# ``(ok, reason)`` for the device (``None``: the current GPU, else the CPU); ``reason`` is "" when ok.
# AMD: the capability comparisons Primus-Turbo makes (FP8 from gfx942 = (9, 4), OCP FP8 and the MX
# formats from gfx950 = (9, 5)). NVIDIA: FP8 (OCP) tensor cores from sm89, block-scaled MX MMA from
# sm100. The CPU has none of them: turbo's ops still run every format there, in software, through the
# reference backend TORCH.

_NO_GPU = "no GPU: the CPU has no {what} hardware (turbo's ops emulate it through the reference backend TORCH)"


def _support(device: DeviceLike, what: str, rocm: tuple[int, int], cuda: tuple[int, int]) -> tuple[bool, str]:
    dev = resolve_device(device)
    kind = platform_of(dev).kind
    if kind == "cpu":
        return False, _NO_GPU.format(what=what)
    cap = get_device_compute_capability(dev)
    need = rocm if kind == "rocm" else cuda
    if cap >= need:
        return True, ""
    label = f"gfx{need[0]}{need[1]:x}x" if kind == "rocm" else f"sm{need[0]}{need[1]}"
    return False, f"{what} needs compute capability {need} ({label}) or newer; this GPU has {cap}"


def check_fp8_support(device: DeviceLike = None) -> tuple[bool, str]:
    """Whether the GPU computes in FP8 (gfx942+, NVIDIA sm89+)."""
    return _support(device, "FP8", (9, 4), (8, 9))


def check_fp8_ocp_support(device: DeviceLike = None) -> tuple[bool, str]:
    """Whether the GPU's FP8 is the OCP flavour ``float8_e4m3fn``/``float8_e5m2`` (gfx950+, NVIDIA
    sm89+; gfx942 computes in FNUZ)."""
    return _support(device, "OCP FP8", (9, 5), (8, 9))


def check_mxfp8_support(device: DeviceLike = None) -> tuple[bool, str]:
    """Whether the GPU has MXFP8 (E8M0-scaled 32-blocks) matrix instructions (gfx950+, NVIDIA sm100+)."""
    return _support(device, "MXFP8", (9, 5), (10, 0))


def check_mxfp4_support(device: DeviceLike = None) -> tuple[bool, str]:
    """Whether the GPU has MXFP4 matrix instructions (gfx950+, NVIDIA sm100+)."""
    return _support(device, "MXFP4", (9, 5), (10, 0))


# -- Primus-Turbo's module-level dtypes, resolved on first access -------------------------------------------

_PLATFORM_DTYPES = ("float8_e4m3", "float8_e5m2", "float4_e2m1fn_x2")


def platform_dtype(name: str) -> torch.dtype | None:
    """The value of the module attribute ``name`` (one of ``float8_e4m3``, ``float8_e5m2``,
    ``float4_e2m1fn_x2``) for the current GPU, or the CPU when torch sees none; not cached."""
    if name == "float4_e2m1fn_x2":
        return FLOAT4_E2M1FN_X2
    device = resolve_device(None)
    return float8_e4m3_dtype(device) if name == "float8_e4m3" else float8_e5m2_dtype(device)


def __getattr__(name: str) -> object:
    # PEP 562: only reached for names not defined yet; the resolved value is stored as a module
    # global, so every later access is a plain attribute read and the value stays fixed.
    if name in _PLATFORM_DTYPES:
        return globals().setdefault(name, platform_dtype(name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PLATFORM_DTYPES))


def _as_strategy(value: object) -> ScalingStrategy:
    """A config's ``strategy``: DYNAMIC (the member or its name); ``ValueError`` naming it otherwise."""
    if value is ScalingStrategy.DYNAMIC:  # the common case, without an Enum lookup (torch.compile traces this)
        return value
    try:
        return ScalingStrategy(value)
    except ValueError:
        raise ValueError(f"strategy: only DYNAMIC scaling exists, got {value!r}") from None


def as_format(value: object, name: str = "format") -> Format:
    """A :class:`Format` from a member or its name; ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, Format):
        return value
    found = _FORMATS.get(value.upper()) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{name}: expected one of {list(_FORMATS)}, got {value!r}")
    return found


def as_granularity(value: object, name: str = "granularity") -> ScalingGranularity:
    """A :class:`ScalingGranularity` from a member or its name."""
    if isinstance(value, ScalingGranularity):
        return value
    found = _GRANULARITIES.get(value.upper()) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{name}: expected one of {list(_GRANULARITIES)}, got {value!r}")
    return found


def as_recipe(value: object, name: str = "scaling_recipe") -> ScalingRecipe:
    """``None`` -> the default recipe; a :class:`ScalingRecipe` is checked to hold bools."""
    if value is None or value is _DEFAULT_RECIPE:
        return _DEFAULT_RECIPE
    if not isinstance(value, ScalingRecipe):
        raise TypeError(f"{name}: expected a ScalingRecipe or None, got {type(value).__name__}")
    if all(type(v) is bool for v in value):
        return value
    for field_name, v in zip(ScalingRecipe._fields, value, strict=True):
        if not isinstance(v, bool):
            raise TypeError(f"{name}.{field_name}: expected a bool, got {v!r}")
    return value


def fp8_dtype_for(format: Format | str, device: torch.device | str | None = None,
                  is_fwd_stage: bool = True) -> torch.dtype:
    """The FP8 dtype of ``format`` on ``device``: E4M3, E5M2, or for HYBRID E4M3 in the forward
    stage and E5M2 for the backward ``grad_out`` (``is_fwd_stage=False``)."""
    fmt = as_format(format)
    if fmt == Format.HYBRID:
        fmt = Format.E4M3 if is_fwd_stage else Format.E5M2
    if fmt == Format.E4M3:
        return float8_e4m3_dtype(device)
    if fmt == Format.E5M2:
        return float8_e5m2_dtype(device)
    raise ValueError(f"format: {fmt.value} is not an FP8 format (expected E4M3, E5M2 or HYBRID)")


def is_fp8_dtype(dtype: object) -> bool:
    return dtype in FP8_DTYPES


def is_fp4_dtype(dtype: object) -> bool:
    return FLOAT4_E2M1FN_X2 is not None and dtype == FLOAT4_E2M1FN_X2


def format_of(dtype: torch.dtype) -> Format:
    """The :class:`Format` of a low-precision torch dtype."""
    if dtype in _E4M3:
        return Format.E4M3
    if dtype in _E5M2:
        return Format.E5M2
    if is_fp4_dtype(dtype):
        return Format.E2M1_X2
    raise ValueError(f"dtype: {dtype} is not an FP8/FP4 dtype")


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 dtype (448, 240, 57344), or 6.0 for packed FP4."""
    if is_fp4_dtype(dtype):
        return 6.0
    if dtype not in FP8_DTYPES:
        raise ValueError(f"dtype: expected an FP8/FP4 dtype, got {dtype}")
    return float(torch.finfo(dtype).max)


def fp8_scale(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The FP32 scale of ``amax`` (fp32): ``fp8_max / max(amax, QUANT_EPS)``, computed as torch
    evaluates ``float / tensor`` (a reciprocal, then a product): every backend's quantizer matches
    it bit for bit, so anything that quantizes with its own amax must compute it here."""
    return fp8_max(dtype) / amax.clamp_min(QUANT_EPS)


def fp8_cast(x32: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``clamp(x32 * scale, ±fp8_max)`` cast to ``dtype`` (round to nearest even)."""
    m = fp8_max(dtype)
    return (x32 * scale).clamp(-m, m).to(dtype)


def mx_emax(dtype: torch.dtype) -> int:
    """``emax_elem`` of the OCP MX spec: the exponent of the element format's largest normal
    (E4M3: 8, E5M2: 15, E2M1: 2; E4M3FNUZ: 7)."""
    return int(math.floor(math.log2(fp8_max(dtype))))


def _check_block_size(value: object, name: str = "block_size") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


# -- the configs ------------------------------------------------------------------------------------------
#
# Both configs are plain (mutable) dataclasses, as in Primus-Turbo: ``config.format = Format.E5M2``
# works. Nothing caches a config object: every op reads the fields when it is called (the
# weight-quantization cache and the dispatcher's selection cache key on the values read), so an
# assignment takes effect on the next call. A config is unhashable (mutable), so it cannot be a dict
# key whose fields change under it.

_F8_FIELDS = ("format", "granularity", "strategy", "scale_dtype", "block_size")
#: Fields whose ``None`` means "what the granularity needs", re-resolved when the granularity changes.
_F8_AUTO = frozenset({"scale_dtype", "block_size"})


def _f8_field(name: str, value: object) -> object:
    """One field of a :class:`Float8QuantConfig`, normalized (a name to its enum member);
    ``ValueError`` naming the field."""
    if name == "format":
        fmt = as_format(value, "format")
        if fmt == Format.E2M1_X2:
            raise ValueError("format: E2M1_X2 is FP4; use Float4QuantConfig")
        return fmt
    if name == "granularity":
        return as_granularity(value, "granularity")
    if name == "strategy":
        return _as_strategy(value)
    if name == "scale_dtype":
        if value is None:
            return None
        try:
            return ScaleDtype(value)
        except ValueError:
            raise ValueError(f"scale_dtype: expected FP32 or E8M0, got {value!r}") from None
    if value is not None:
        _check_block_size(value)
    return value


def _f8_resolve(values: dict, auto: frozenset) -> tuple[dict, str | None]:
    """``values`` with the automatic fields resolved for the granularity, and the first
    inconsistency between fields (a message naming the field) or ``None``."""
    gran = values["granularity"]
    is_mx = gran == ScalingGranularity.MX_BLOCKWISE
    out = dict(values)
    if "scale_dtype" in auto:
        out["scale_dtype"] = ScaleDtype.E8M0 if is_mx else ScaleDtype.FP32
    if "block_size" in auto:
        out["block_size"] = MXFP8_BLOCK_SIZE if is_mx else None
    scale, block = out["scale_dtype"], out["block_size"]
    if is_mx and scale != ScaleDtype.E8M0:
        return out, "scale_dtype: MX_BLOCKWISE needs E8M0 scales"
    if not is_mx and scale != ScaleDtype.FP32:
        return out, f"scale_dtype: {gran.value} uses FP32 scales (E8M0 is for MX_BLOCKWISE)"
    if gran == ScalingGranularity.BLOCKWISE and block is None:
        return out, "block_size: BLOCKWISE needs a block size (e.g. 128)"
    if is_mx and block != MXFP8_BLOCK_SIZE:
        return out, f"block_size: MX_BLOCKWISE needs {MXFP8_BLOCK_SIZE}, got {block!r}"
    if not is_mx and gran != ScalingGranularity.BLOCKWISE and block is not None:
        return out, f"block_size: {gran.value} has no blocks; expected None, got {block!r}"
    return out, None


@dataclass
class Float8QuantConfig:
    """How ``gemm_fp8`` / ``Float8Linear`` / FP8 attention quantize their operands.

    Attributes:
        format: E4M3, E5M2 or HYBRID (E4M3 forward, E5M2 for ``grad_out``).
        granularity: TENSORWISE, ROWWISE, BLOCKWISE or MX_BLOCKWISE.
        strategy: DYNAMIC (the only one).
        scale_dtype: FP32, or E8M0 for MX_BLOCKWISE. ``None`` picks the one the granularity needs.
        block_size: required for BLOCKWISE (GEMMs use 128, FP8 attention 64); MX_BLOCKWISE needs
            32 (``None`` means 32); must be ``None`` for TENSORWISE/ROWWISE.

    Construction raises ``ValueError`` naming the field for a bad value or an invalid
    combination (never ``assert``).

    Fields may be assigned after construction (``config.format = Format.E5M2``): the value is
    normalized and checked on its own at once (``ValueError`` naming the field). A ``scale_dtype``
    or ``block_size`` left ``None`` (or assigned ``None``) follows the granularity, so
    ``config.granularity = ScalingGranularity.MX_BLOCKWISE`` alone gives E8M0 scales and 32-blocks.
    An assignment may leave the fields inconsistent for a while (``granularity = BLOCKWISE`` before
    ``block_size = 128``); every op that takes the config calls :meth:`validate` first, which raises
    ``ValueError`` naming ``config.<field>`` while it stays so. Every call reads the current fields:
    no cache serves a result computed with old ones. The config is unhashable (as Primus-Turbo's).
    """

    format: Format = Format.E4M3
    granularity: ScalingGranularity = ScalingGranularity.TENSORWISE
    strategy: ScalingStrategy = ScalingStrategy.DYNAMIC
    scale_dtype: ScaleDtype | None = None
    block_size: int | None = None

    __hash__ = None  # mutable: never a dict key

    def __post_init__(self) -> None:
        d = self.__dict__
        values = {name: _f8_field(name, d[name]) for name in _F8_FIELDS}
        self._settle(values, frozenset(n for n in _F8_AUTO if values[n] is None), strict=True)

    def _settle(self, values: dict, auto: frozenset, *, strict: bool) -> None:
        resolved, problem = _f8_resolve(values, auto)
        if problem is not None and strict:
            raise ValueError(problem)
        d = self.__dict__
        d.update(resolved)
        d["_auto"] = auto
        d["_problem"] = problem

    def __setattr__(self, name: str, value: object) -> None:
        d = self.__dict__
        if name not in _F8_FIELDS or "_auto" not in d:  # other attributes, and __init__'s own stores
            object.__setattr__(self, name, value)
            return
        value = _f8_field(name, value)
        values = {n: d[n] for n in _F8_FIELDS}
        values[name] = value
        auto = d["_auto"] - {name}
        if name in _F8_AUTO and value is None:
            auto |= {name}
        self._settle(values, auto, strict=False)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "_auto" not in state:  # pickled before the automatic fields were recorded: all explicit
            d = self.__dict__
            self._settle({n: d[n] for n in _F8_FIELDS}, frozenset(), strict=False)

    def validate(self, name: str = "config") -> Float8QuantConfig:
        """``self`` when its fields are consistent, else ``ValueError`` naming ``<name>.<field>``."""
        problem = self.__dict__["_problem"]
        if problem is not None:
            raise ValueError(f"{name}.{problem}")
        return self

    def dtype(self, device: torch.device | str | None = None, is_fwd_stage: bool = True) -> torch.dtype:
        """The FP8 dtype of this config on ``device`` (HYBRID: E5M2 when not ``is_fwd_stage``)."""
        return fp8_dtype_for(self.format, device, is_fwd_stage)


def _f4_field(name: str, value: object) -> object:
    """One field of a :class:`Float4QuantConfig`, normalized; ``ValueError`` / ``TypeError`` naming it."""
    if name == "format":
        if as_format(value, "format") != Format.E2M1_X2:
            raise ValueError(f"format: Float4QuantConfig needs E2M1_X2, got {value!r}")
        return Format.E2M1_X2
    if name == "granularity":
        if as_granularity(value, "granularity") != ScalingGranularity.MX_BLOCKWISE:
            raise ValueError(f"granularity: Float4QuantConfig needs MX_BLOCKWISE, got {value!r}")
        return ScalingGranularity.MX_BLOCKWISE
    if name == "strategy":
        return _as_strategy(value)
    if name == "scale_dtype":
        if value is ScaleDtype.E8M0:
            return value
        try:
            scale_dtype = ScaleDtype(value)
        except ValueError:
            scale_dtype = None
        if scale_dtype != ScaleDtype.E8M0:
            raise ValueError(f"scale_dtype: Float4QuantConfig needs E8M0, got {value!r}")
        return scale_dtype
    if name == "block_size":
        if value != MXFP4_BLOCK_SIZE or isinstance(value, bool):
            raise ValueError(f"block_size: Float4QuantConfig needs {MXFP4_BLOCK_SIZE}, got {value!r}")
        return value
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")
    return value


_F4_FIELDS = ("format", "granularity", "strategy", "scale_dtype", "block_size", "use_gradient_sr", "use_preshuffle")


@dataclass
class Float4QuantConfig:
    """MXFP4 quantization of ``gemm_fp4`` / grouped FP4 GEMM operands.

    Only one combination exists: E2M1_X2 values, MX_BLOCKWISE, DYNAMIC, E8M0 scales, blocks of 32.
    ``use_gradient_sr``: stochastic rounding of ``grad_out``; ``use_preshuffle``: AITER
    pre-shuffled layouts (weights and scales). Fields may be assigned after construction; each
    value is checked at once (every field stands alone), and ops read the fields on every call.
    Unhashable, as :class:`Float8QuantConfig`.
    """

    format: Format = Format.E2M1_X2
    granularity: ScalingGranularity = ScalingGranularity.MX_BLOCKWISE
    strategy: ScalingStrategy = ScalingStrategy.DYNAMIC
    scale_dtype: ScaleDtype = ScaleDtype.E8M0
    block_size: int = MXFP4_BLOCK_SIZE
    use_gradient_sr: bool = False
    use_preshuffle: bool = False

    __hash__ = None  # mutable: never a dict key

    def __post_init__(self) -> None:
        d = self.__dict__
        for name in _F4_FIELDS:
            d[name] = _f4_field(name, d[name])
        d["_ready"] = True

    def __setattr__(self, name: str, value: object) -> None:
        if name in _F4_FIELDS and "_ready" in self.__dict__:
            value = _f4_field(name, value)
        object.__setattr__(self, name, value)

    def validate(self, name: str = "config") -> Float4QuantConfig:
        """``self`` (every field is checked when set, so a Float4QuantConfig is always consistent)."""
        return self

    def dtype(self) -> torch.dtype:
        """``torch.float4_e2m1fn_x2``."""
        return float4_e2m1_dtype()
