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
from turbo_core.dispatch.specs.validate import (
    blockwise_layout,
    cdiv,
    check_block_size,
    check_blockwise_scale,
    check_fp4_operands,
    check_fp8_operands,
    check_inner_dim,
    check_mx_operand,
    check_out,
    check_out_dtype,
    check_tensorwise_scale,
    require_bool,
    require_same_device,
    require_shape,
)
from turbo_core.low_precision import ScalingGranularity

__all__ = [
    "GEMM_FP4",
    "GEMM_FP8",
    "GemmFp4Args",
    "GemmFp8Args",
    "blockwise_layout",
    "cdiv",
    "gemm_fp4_dims",
    "gemm_fp8_dims",
]

G = ScalingGranularity


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


# -- validators --------------------------------------------------------------------------------------

def _validate_fp8(args: GemmFp8Args) -> None:
    gran, a, sa, b, sb = check_fp8_operands(args.granularity, args.a, args.a_scale_inv, args.b, args.b_scale_inv,
                                            a_ndim=2, b_ndim=2)
    for name in ("trans_a", "trans_b", "trans_c"):
        require_bool(name, getattr(args, name))
    check_out_dtype(args.out_dtype, args.out)
    bs = check_block_size(gran, args.block_size)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, out=args.out)
    m, n, k = gemm_fp8_dims(args)
    check_inner_dim(m, k, b.shape[1] if args.trans_b else b.shape[0], n, args.trans_a, args.trans_b)
    a_k = 0 if args.trans_a else 1  # the dim of the stored a that K runs along
    b_k = 1 if args.trans_b else 0
    if gran == G.TENSORWISE:
        check_tensorwise_scale("a_scale_inv", sa)
        check_tensorwise_scale("b_scale_inv", sb)
    elif gran == G.ROWWISE:
        require_shape("a_scale_inv", sa, (1, m) if args.trans_a else (m, 1), "ROWWISE: one scale per row of op(a)")
        require_shape("b_scale_inv", sb, (n, 1) if args.trans_b else (1, n), "ROWWISE: one scale per column of op(b)")
    elif gran == G.BLOCKWISE:
        check_blockwise_scale("a_scale_inv", a, sa, a_k - 2, bs, "K")
        check_blockwise_scale("b_scale_inv", b, sb, b_k - 2, bs, "K")
    else:
        _require_nt("MX_BLOCKWISE", args)
        check_mx_operand("a", a, sa, packed=False)
        check_mx_operand("b", b, sb, packed=False)
    check_out(args.out, (n, m) if args.trans_c else (m, n), f"trans_c={args.trans_c}")


def _require_nt(what: str, args: GemmFp8Args | GemmFp4Args) -> None:
    if args.trans_a or not args.trans_b:
        raise ValueError(f"trans_a: {what} GEMM is NT only (trans_a=False, trans_b=True), got "
                         f"trans_a={args.trans_a}, trans_b={args.trans_b}")


def _validate_fp4(args: GemmFp4Args) -> None:
    a, sa, b, sb = check_fp4_operands(args.a, args.a_scale_inv, args.b, args.b_scale_inv, a_ndim=2, b_ndim=2)
    for name in ("trans_a", "trans_b", "trans_c"):
        require_bool(name, getattr(args, name))
    _require_nt("MXFP4", args)
    check_out_dtype(args.out_dtype, args.out)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, out=args.out)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"b: inner dimension mismatch: a is [{a.shape[0]}, K/2={a.shape[1]}] but b is "
                         f"[{b.shape[0]}, K/2={b.shape[1]}] (NT)")
    check_mx_operand("a", a, sa, packed=True)
    check_mx_operand("b", b, sb, packed=True)
    m, n = a.shape[0], b.shape[0]
    check_out(args.out, (n, m) if args.trans_c else (m, n), f"trans_c={args.trans_c}")


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
