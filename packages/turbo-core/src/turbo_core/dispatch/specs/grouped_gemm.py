"""Grouped GEMM primitives (mixture-of-experts): the forward/dgrad GEMM and the variable-K wgrad.

Tokens are packed by group along M: group ``g`` owns rows ``[group_offs[g], group_offs[g+1])`` of
the ``[M_total, .]`` operands, ``group_offs`` being the exclusive prefix sum of ``group_lens``
(``[0, l0, l0+l1, ...]``). ``sum(group_lens)`` may be smaller than ``M_total`` (an over-allocated
buffer): the rows past ``group_offs[-1]`` belong to no group.

The validators here read only metadata (shapes, dtypes, devices, flags), except
``validate.check_group_values``, which reads the *values* of ``group_lens``/``group_offs`` and
therefore runs only where that costs no host sync: eagerly for CPU tensors (the ops assert them on
the device, ``validate.assert_group_values_async``, for GPU tensors).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    check_group_lens,
    check_group_offs,
    check_group_values,
    check_grouped_inner_dim,
    check_num_cu_schedule,
    check_out,
    require_bool,
    require_rows,
    require_same_device,
    require_same_dtype,
    require_tensor,
)

__all__ = [
    "GROUPED_GEMM",
    "GROUPED_GEMM_VARIABLE_K",
    "GroupedGemmArgs",
    "GroupedGemmVariableKArgs",
    "grouped_gemm_dims",
]


@dataclass(frozen=True, eq=False)
class GroupedGemmArgs:
    """``out[rows of g] = A_g @ op(B[g])`` for every group ``g``; rows outside every group are 0.

    Shapes and dtypes:
        a: ``[M_total, K]``, fp16/bf16/fp32, tokens packed by group along M.
        b: ``[G, K, N]``, or ``[G, N, K]`` when ``trans_b`` (``op(B[g]) = B[g].T`` then); a's dtype.
        group_lens: int64 ``[G]``, non-negative, ``sum(group_lens) <= M_total``; a's device.
        group_offs: int64 ``[G + 1]``, the exclusive prefix sum of ``group_lens``; a's device.
        Result: ``[M_total, N]`` in a's dtype, contiguous. Rows ``[group_offs[-1], M_total)`` are
        zero; a group of length 0 writes nothing.

    Numerics: products accumulated in fp32 (or wider), rounded once to a's dtype.

    Hints a backend may ignore (they never change the result):
        num_cu: ``None`` (every compute unit) or a positive cap on the CUs a persistent kernel uses.
        schedule: ``"static"`` (each workgroup takes a fixed share of the tiles) or ``"work_steal"``
            (workgroups take tiles from a shared counter; needs ``num_cu=None``).

    Layout: any strides are valid input to the spec; the public op passes contiguous tensors and
    a backend may decline others (its capability check sees the strides).
    """

    a: torch.Tensor
    b: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    trans_b: bool = False
    num_cu: int | None = None
    schedule: str = "static"


@dataclass(frozen=True, eq=False)
class GroupedGemmVariableKArgs:
    """The grouped wgrad: ``C[g] = A_g.T @ B_g``, the contraction running over group g's rows.

    Shapes and dtypes:
        a: ``[M_total, K]``, fp16/bf16/fp32 (the forward's input).
        b: ``[M_total, N]``, a's dtype (the forward's output gradient).
        group_lens / group_offs: as in :class:`GroupedGemmArgs`; rows past ``group_offs[-1]`` are
            not read into any group.
        trans_c: write ``C[g].T``, i.e. a result of ``[G, N, K]`` instead of ``[G, K, N]``.
        Result: ``[G, K, N]`` (or ``[G, N, K]``) in a's dtype, contiguous; a group of length 0
        gives a zero matrix.
        out: when given, accumulate into it instead (``out[g] += C[g]``, beta=1) in out's dtype
        (fp16/bf16/fp32, e.g. an fp32 ``main_grad``) and return it; a group of length 0 leaves
        ``out[g]`` unchanged. This is the fused-wgrad path.

    Numerics: products accumulated in fp32 (or wider); with ``out``, the sum ``out + C`` is formed
    in fp32 (or wider) and rounded once to out's dtype.

    ``num_cu`` is a hint as in :class:`GroupedGemmArgs`.
    """

    a: torch.Tensor
    b: torch.Tensor
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    trans_c: bool = False
    num_cu: int | None = None
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else self.a.dtype


def grouped_gemm_dims(args: GroupedGemmArgs) -> tuple[int, int, int, int]:
    """``(G, M_total, N, K)`` of a grouped GEMM call."""
    g = args.b.shape[0]
    n, k = (args.b.shape[1], args.b.shape[2]) if args.trans_b else (args.b.shape[2], args.b.shape[1])
    return int(g), int(args.a.shape[0]), int(n), int(k)


# -- validators -----------------------------------------------------------------------------------


def _validate(args: GroupedGemmArgs) -> None:
    require_tensor("a", args.a, ndim=2, dtypes=FLOAT_DTYPES)
    require_tensor("b", args.b, ndim=3, dtypes=FLOAT_DTYPES)
    require_bool("trans_b", args.trans_b)
    require_same_dtype("b", args.b, "a", args.a)
    check_grouped_inner_dim(args.a, args.b, args.trans_b)
    g, m, _, _ = grouped_gemm_dims(args)
    check_group_lens(args.group_lens, g)
    check_group_offs(args.group_offs, g)
    check_num_cu_schedule(args.num_cu, args.schedule)
    require_same_device(a=args.a, b=args.b, group_lens=args.group_lens, group_offs=args.group_offs)
    check_group_values(args.group_lens, args.group_offs, m)


def _validate_variable_k(args: GroupedGemmVariableKArgs) -> None:
    require_tensor("a", args.a, ndim=2, dtypes=FLOAT_DTYPES)
    require_tensor("b", args.b, ndim=2, dtypes=FLOAT_DTYPES)
    require_bool("trans_c", args.trans_c)
    require_same_dtype("b", args.b, "a", args.a)
    m, k = args.a.shape
    require_rows("b", args.b, m, "the M_total of a")
    n = args.b.shape[1]
    g = check_group_lens(args.group_lens).shape[0]
    check_group_offs(args.group_offs, g)
    check_num_cu_schedule(args.num_cu)
    check_out(args.out, (g, n, k) if args.trans_c else (g, k, n), f"trans_c={args.trans_c}")
    require_same_device(a=args.a, b=args.b, group_lens=args.group_lens, group_offs=args.group_offs, out=args.out)
    check_group_values(args.group_lens, args.group_offs, m)


GROUPED_GEMM = define_primitive(Primitive(
    name="grouped_gemm",
    args_type=GroupedGemmArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="grouped_gemm",
    validate=_validate,
    doc="Grouped GEMM over tokens packed by group along M: out[rows of g] = A_g @ op(B[g]); "
        "rows past the last group are zero.",
))

GROUPED_GEMM_VARIABLE_K = define_primitive(Primitive(
    name="grouped_gemm_variable_k",
    args_type=GroupedGemmVariableKArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="grouped_gemm",
    validate=_validate_variable_k,
    mutates=("out",),
    doc="Variable-K grouped GEMM (the grouped wgrad): C[g] = A_g^T @ B_g over group g's rows, "
        "optional trans_c and accumulate-into-out.",
))
