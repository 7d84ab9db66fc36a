"""Grouped FP8 and FP4 GEMM primitives (mixture-of-experts), family ``grouped_gemm``:
``grouped_gemm_fp8`` / ``grouped_gemm_fp8_variable_k`` (precision FP8) and ``grouped_gemm_fp4`` /
``grouped_gemm_fp4_variable_k`` (FP4).

Groups as in ``turbo_core.dispatch.specs.grouped_gemm``: tokens packed along M, group ``g`` owning
rows ``[group_offs[g], group_offs[g+1])``, ``group_offs`` the exclusive prefix sum of the int64
``group_lens``. Semantics (every backend): the dense ``gemm_fp8`` semantics per group,
``dequant`` then products accumulated in fp32 (or wider), rounded once to ``out_dtype``.

Forward (``grouped_gemm_fp8``): ``out[rows of g] = dequant(A_g) @ dequant(op(B[g]))``, ``[M_total, N]``,
rows past ``group_offs[-1]`` zero. a ``[M_total, K]`` (never transposed), b ``[G, K, N]`` or
``[G, N, K]`` (``trans_b``). Scale layouts:

============  ==================================  ======================================================
granularity   a_scale_inv                         b_scale_inv
============  ==================================  ======================================================
TENSORWISE    ``[]`` fp32                         ``[]`` fp32 (one scale for all of b)
ROWWISE       ``[M_total, 1]``                    b's shape with K set to 1: ``[G, 1, N]`` / ``[G, N, 1]``
BLOCKWISE     ``[cdiv(K,bs), M_total]``: 1 x bs   2-D tiles ``[G, cdiv(rows,bs), cdiv(cols,bs)]`` or
              blocks along K, scales stored       1-D blocks along K (``[G, cdiv(K,bs), N]`` /
              **transposed** (the row-wise        ``[G, N, cdiv(K,bs)]``), inferred from the shape
              layout of ``grouped_quantize_fp8``)
MX_BLOCKWISE  a ``[M_total, K]`` (K padded),      trans_b only: b ``[G, N, K]``, E8M0 ``[G, N, K/32]``
              E8M0 ``[M_total, K/32]`` (tight
              rows: blocks run along K)
============  ==================================  ======================================================

Variable K (``..._variable_k``, the wgrad): ``C[g] = dequant(A_g).T @ dequant(B_g)``, the
contraction running over group g's rows; result ``[G, K, N]`` (``[G, N, K]`` with ``trans_c``), a
group of length 0 giving zeros (with ``out``: ``out[g]`` unchanged). Operands:

============  =========================================================================================
granularity   a / b and their scales
============  =========================================================================================
TENSORWISE    a ``[M, K]``, b ``[M, N]``; scales ``[]``
ROWWISE       a ``[M, K]`` / ``[1, K]``, b ``[M, N]`` / ``[1, N]`` (one scale per column, over all of M)
BLOCKWISE     a ``[M_pad, K]`` / ``[cdiv(M_pad,bs), K]``, b ``[M_pad, N]`` / ``[cdiv(M_pad,bs), N]``: bs x 1
              blocks along M (the col-wise layout of ``grouped_quantize_fp8``); ``group_lens``/``group_offs``
              are the **padded** ones it returns, each group starting on a multiple of bs
MX_BLOCKWISE  a ``[K, M_pad]`` / E8M0 ``[K, M_pad/32]``, b ``[N, M_pad]`` / ``[N, M_pad/32]``: the
              col-wise (transposed) layout of ``grouped_quantize_fp8``, blocks of 32 along M; groups
              are the padded ones it returns (each group on a multiple of 128)
============  =========================================================================================

FP4 (MXFP4, ``torch.float4_e2m1fn_x2``, last dim packed two per byte; E8M0 scales): forward a
``[M_total, K/2]`` / ``[M_total, K/32]``, b ``[G, N, K/2]`` / ``[G, N, K/32]`` (trans_b only);
variable K a ``[K, M_pad/2]`` / ``[K, M_pad/32]``, b ``[N, M_pad/2]`` / ``[N, M_pad/32]`` with the
padded groups of ``grouped_quantize_fp4`` (col-wise: each group on a multiple of 512).

Group values are checked as in the bf16 grouped GEMM: eagerly for CPU tensors, not at all here for
GPU tensors (the ops assert them on the device, without a host sync). Block-aligned group offsets
(BLOCKWISE/MX variable K) are a precondition of backends; the reference does not need them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    cdiv,
    check_block_size,
    check_blockwise_scale,
    check_fp4_operands,
    check_fp8_operands,
    check_group_lens,
    check_group_offs,
    check_group_values,
    check_grouped_inner_dim,
    check_mx_operand,
    check_num_cu_schedule,
    check_out,
    check_out_dtype,
    check_tensorwise_scale,
    require_bool,
    require_same_device,
    require_shape,
)
from turbo_core.low_precision import ScalingGranularity, as_granularity

__all__ = [
    "GROUPED_GEMM_FP4",
    "GROUPED_GEMM_FP4_VARIABLE_K",
    "GROUPED_GEMM_FP8",
    "GROUPED_GEMM_FP8_VARIABLE_K",
    "GroupedGemmFp4Args",
    "GroupedGemmFp4VariableKArgs",
    "GroupedGemmFp8Args",
    "GroupedGemmFp8VariableKArgs",
    "grouped_lowp_dims",
    "variable_k_lowp_dims",
]

G = ScalingGranularity


@dataclass(frozen=True, eq=False)
class GroupedGemmFp8Args:
    """``out[rows of g] = dequant(A_g) @ dequant(op(B[g]))`` (layouts in the module docstring).

    Fields: ``a`` FP8 ``[M_total, K]``; ``b`` FP8 ``[G, K, N]`` (``[G, N, K]`` when ``trans_b``), a's
    flavour; their ``*_scale_inv``; ``group_lens`` int64 ``[G]`` and ``group_offs`` int64 ``[G+1]`` on
    a's device; ``out_dtype`` fp16/bf16/fp32 (required); ``granularity``; ``block_size`` (BLOCKWISE:
    required; MX: None/32); ``num_cu``: a hint (None or a positive cap on compute units).
    Result ``[M_total, N]`` in ``out_dtype``, contiguous; rows past ``group_offs[-1]`` are zero.
    """

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    trans_b: bool = True
    out_dtype: torch.dtype | None = None
    granularity: G | str = G.TENSORWISE
    block_size: int | None = None
    num_cu: int | None = None


@dataclass(frozen=True, eq=False)
class GroupedGemmFp8VariableKArgs:
    """The FP8 grouped wgrad: ``C[g] = dequant(A_g).T @ dequant(B_g)`` over group g's rows (layouts
    in the module docstring; MX operands come transposed, the contraction along their last dim).

    Fields: ``a``/``b`` FP8 and their scales; ``group_lens``/``group_offs`` (padded, for BLOCKWISE
    and MX); ``out_dtype`` (required unless ``out``); ``granularity``; ``block_size``; ``trans_c``
    (``[G, N, K]`` instead of ``[G, K, N]``); ``num_cu`` (a hint); ``out``: accumulate into it
    (``out[g] += C[g]``, beta=1, in out's dtype) and return it.
    """

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    out_dtype: torch.dtype | None = None
    granularity: G | str = G.TENSORWISE
    block_size: int | None = None
    trans_c: bool = False
    num_cu: int | None = None
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else self.out_dtype


@dataclass(frozen=True, eq=False)
class GroupedGemmFp4Args:
    """MXFP4 grouped GEMM (NT): a ``[M_total, K/2]``, b ``[G, N, K/2]`` (``trans_b`` must be True),
    E8M0 scales ``[M_total, K/32]`` / ``[G, N, K/32]``; otherwise as :class:`GroupedGemmFp8Args`."""

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    trans_b: bool = True
    out_dtype: torch.dtype | None = None
    num_cu: int | None = None


@dataclass(frozen=True, eq=False)
class GroupedGemmFp4VariableKArgs:
    """MXFP4 grouped wgrad: a ``[K, M_pad/2]``, b ``[N, M_pad/2]`` (the col-wise layout of
    ``grouped_quantize_fp4``), E8M0 scales ``[K, M_pad/32]`` / ``[N, M_pad/32]``, the padded groups;
    otherwise as :class:`GroupedGemmFp8VariableKArgs`."""

    a: torch.Tensor
    a_scale_inv: torch.Tensor
    b: torch.Tensor
    b_scale_inv: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    out_dtype: torch.dtype | None = None
    trans_c: bool = False
    num_cu: int | None = None
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else self.out_dtype


def grouped_lowp_dims(args: GroupedGemmFp8Args | GroupedGemmFp4Args) -> tuple[int, int, int, int]:
    """``(G, M_total, N, K)`` of a grouped FP8/FP4 forward (K unpacked and padded for MX/FP4)."""
    pack = 2 if isinstance(args, GroupedGemmFp4Args) else 1
    g = args.b.shape[0]
    n, k = (args.b.shape[1], args.b.shape[2]) if args.trans_b else (args.b.shape[2], args.b.shape[1])
    return int(g), int(args.a.shape[0]), int(n), int(k) * pack


def _mx_like(args) -> bool:
    return isinstance(args, (GroupedGemmFp4VariableKArgs,)) or (
        isinstance(args, GroupedGemmFp8VariableKArgs) and as_granularity(args.granularity) == G.MX_BLOCKWISE)


def variable_k_lowp_dims(args: GroupedGemmFp8VariableKArgs | GroupedGemmFp4VariableKArgs) -> tuple[int, int, int, int]:
    """``(G, M, K, N)`` of a variable-K call: M is the contraction length (padded rows for
    BLOCKWISE/MX/FP4), K and N the result's dims."""
    g = args.group_lens.shape[0]
    if _mx_like(args):
        pack = 2 if isinstance(args, GroupedGemmFp4VariableKArgs) else 1
        return int(g), int(args.a.shape[1]) * pack, int(args.a.shape[0]), int(args.b.shape[0])
    return int(g), int(args.a.shape[0]), int(args.a.shape[1]), int(args.b.shape[1])


# -- validators --------------------------------------------------------------------------------------

def _check_groups(args, groups: int | None) -> int:
    """group_lens ``[G]`` (``G = groups`` when given) and group_offs ``[G + 1]``, both int64, and
    ``num_cu``; returns G."""
    g = check_group_lens(args.group_lens, groups).shape[0]
    check_group_offs(args.group_offs, g)
    check_num_cu_schedule(args.num_cu)
    return g


def _validate_fp8(args: GroupedGemmFp8Args) -> None:
    gran, a, sa, b, sb = check_fp8_operands(args.granularity, args.a, args.a_scale_inv, args.b, args.b_scale_inv,
                                            a_ndim=2, b_ndim=3)
    require_bool("trans_b", args.trans_b)
    check_out_dtype(args.out_dtype, None)
    bs = check_block_size(gran, args.block_size)
    check_grouped_inner_dim(a, b, args.trans_b)
    g, m, n, k = grouped_lowp_dims(args)
    _check_groups(args, g)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=args.group_lens,
                        group_offs=args.group_offs)
    if gran == G.TENSORWISE:
        check_tensorwise_scale("a_scale_inv", sa)
        check_tensorwise_scale("b_scale_inv", sb)
    elif gran == G.ROWWISE:
        require_shape("a_scale_inv", sa, (m, 1), "ROWWISE: one scale per row of a")
        require_shape("b_scale_inv", sb, (g, n, 1) if args.trans_b else (g, 1, n),
                      "ROWWISE: one scale per column of op(b[g])")
    elif gran == G.BLOCKWISE:
        require_shape("a_scale_inv", sa, (cdiv(k, bs), m),
                      f"BLOCKWISE: 1x{bs} blocks along K, stored transposed as grouped_quantize_fp8 does")
        check_blockwise_scale("b_scale_inv", b, sb, -1 if args.trans_b else -2, bs, "K")
    else:
        if not args.trans_b:
            raise ValueError("trans_b: MX_BLOCKWISE grouped GEMM is NT only (b [G, N, K]); got trans_b=False")
        check_mx_operand("a", a, sa, packed=False)
        check_mx_operand("b", b, sb, packed=False)
    check_group_values(args.group_lens, args.group_offs, m)


def _validate_fp8_variable_k(args: GroupedGemmFp8VariableKArgs) -> None:
    gran, a, sa, b, sb = check_fp8_operands(args.granularity, args.a, args.a_scale_inv, args.b, args.b_scale_inv,
                                            a_ndim=2, b_ndim=2)
    mx = gran == G.MX_BLOCKWISE
    require_bool("trans_c", args.trans_c)
    check_out_dtype(args.out_dtype, args.out)
    bs = check_block_size(gran, args.block_size)
    g = _check_groups(args, None)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=args.group_lens,
                        group_offs=args.group_offs, out=args.out)
    contraction = 1 if mx else 0
    if a.shape[contraction] != b.shape[contraction]:
        what = "columns (MX operands are [K, M] / [N, M])" if mx else "rows (the M of a)"
        raise ValueError(f"b: expected {a.shape[contraction]} {what}, got shape {tuple(b.shape)}")
    _, m, k, n = variable_k_lowp_dims(args)
    if gran == G.TENSORWISE:
        check_tensorwise_scale("a_scale_inv", sa)
        check_tensorwise_scale("b_scale_inv", sb)
    elif gran == G.ROWWISE:
        require_shape("a_scale_inv", sa, (1, k), "ROWWISE: one scale per column, over all rows")
        require_shape("b_scale_inv", sb, (1, n), "ROWWISE: one scale per column, over all rows")
    elif gran == G.BLOCKWISE:
        require_shape("a_scale_inv", sa, (cdiv(m, bs), k), f"BLOCKWISE: {bs}x1 blocks along M")
        require_shape("b_scale_inv", sb, (cdiv(m, bs), n), f"BLOCKWISE: {bs}x1 blocks along M")
    else:
        check_mx_operand("a", a, sa, packed=False)
        check_mx_operand("b", b, sb, packed=False)
    check_out(args.out, (g, n, k) if args.trans_c else (g, k, n), f"trans_c={args.trans_c}")
    check_group_values(args.group_lens, args.group_offs, m)


def _validate_fp4(args: GroupedGemmFp4Args) -> None:
    a, sa, b, sb = check_fp4_operands(args.a, args.a_scale_inv, args.b, args.b_scale_inv, a_ndim=2, b_ndim=3)
    require_bool("trans_b", args.trans_b)
    if not args.trans_b:
        raise ValueError("trans_b: MXFP4 grouped GEMM is NT only (b [G, N, K/2]); got trans_b=False")
    check_out_dtype(args.out_dtype, None)
    check_grouped_inner_dim(a, b, args.trans_b, packed=True)
    g, m, _, _ = grouped_lowp_dims(args)
    _check_groups(args, g)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=args.group_lens,
                        group_offs=args.group_offs)
    check_mx_operand("a", a, sa, packed=True)
    check_mx_operand("b", b, sb, packed=True)
    check_group_values(args.group_lens, args.group_offs, m)


def _validate_fp4_variable_k(args: GroupedGemmFp4VariableKArgs) -> None:
    a, sa, b, sb = check_fp4_operands(args.a, args.a_scale_inv, args.b, args.b_scale_inv, a_ndim=2, b_ndim=2)
    require_bool("trans_c", args.trans_c)
    check_out_dtype(args.out_dtype, args.out)
    g = _check_groups(args, None)
    require_same_device(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=args.group_lens,
                        group_offs=args.group_offs, out=args.out)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"b: expected {a.shape[1]} packed columns (operands are [K, M/2] / [N, M/2]), "
                         f"got shape {tuple(b.shape)}")
    check_mx_operand("a", a, sa, packed=True)
    check_mx_operand("b", b, sb, packed=True)
    _, m, k, n = variable_k_lowp_dims(args)
    check_out(args.out, (g, n, k) if args.trans_c else (g, k, n), f"trans_c={args.trans_c}")
    check_group_values(args.group_lens, args.group_offs, m)


GROUPED_GEMM_FP8 = define_primitive(Primitive(
    name="grouped_gemm_fp8",
    args_type=GroupedGemmFp8Args,
    precision=PrecisionType.FP8,
    family="grouped_gemm",
    validate=_validate_fp8,
    doc="FP8 grouped GEMM on quantized operands (TENSORWISE, ROWWISE, BLOCKWISE, MX_BLOCKWISE): "
        "out[rows of g] = dequant(A_g) @ dequant(op(B[g])); rows past the last group are zero.",
))

GROUPED_GEMM_FP8_VARIABLE_K = define_primitive(Primitive(
    name="grouped_gemm_fp8_variable_k",
    args_type=GroupedGemmFp8VariableKArgs,
    precision=PrecisionType.FP8,
    family="grouped_gemm",
    validate=_validate_fp8_variable_k,
    mutates=("out",),
    doc="FP8 variable-K grouped GEMM (the grouped wgrad): C[g] = dequant(A_g)^T @ dequant(B_g), "
        "optional trans_c and accumulate-into-out.",
))

GROUPED_GEMM_FP4 = define_primitive(Primitive(
    name="grouped_gemm_fp4",
    args_type=GroupedGemmFp4Args,
    precision=PrecisionType.FP4,
    family="grouped_gemm",
    validate=_validate_fp4,
    doc="MXFP4 grouped GEMM (NT): out[rows of g] = dequant(A_g) @ dequant(B[g])^T; rows past the last group are zero.",
))

GROUPED_GEMM_FP4_VARIABLE_K = define_primitive(Primitive(
    name="grouped_gemm_fp4_variable_k",
    args_type=GroupedGemmFp4VariableKArgs,
    precision=PrecisionType.FP4,
    family="grouped_gemm",
    validate=_validate_fp4_variable_k,
    mutates=("out",),
    doc="MXFP4 variable-K grouped GEMM (the grouped wgrad) over col-wise quantized, group-padded operands.",
))
