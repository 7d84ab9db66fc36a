"""Dense FP8 and FP4 GEMM primitives: ``gemm_fp8`` (precision FP8) and ``gemm_fp4`` (FP4), family ``gemm``.

The operands arrive **already quantized**, in the layouts ``turbo_core.ops.quantization`` produces
(data + ``scale_inv``, the dequantization multiplier). Semantics, on every backend::

    C = dequant(op(A)) @ dequant(op(B))        op(X) = X.T if trans_x else X

every product accumulated in fp32 (or wider) and rounded once to ``out_dtype``; with ``out``, the
sum ``out + C`` is formed in fp32 (or wider) and rounded once to out's dtype (beta=1).
``dequant`` multiplies each element by the scale of its block (E8M0 scales: by ``2**(byte - 127)``,
the byte 0xFF meaning NaN). Shapes: ``op(A)`` is ``[M, K]``, ``op(B)`` is ``[K, N]``; the result is
``[M, N]``, or ``[N, M]`` when ``trans_c``.

Scale layouts by granularity (each operand is scaled along the **contraction** dim K, so the
scales factor out of every partial sum):

============  ==========================================  ==============================================
granularity   a (``[M, K]``; ``[K, M]`` when trans_a)     b (``[K, N]``; ``[N, K]`` when trans_b)
============  ==========================================  ==============================================
TENSORWISE    ``[]`` fp32 (``[1]`` accepted)              ``[]`` fp32 (``[1]`` accepted)
ROWWISE       ``[M, 1]``; ``[1, M]`` when trans_a         ``[1, N]``; ``[N, 1]`` when trans_b
BLOCKWISE     1-D blocks of ``bs`` along K:               1-D along K: ``[cdiv(K,bs), N]``;
              ``[M, cdiv(K,bs)]``; ``[cdiv(K,bs), M]``    ``[N, cdiv(K,bs)]`` when trans_b
              when trans_a; or 2-D ``bs x bs`` tiles      or 2-D tiles ``[cdiv(rows,bs), cdiv(cols,bs)]``
              ``[cdiv(rows,bs), cdiv(cols,bs)]`` of the   of the stored matrix (a weight's layout)
              stored matrix
MX_BLOCKWISE  NT only: a ``[M, K]``, E8M0 ``[M, K/32]``   b ``[N, K]``, E8M0 ``[N, K/32]``
============  ==========================================  ==============================================

* BLOCKWISE: which of the two layouts an operand uses is **inferred from its scale's shape**
  (:func:`blockwise_layout`). Both shapes coincide only when the stored matrix has a single row
  or column across the contraction dim, where both readings give the same values.
  ``block_size`` is required (GEMMs use 128). K need not be a multiple of ``bs`` (the last block
  is partial), though backends may require it.
* MX_BLOCKWISE: 1x32 blocks along K, E8M0 scales (``torch.float8_e8m0fnu``, or uint8), OCP FP8
  only; K is the **padded** K of the quantizer (a multiple of 128 from ``quantize_fp8``; the
  spec requires a multiple of 32), and the padding holds zeros. A 32x32-tiled weight
  (``use_2d_block``) has the same scale layout (each tile's scale repeated on its 32 rows).
* FP8 dtypes: ``float8_e4m3fn``/``float8_e5m2`` (OCP) or their ``fnuz`` variants (gfx942), both
  operands of one flavour; E4M3 x E4M3, E5M2 x E5M2 and the HYBRID pairs (E4M3 x E5M2, E5M2 x E4M3).

``gemm_fp4``: MXFP4, NT only. a ``[M, K/2]`` and b ``[N, K/2]`` of ``torch.float4_e2m1fn_x2`` (two
E2M1 values per byte, the even element in the low nibble), E8M0 scales ``[M, K/32]`` / ``[N, K/32]``
(K counts unpacked values, a multiple of 32; the quantizer pads it to 128).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs._checks import (
    FLOAT_DTYPES,
    dtype_name,
    require_bool,
    require_dtype,
    require_same_device,
    require_tensor,
)
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
    "GEMM_FP4",
    "GEMM_FP8",
    "OCP_FP8_DTYPES",
    "GemmFp4Args",
    "GemmFp8Args",
    "blockwise_layout",
    "cdiv",
    "check_block_size",
    "check_blockwise_scale",
    "check_fp8_pair",
    "check_granularity",
    "check_mx_operand",
    "check_out",
    "check_out_dtype",
    "check_scale_shape",
    "check_tensorwise_scale",
    "gemm_fp4_dims",
    "gemm_fp8_dims",
    "require_scale",
]

G = ScalingGranularity
#: The FP8 dtypes MX formats use (OCP only).
OCP_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
#: Dtypes an E8M0 scale may come in: torch's E8M0 dtype, or its raw bytes as uint8.
E8M0_SCALE_DTYPES = tuple(dict.fromkeys((E8M0_DTYPE, torch.uint8)))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, eq=False)
class GemmFp8Args:
    """``C = dequant(op(A)) @ dequant(op(B))`` on FP8 operands (see the module docstring).

    Fields:
        a: FP8 ``[M, K]``, or ``[K, M]`` when ``trans_a``.
        a_scale_inv: a's scales (fp32, or E8M0 for MX_BLOCKWISE), layout by granularity.
        b: FP8 ``[K, N]``, or ``[N, K]`` when ``trans_b``; a's FP8 flavour (OCP or FNUZ).
        b_scale_inv: b's scales.
        trans_a, trans_b: operand layouts (MX_BLOCKWISE: NT only).
        out_dtype: fp16/bf16/fp32 result dtype; required unless ``out`` is given.
        granularity: a :class:`ScalingGranularity` or its string value.
        block_size: BLOCKWISE: the block edge (e.g. 128); MX_BLOCKWISE: ``None`` or 32;
            TENSORWISE/ROWWISE: ``None``.
        trans_c: write ``C.T`` (``[N, M]``).
        out: when given, accumulate into it (``out += C``, beta=1) in its dtype (fp16/bf16/fp32)
            and return it; it must have the result's shape. The fused-wgrad path.
    """

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    trans_a: bool = False
    trans_b: bool = False
    out_dtype: torch.dtype | None = None
    granularity: ScalingGranularity | str = G.TENSORWISE
    block_size: int | None = None
    trans_c: bool = False
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else self.out_dtype


@dataclass(frozen=True, eq=False)
class GemmFp4Args:
    """MXFP4 ``C = dequant(A) @ dequant(B).T`` (NT only; see the module docstring).

    Fields:
        a: ``torch.float4_e2m1fn_x2`` ``[M, K/2]``; a_scale_inv: E8M0 ``[M, K/32]``.
        b: ``torch.float4_e2m1fn_x2`` ``[N, K/2]``; b_scale_inv: E8M0 ``[N, K/32]``.
        trans_a, trans_b: must be ``False`` / ``True`` (kept so the call reads like ``gemm_fp8``).
        out_dtype, trans_c, out: as in :class:`GemmFp8Args`.
    """

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    trans_a: bool = False
    trans_b: bool = True
    out_dtype: torch.dtype | None = None
    trans_c: bool = False
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else self.out_dtype


def gemm_fp8_dims(args: GemmFp8Args) -> tuple[int, int, int]:
    """``(M, N, K)`` of a ``gemm_fp8`` call (MX: K is the padded K)."""
    m, k = (args.a.shape[1], args.a.shape[0]) if args.trans_a else (args.a.shape[0], args.a.shape[1])
    n = args.b.shape[0] if args.trans_b else args.b.shape[1]
    return int(m), int(n), int(k)


def gemm_fp4_dims(args: GemmFp4Args) -> tuple[int, int, int]:
    """``(M, N, K)`` of a ``gemm_fp4`` call, K counting unpacked values (padded)."""
    return int(args.a.shape[0]), int(args.b.shape[0]), 2 * int(args.a.shape[1])


# -- shared checks (also used by the grouped specs) -------------------------------------------------

def check_fp8_pair(a: torch.Tensor, b: torch.Tensor, *, mx: bool, names: tuple[str, str] = ("a", "b")) -> None:
    """Both operands FP8 of one flavour (OCP or FNUZ; MX: OCP only). HYBRID pairs are fine."""
    allowed = OCP_FP8_DTYPES if mx else FP8_DTYPES
    for name, t in zip(names, (a, b), strict=True):
        if t.dtype not in allowed:
            what = "an OCP FP8 dtype (MX_BLOCKWISE)" if mx else "an FP8 dtype"
            names_ = ", ".join(dtype_name(d) for d in allowed)
            raise TypeError(f"{name}: expected {what} in ({names_}), got {dtype_name(t.dtype)}")
    if (a.dtype in _FNUZ) != (b.dtype in _FNUZ):
        raise TypeError(f"{names[1]}: expected the FP8 flavour of {names[0]} ({dtype_name(a.dtype)}: "
                        f"{'FNUZ' if a.dtype in _FNUZ else 'OCP'}), got {dtype_name(b.dtype)}")


def check_out_dtype(out_dtype: object, out: torch.Tensor | None) -> None:
    if out is None and out_dtype is None:
        raise TypeError("out_dtype: required (float16, bfloat16 or float32) when out is not given")
    if out_dtype is not None:
        require_dtype("out_dtype", out_dtype, FLOAT_DTYPES)


def check_block_size(granularity: G, block_size: object) -> int | None:
    """The block size a granularity uses (BLOCKWISE: required; MX: 32; else None)."""
    if granularity == G.BLOCKWISE:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size: BLOCKWISE needs a positive int block size (e.g. 128), got {block_size!r}")
        return block_size
    if granularity == G.MX_BLOCKWISE:
        if block_size not in (None, MXFP8_BLOCK_SIZE) or isinstance(block_size, bool):
            raise ValueError(f"block_size: MX_BLOCKWISE uses blocks of {MXFP8_BLOCK_SIZE}, got {block_size!r}")
        return MXFP8_BLOCK_SIZE
    if block_size is not None:
        raise ValueError(f"block_size: {granularity.value} has no blocks; expected None, got {block_size!r}")
    return None


def check_granularity(value: object) -> G:
    return as_granularity(value, "granularity")


def require_scale(name: str, scale: object, *, mx: bool) -> torch.Tensor:
    dtypes = E8M0_SCALE_DTYPES if mx else (torch.float32,)
    return require_tensor(name, scale, dtypes=dtypes)


def check_tensorwise_scale(name: str, scale: torch.Tensor) -> None:
    if tuple(scale.shape) not in ((), (1,)):
        raise ValueError(f"{name}: TENSORWISE expects a 0-dim fp32 scale (shape ()), got shape {tuple(scale.shape)}")


def check_scale_shape(name: str, scale: torch.Tensor, want: tuple[int, ...], what: str) -> None:
    if tuple(scale.shape) != tuple(want):
        raise ValueError(f"{name}: expected shape {tuple(want)} ({what}), got {tuple(scale.shape)}")


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


def check_mx_operand(name: str, data: torch.Tensor, scale: torch.Tensor, *, packed: bool) -> int:
    """An MX operand ``[..., rows, K(/2)]`` with E8M0 scales ``[..., rows, K/32]``; returns K."""
    k = data.shape[-1] * (2 if packed else 1)
    if k % MXFP8_BLOCK_SIZE:
        raise ValueError(f"{name}: MX operands hold a multiple of {MXFP8_BLOCK_SIZE} values along K "
                         f"(the quantizer pads K to 128), got K={k}")
    want = (*data.shape[:-1], k // MXFP8_BLOCK_SIZE)
    check_scale_shape(f"{name}_scale_inv", scale, want, f"E8M0, one per 1x{MXFP8_BLOCK_SIZE} block along K")
    return k


def check_out(out: torch.Tensor | None, want: tuple[int, ...], detail: str = "") -> None:
    if out is None:
        return
    require_tensor("out", out, ndim=len(want), dtypes=FLOAT_DTYPES)
    if tuple(out.shape) != tuple(want):
        raise ValueError(f"out: expected shape {tuple(want)}{detail}, got {tuple(out.shape)}")


# -- validators --------------------------------------------------------------------------------------

def _validate_fp8(args: GemmFp8Args) -> None:
    gran = check_granularity(args.granularity)
    mx = gran == G.MX_BLOCKWISE
    a = require_tensor("a", args.a, ndim=2)
    b = require_tensor("b", args.b, ndim=2)
    check_fp8_pair(a, b, mx=mx)
    sa = require_scale("a_scale_inv", args.a_scale_inv, mx=mx)
    sb = require_scale("b_scale_inv", args.b_scale_inv, mx=mx)
    for name in ("trans_a", "trans_b", "trans_c"):
        require_bool(name, getattr(args, name))
    check_out_dtype(args.out_dtype, args.out)
    bs = check_block_size(gran, args.block_size)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, out=args.out)
    m, n, k = gemm_fp8_dims(args)
    k_b = b.shape[1] if args.trans_b else b.shape[0]
    if k != k_b:
        raise ValueError(f"b: inner dimension mismatch: op(a) is [{m}, {k}] but op(b) is [{k_b}, {n}]"
                         f" (trans_a={args.trans_a}, trans_b={args.trans_b})")
    a_k = 0 if args.trans_a else 1  # the dim of the stored a that K runs along
    b_k = 1 if args.trans_b else 0
    if gran == G.TENSORWISE:
        check_tensorwise_scale("a_scale_inv", sa)
        check_tensorwise_scale("b_scale_inv", sb)
    elif gran == G.ROWWISE:
        check_scale_shape("a_scale_inv", sa, (1, m) if args.trans_a else (m, 1), "ROWWISE: one scale per row of op(a)")
        check_scale_shape("b_scale_inv", sb, (n, 1) if args.trans_b else (1, n),
                          "ROWWISE: one scale per column of op(b)")
    elif gran == G.BLOCKWISE:
        check_blockwise_scale("a_scale_inv", a, sa, a_k - 2, bs, "K")
        check_blockwise_scale("b_scale_inv", b, sb, b_k - 2, bs, "K")
    else:
        if args.trans_a or not args.trans_b:
            raise ValueError(f"trans_a: MX_BLOCKWISE GEMM is NT only (trans_a=False, trans_b=True), got "
                             f"trans_a={args.trans_a}, trans_b={args.trans_b}")
        check_mx_operand("a", a, sa, packed=False)
        check_mx_operand("b", b, sb, packed=False)
    check_out(args.out, (n, m) if args.trans_c else (m, n), f" (trans_c={args.trans_c})")


def _validate_fp4(args: GemmFp4Args) -> None:
    if FLOAT4_E2M1FN_X2 is None:
        raise RuntimeError(f"a: FP4 needs torch.float4_e2m1fn_x2, which torch {torch.__version__} lacks")
    a = require_tensor("a", args.a, ndim=2, dtypes=(FLOAT4_E2M1FN_X2,))
    b = require_tensor("b", args.b, ndim=2, dtypes=(FLOAT4_E2M1FN_X2,))
    sa = require_scale("a_scale_inv", args.a_scale_inv, mx=True)
    sb = require_scale("b_scale_inv", args.b_scale_inv, mx=True)
    for name in ("trans_a", "trans_b", "trans_c"):
        require_bool(name, getattr(args, name))
    if args.trans_a or not args.trans_b:
        raise ValueError(f"trans_a: MXFP4 GEMM is NT only (trans_a=False, trans_b=True), got "
                         f"trans_a={args.trans_a}, trans_b={args.trans_b}")
    check_out_dtype(args.out_dtype, args.out)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, out=args.out)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"b: inner dimension mismatch: a is [{a.shape[0]}, K/2={a.shape[1]}] but b is "
                         f"[{b.shape[0]}, K/2={b.shape[1]}] (NT)")
    check_mx_operand("a", a, sa, packed=True)
    check_mx_operand("b", b, sb, packed=True)
    m, n = a.shape[0], b.shape[0]
    check_out(args.out, (n, m) if args.trans_c else (m, n), f" (trans_c={args.trans_c})")


GEMM_FP8 = define_primitive(Primitive(
    name="gemm_fp8",
    args_type=GemmFp8Args,
    precision=PrecisionType.FP8,
    family="gemm",
    validate=_validate_fp8,
    mutates=("out",),
    doc="FP8 GEMM on quantized operands (TENSORWISE, ROWWISE, BLOCKWISE, MX_BLOCKWISE; E4M3/E5M2/hybrid): "
        "C = dequant(op(A)) @ dequant(op(B)), fp32 accumulation, optional trans_c and accumulate-into-out.",
))

GEMM_FP4 = define_primitive(Primitive(
    name="gemm_fp4",
    args_type=GemmFp4Args,
    precision=PrecisionType.FP4,
    family="gemm",
    validate=_validate_fp4,
    mutates=("out",),
    doc="MXFP4 GEMM (NT, packed E2M1, E8M0 1x32 scales): C = dequant(A) @ dequant(B)^T, fp32 accumulation, "
        "optional trans_c and accumulate-into-out.",
))
