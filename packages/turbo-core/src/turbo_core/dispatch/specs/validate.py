"""Validators shared by the primitive specs and the ops that build their arguments.

Every check raises ``TypeError`` (wrong kind: not a tensor, a dtype, an int) or ``ValueError``
(right kind, wrong value or shape) with a message that starts with the argument's name and says
what was expected, e.g. ``"b: expected the dtype of a (bfloat16), got float16"``. The checks read
metadata only (shape, dtype, device, strides), except where a name says otherwise
(:func:`check_group_values`, which reads values only when :func:`values_readable` allows it).
"""

from __future__ import annotations

import math
import os

import torch

from turbo_core.low_precision import (
    E8M0_DTYPE,
    FLOAT4_E2M1FN_X2,
    FP8_DTYPES,
    MXFP8_BLOCK_SIZE,
    ScalingGranularity,
    as_granularity,
)

__all__ = [
    "E8M0_SCALE_DTYPES",
    "FLOAT_DTYPES",
    "FNUZ_FP8_DTYPES",
    "INDEX_DTYPES",
    "OCP_FP8_DTYPES",
    "SCHEDULES",
    "DEVICE_ASSERTS_ENV",
    "assert_group_values_async",
    "blockwise_layout",
    "cdiv",
    "check_block_size",
    "check_blockwise_scale",
    "check_fp4_operands",
    "check_fp8_operands",
    "check_group_lens",
    "check_group_offs",
    "check_group_values",
    "check_grouped_inner_dim",
    "check_inner_dim",
    "check_mx_operand",
    "check_num_cu_schedule",
    "check_out",
    "check_out_dtype",
    "check_tensorwise_scale",
    "dtype_name",
    "require_bool",
    "require_choice",
    "require_contiguous",
    "require_dtype",
    "require_eps",
    "require_even_last_dim",
    "require_float",
    "require_fp4_granularity",
    "require_fp4_support",
    "require_int",
    "require_nonempty_last_dim",
    "require_rows",
    "require_same_device",
    "require_same_dtype",
    "require_scale",
    "require_shape",
    "require_tensor",
    "values_readable",
    "device_asserts",
]

G = ScalingGranularity

#: The high-precision dtypes the ops compute in.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Integer index dtypes (expert ids, group lengths and offsets where both widths are accepted).
INDEX_DTYPES = (torch.int32, torch.int64)
#: The OCP FP8 dtypes (the only ones MX formats use) and the FNUZ ones (gfx942).
OCP_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FNUZ_FP8_DTYPES = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
#: Dtypes an E8M0 scale may come in: torch's E8M0 dtype, or its raw bytes as uint8.
E8M0_SCALE_DTYPES = tuple(dict.fromkeys((E8M0_DTYPE, torch.uint8)))
#: Values of a grouped GEMM's ``schedule``: "static" (each workgroup takes a fixed share of the
#: tiles) or "work_steal" (workgroups take tiles from a shared counter; needs ``num_cu=None``).
SCHEDULES = ("static", "work_steal")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- Python values -----------------------------------------------------------------------------------

def require_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")


def require_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` is an int (not a bool), ``>= minimum`` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return value


def require_float(name: str, value: object, *, optional: bool = False) -> float | None:
    """``value`` is a finite real number (an int or a float, not a bool), or ``None`` when ``optional``."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name}: expected {'None or ' if optional else ''}a finite float, got {value!r}")
    return float(value)


def require_eps(eps: object) -> None:
    """``eps`` is a finite real number ``> 0``."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps: expected a float > 0, got {eps!r}")
    if not 0 < eps < math.inf:  # (also false for NaN; no math.isfinite: traceable by dynamo)
        raise ValueError(f"eps: expected a finite float > 0, got {eps!r}")


def require_choice(name: str, value: object, choices: tuple) -> None:
    if value not in choices:
        want = " or ".join(repr(c) for c in choices)
        raise ValueError(f"{name}: expected {want}, got {value!r}")


def require_dtype(name: str, value: object, allowed: tuple[torch.dtype, ...]) -> None:
    """``value`` is a ``torch.dtype`` among ``allowed`` (an ``out_dtype`` argument)."""
    if not isinstance(value, torch.dtype) or value not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{name}: expected one of ({names}), got {value!r}")


# -- tensors -----------------------------------------------------------------------------------------

def require_tensor(name: str, value: object, *, ndim: int | tuple[int, ...] | None = None,
                   dtypes: tuple[torch.dtype, ...] | None = None) -> torch.Tensor:
    """``value`` is a tensor, of rank ``ndim`` (one of them, for a tuple) and a dtype in ``dtypes``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if value.dim() not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name}: expected a {want} tensor, got shape {tuple(value.shape)}")
    if dtypes is not None and value.dtype not in dtypes:
        names = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name}: expected dtype in ({names}), got {dtype_name(value.dtype)}")
    return value


def require_same_device(**tensors: torch.Tensor | None) -> None:
    """Every given tensor (``None`` skipped) is on the device of the first."""
    devices = {k: v.device for k, v in tensors.items() if v is not None}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name}: expected a tensor on {first} (like {first_name}), got {dev}")


def require_same_dtype(name: str, value: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if value.dtype != ref.dtype:
        raise TypeError(
            f"{name}: expected the dtype of {ref_name} ({dtype_name(ref.dtype)}), got {dtype_name(value.dtype)}"
        )


def require_shape(name: str, value: torch.Tensor, want: tuple[int, ...], what: str = "") -> None:
    """``value`` has shape ``want``; ``what`` says where that shape comes from."""
    if tuple(value.shape) != tuple(want):
        detail = f" ({what})" if what else ""
        raise ValueError(f"{name}: expected shape {tuple(want)}{detail}, got {tuple(value.shape)}")


def require_rows(name: str, value: torch.Tensor, rows: int, what: str) -> None:
    """``value``'s first dim is ``rows``; ``what`` says what a row is."""
    if value.shape[0] != rows:
        raise ValueError(f"{name}: expected {rows} rows ({what}), got shape {tuple(value.shape)}")


def require_contiguous(name: str, value: torch.Tensor) -> None:
    """``value`` is in row-major contiguous layout."""
    if not value.is_contiguous():
        raise ValueError(
            f"{name}: expected a contiguous tensor, got strides {tuple(value.stride())} for shape"
            f" {tuple(value.shape)} (call .contiguous())"
        )


def require_even_last_dim(name: str, value: torch.Tensor) -> None:
    """A gated-linear-unit input ``[..., 2H]``: the gate half, then the up half."""
    if value.shape[-1] % 2:
        raise ValueError(
            f"{name}: expected an even last dim (gate half, then up half), got shape {tuple(value.shape)}"
        )


def require_nonempty_last_dim(name: str, value: torch.Tensor) -> None:
    if value.shape[-1] == 0:
        raise ValueError(f"{name}: expected a non-empty last (hidden) dim, got shape {tuple(value.shape)}")


def values_readable(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values costs no device sync and is possible: a CPU tensor, outside
    ``torch.compile`` tracing, and not a fake tensor."""
    if t.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(t, FakeTensor)


# -- GEMM shapes -------------------------------------------------------------------------------------

def check_inner_dim(m: int, k: int, k_b: int, n: int, trans_a: bool, trans_b: bool) -> None:
    """``op(a)`` ``[m, k]`` and ``op(b)`` ``[k_b, n]`` agree on K."""
    if k != k_b:
        raise ValueError(f"b: inner dimension mismatch: op(a) is [{m}, {k}] but op(b) is [{k_b}, {n}]"
                         f" (trans_a={trans_a}, trans_b={trans_b})")


def check_grouped_inner_dim(a: torch.Tensor, b: torch.Tensor, trans_b: bool, *, packed: bool = False) -> None:
    """A grouped GEMM's a ``[M_total, K]`` and b ``[G, K, N]`` (``[G, N, K]`` when ``trans_b``) agree
    on K (``packed``: FP4, both last dims hold K/2)."""
    k = a.shape[1]
    k_b = b.shape[2] if trans_b else b.shape[1]
    if k != k_b:
        g, kd = b.shape[0], f"K/2={k}" if packed else f"{k}"
        want = f"[{g}, N, {k}]" if trans_b else f"[{g}, {k}, N]"
        raise ValueError(f"b: inner dimension mismatch: a is [{a.shape[0]}, {kd}] so b must be {want}"
                         f" (trans_b={trans_b}), got {tuple(b.shape)}")


def check_out(out: torch.Tensor | None, want: tuple[int, ...], detail: str = "") -> None:
    """An accumulate-into ``out`` (``None``: none): fp16/bf16/fp32 of the result's shape ``want``."""
    if out is None:
        return
    require_tensor("out", out, ndim=len(want), dtypes=FLOAT_DTYPES)
    require_shape("out", out, want, detail)


def check_out_dtype(out_dtype: object, out: torch.Tensor | None) -> None:
    """``out_dtype`` fp16/bf16/fp32, required unless ``out`` (whose dtype the result takes) is given."""
    if out is None and out_dtype is None:
        raise TypeError("out_dtype: required (float16, bfloat16 or float32) when out is not given")
    if out_dtype is not None:
        require_dtype("out_dtype", out_dtype, FLOAT_DTYPES)


# -- groups (tokens packed by group along M) ---------------------------------------------------------

def check_group_lens(group_lens: object, groups: int | None = None, *,
                     dtypes: tuple[torch.dtype, ...] = (torch.int64,)) -> torch.Tensor:
    """``group_lens`` is a 1-D integer tensor (of length ``groups`` when given)."""
    require_tensor("group_lens", group_lens, ndim=1, dtypes=dtypes)
    if groups is not None and group_lens.shape[0] != groups:
        raise ValueError(
            f"group_lens: expected {groups} lengths (one per group of b), got shape {tuple(group_lens.shape)}"
        )
    return group_lens


def check_group_offs(group_offs: object, groups: int, *,
                     dtypes: tuple[torch.dtype, ...] = (torch.int64,)) -> torch.Tensor:
    """``group_offs`` is a 1-D integer tensor of ``groups + 1`` offsets."""
    require_tensor("group_offs", group_offs, ndim=1, dtypes=dtypes)
    require_shape("group_offs", group_offs, (groups + 1,), "G + 1 offsets")
    return group_offs


def check_num_cu_schedule(num_cu: object, schedule: object = "static") -> None:
    """``num_cu`` ``None`` or a positive int; ``schedule`` one of :data:`SCHEDULES` (work stealing
    uses every compute unit, so it needs ``num_cu=None``)."""
    if num_cu is not None and (isinstance(num_cu, bool) or not isinstance(num_cu, int) or num_cu < 1):
        raise ValueError(f"num_cu: expected None or a positive int, got {num_cu!r}")
    require_choice("schedule", schedule, SCHEDULES)
    if schedule == "work_steal" and num_cu is not None:
        raise ValueError(f"num_cu: schedule='work_steal' needs num_cu=None, got {num_cu!r}")


def _short(t: torch.Tensor, limit: int = 16) -> str:
    values = t[:limit].tolist()
    return str(values)[:-1] + ", ...]" if t.numel() > limit else str(values)


def check_group_values(group_lens: torch.Tensor, group_offs: torch.Tensor | None, m_total: int) -> None:
    """Value checks where reading the values is free (:func:`values_readable`): lengths
    non-negative, summing to at most ``m_total``, and ``group_offs`` (when given) their exclusive
    prefix sum. Does nothing for GPU tensors (see :func:`assert_group_values_async`) or while
    ``torch.compile`` traces (the primitive's validator checks them when the compiled graph runs)."""
    if not values_readable(group_lens):
        return
    if group_lens.numel() and int(group_lens.min()) < 0:
        raise ValueError(f"group_lens: expected non-negative lengths, got {_short(group_lens)}")
    total = int(group_lens.sum())
    if total > m_total:
        raise ValueError(f"group_lens: the lengths sum to {total}, past the {m_total} rows of the packed operand")
    if group_offs is not None:
        want = torch.zeros(group_lens.shape[0] + 1, dtype=torch.int64)
        torch.cumsum(group_lens, 0, out=want[1:])
        if not torch.equal(group_offs, want):
            raise ValueError(
                f"group_offs: expected the exclusive prefix sum of group_lens {_short(want)}, got {_short(group_offs)}"
            )


#: Opt-in to the device-side value checks of :func:`assert_group_values_async` (``1``).
DEVICE_ASSERTS_ENV = "TURBO_DEVICE_ASSERTS"


def device_asserts() -> bool:
    """Whether ``$TURBO_DEVICE_ASSERTS`` is ``1``: check the values of GPU index tensors (group
    lengths and offsets) with device-side asserts. Off by default: the check is about ten small
    kernel launches a call, several times the host cost of the op itself, and a failed device-side
    assert ends the process's CUDA context rather than raising an error the caller can handle."""
    return os.environ.get(DEVICE_ASSERTS_ENV) == "1"


def assert_group_values_async(group_lens: torch.Tensor, group_offs: torch.Tensor | None, m_total: int) -> None:
    """With :func:`device_asserts` on, the checks of :func:`check_group_values` as a device-side
    assert (``torch._assert_async``): no host sync, so a violation surfaces **asynchronously**, as a
    device-side assertion failure reported by a later CUDA/HIP call (run with
    ``CUDA_LAUNCH_BLOCKING=1`` to pinpoint it). Off, nothing."""
    if not device_asserts():
        return
    ok = (group_lens >= 0).all() & (group_lens.sum() <= m_total)
    if group_offs is not None:
        ok = ok & (group_offs[0] == 0) & (group_offs[1:] == torch.cumsum(group_lens, 0)).all()
    torch._assert_async(
        ok,
        "group_lens/group_offs: expected non-negative lengths summing to at most the rows of the packed "
        "operand, and group_offs equal to their exclusive prefix sum",
    )


# -- low precision: granularity, block size, operands and scales ---------------------------------------

def check_block_size(granularity: G, block_size: object, *, mx_size: int = MXFP8_BLOCK_SIZE,
                     mx_optional: bool = True, blockless_none: bool = True) -> int | None:
    """The block size a granularity uses: BLOCKWISE a positive int (required); MX_BLOCKWISE
    ``mx_size`` (``None`` also accepted, and means ``mx_size``, when ``mx_optional``); TENSORWISE and
    ROWWISE ``None`` (any value is ignored unless ``blockless_none``)."""
    if granularity == G.BLOCKWISE:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size: BLOCKWISE needs a positive int block size (e.g. 128), got {block_size!r}")
        return block_size
    if granularity == G.MX_BLOCKWISE:
        if (isinstance(block_size, bool) or block_size != mx_size) and not (mx_optional and block_size is None):
            raise ValueError(f"block_size: MX_BLOCKWISE uses blocks of {mx_size}, got {block_size!r}")
        return mx_size
    if blockless_none and block_size is not None:
        raise ValueError(f"block_size: {granularity.value} has no blocks; expected None, got {block_size!r}")
    return None


def require_fp4_support(name: str) -> torch.dtype:
    """torch's packed FP4 dtype, or a ``RuntimeError`` naming ``name`` on a torch without it."""
    if FLOAT4_E2M1FN_X2 is None:
        raise RuntimeError(f"{name}: FP4 needs torch.float4_e2m1fn_x2, which torch {torch.__version__} lacks")
    return FLOAT4_E2M1FN_X2


def require_fp4_granularity(granularity: object) -> G:
    """FP4 (MXFP4) has E8M0 scales over 1x32 blocks only: the granularity is MX_BLOCKWISE."""
    gran = as_granularity(granularity, "granularity")
    if gran != G.MX_BLOCKWISE:
        raise ValueError(f"granularity: FP4 quantization is MX_BLOCKWISE only, got {gran.value}")
    return gran


def check_fp8_pair(a: torch.Tensor, b: torch.Tensor, *, mx: bool, names: tuple[str, str] = ("a", "b")) -> None:
    """Both operands FP8 of one flavour (OCP or FNUZ; MX: OCP only). HYBRID pairs are fine."""
    allowed = OCP_FP8_DTYPES if mx else FP8_DTYPES
    for name, t in zip(names, (a, b), strict=True):
        if t.dtype not in allowed:
            what = "an OCP FP8 dtype (MX_BLOCKWISE)" if mx else "an FP8 dtype"
            names_ = ", ".join(dtype_name(d) for d in allowed)
            raise TypeError(f"{name}: expected {what} in ({names_}), got {dtype_name(t.dtype)}")
    fnuz_a, fnuz_b = a.dtype in FNUZ_FP8_DTYPES, b.dtype in FNUZ_FP8_DTYPES
    if fnuz_a != fnuz_b:
        raise TypeError(f"{names[1]}: expected the FP8 flavour of {names[0]} ({dtype_name(a.dtype)}: "
                        f"{'FNUZ' if fnuz_a else 'OCP'}), got {dtype_name(b.dtype)}")


def require_scale(name: str, scale: object, *, mx: bool) -> torch.Tensor:
    """A GEMM operand's scales: fp32, or E8M0 (or its uint8 bytes) for MX."""
    return require_tensor(name, scale, dtypes=E8M0_SCALE_DTYPES if mx else (torch.float32,))


def check_fp8_operands(granularity: object, a: object, a_scale_inv: object, b: object, b_scale_inv: object, *,
                       a_ndim: int, b_ndim: int) -> tuple[G, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An FP8 GEMM's granularity, operands (ranks ``a_ndim``/``b_ndim``, one FP8 flavour) and the
    dtypes of their scales; returns ``(granularity, a, a_scale_inv, b, b_scale_inv)``."""
    gran = as_granularity(granularity, "granularity")
    mx = gran == G.MX_BLOCKWISE
    a = require_tensor("a", a, ndim=a_ndim)
    b = require_tensor("b", b, ndim=b_ndim)
    check_fp8_pair(a, b, mx=mx)
    sa = require_scale("a_scale_inv", a_scale_inv, mx=mx)
    sb = require_scale("b_scale_inv", b_scale_inv, mx=mx)
    return gran, a, sa, b, sb


def check_fp4_operands(a: object, a_scale_inv: object, b: object, b_scale_inv: object, *,
                       a_ndim: int, b_ndim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An MXFP4 GEMM's packed operands (ranks ``a_ndim``/``b_ndim``) and E8M0 scales; returns
    ``(a, a_scale_inv, b, b_scale_inv)``."""
    fp4 = require_fp4_support("a")
    a = require_tensor("a", a, ndim=a_ndim, dtypes=(fp4,))
    b = require_tensor("b", b, ndim=b_ndim, dtypes=(fp4,))
    sa = require_scale("a_scale_inv", a_scale_inv, mx=True)
    sb = require_scale("b_scale_inv", b_scale_inv, mx=True)
    return a, sa, b, sb


def check_tensorwise_scale(name: str, scale: torch.Tensor) -> None:
    """One scale for the whole tensor: shape ``()`` (``(1,)`` accepted)."""
    if tuple(scale.shape) not in ((), (1,)):
        raise ValueError(f"{name}: TENSORWISE expects a 0-dim fp32 scale (shape ()), got shape {tuple(scale.shape)}")


def blockwise_layout(shape: tuple[int, ...], scale_shape: tuple[int, ...], contraction_dim: int,
                     block_size: int) -> str | None:
    """Which BLOCKWISE layout a stored operand uses: ``"1d"`` (``1 x bs`` blocks along the
    contraction dim, ``contraction_dim`` being -1 or -2 of ``shape``), ``"2d"`` (``bs x bs`` tiles
    of the last two dims), or ``None`` when ``scale_shape`` is neither. Leading (batch) dims must
    match. When both shapes coincide (one row/column across the contraction) ``"1d"`` is returned;
    the two readings give the same values then."""
    *lead, r, c = shape
    one_d = [r, c]
    cd = contraction_dim % 2
    one_d[cd] = cdiv(one_d[cd], block_size)
    if tuple(scale_shape) == (*lead, *one_d):
        return "1d"
    if tuple(scale_shape) == (*lead, cdiv(r, block_size), cdiv(c, block_size)):
        return "2d"
    return None


def check_blockwise_scale(name: str, data: torch.Tensor, scale: torch.Tensor, contraction_dim: int,
                          block_size: int, kdesc: str) -> str:
    """A BLOCKWISE operand's scales in either layout of :func:`blockwise_layout`; returns it."""
    kind = blockwise_layout(tuple(data.shape), tuple(scale.shape), contraction_dim, block_size)
    if kind is None:
        *lead, r, c = data.shape
        one_d = [r, c]
        one_d[contraction_dim % 2] = cdiv(one_d[contraction_dim % 2], block_size)
        raise ValueError(
            f"{name}: BLOCKWISE expects 1x{block_size} blocks along {kdesc} (shape {tuple(lead) + tuple(one_d)}) "
            f"or {block_size}x{block_size} tiles (shape {tuple(lead) + (cdiv(r, block_size), cdiv(c, block_size))}) "
            f"for an operand of shape {tuple(data.shape)}, got {tuple(scale.shape)}")
    return kind


def check_mx_operand(name: str, data: torch.Tensor, scale: torch.Tensor, *, packed: bool,
                     scale_name: str | None = None) -> int:
    """MX data ``[..., rows, K]`` (``K/2`` bytes when ``packed``, FP4) with E8M0 scales
    ``[..., rows, K/32]``, one per 1x32 block of its last dim; returns K."""
    k = data.shape[-1] * (2 if packed else 1)
    if k % MXFP8_BLOCK_SIZE:
        raise ValueError(f"{name}: MX data holds a multiple of {MXFP8_BLOCK_SIZE} values along its last dim "
                         f"(the quantizer pads it to a multiple of 128), got {k}")
    want = (*data.shape[:-1], k // MXFP8_BLOCK_SIZE)
    require_shape(scale_name or f"{name}_scale_inv", scale, want,
                  f"E8M0, one per 1x{MXFP8_BLOCK_SIZE} block of {name}'s last dim")
    return k
