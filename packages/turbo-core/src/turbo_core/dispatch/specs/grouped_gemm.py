"""Grouped GEMM primitives (mixture-of-experts): the forward/dgrad GEMM and the variable-K wgrad.

Tokens are packed by group along M: group ``g`` owns rows ``[group_offs[g], group_offs[g+1])`` of
the ``[M_total, .]`` operands, ``group_offs`` being the exclusive prefix sum of ``group_lens``
(``[0, l0, l0+l1, ...]``). ``sum(group_lens)`` may be smaller than ``M_total`` (an over-allocated
buffer): the rows past ``group_offs[-1]`` belong to no group.

The validators here read only metadata (shapes, dtypes, devices, flags), except
:func:`check_group_values`, which reads the *values* of ``group_lens``/``group_offs`` and therefore
runs only where that costs no host sync: eagerly for CPU tensors, as a device-side assert
(:func:`assert_group_values_async`) for GPU tensors.
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
    require_same_device,
    require_tensor,
)

__all__ = [
    "GROUPED_GEMM",
    "GROUPED_GEMM_VARIABLE_K",
    "SCHEDULES",
    "GroupedGemmArgs",
    "GroupedGemmVariableKArgs",
    "assert_group_values_async",
    "check_group_lens",
    "check_group_values",
    "check_num_cu_schedule",
    "grouped_gemm_dims",
]

#: Values of ``schedule``: "static" (each workgroup takes a fixed share of the tiles) or
#: "work_steal" (workgroups take tiles from a shared counter; needs ``num_cu=None``).
SCHEDULES = ("static", "work_steal")


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
        schedule: ``"static"`` or ``"work_steal"`` (the latter needs ``num_cu=None``).

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


# -- shared checks --------------------------------------------------------------------------------


def check_group_lens(group_lens: object, groups: int | None = None) -> torch.Tensor:
    """``group_lens`` is a 1-D int64 tensor (of length ``groups`` when given)."""
    require_tensor("group_lens", group_lens, ndim=1, dtypes=(torch.int64,))
    if groups is not None and group_lens.shape[0] != groups:
        raise ValueError(
            f"group_lens: expected {groups} lengths (one per group of b), got shape {tuple(group_lens.shape)}"
        )
    return group_lens


def _check_group_offs(group_offs: object, groups: int) -> None:
    require_tensor("group_offs", group_offs, ndim=1, dtypes=(torch.int64,))
    if group_offs.shape[0] != groups + 1:
        raise ValueError(
            f"group_offs: expected shape ({groups + 1},) (G + 1 offsets), got {tuple(group_offs.shape)}"
        )


def check_num_cu_schedule(num_cu: object, schedule: object = "static") -> None:
    if num_cu is not None and (isinstance(num_cu, bool) or not isinstance(num_cu, int) or num_cu < 1):
        raise ValueError(f"num_cu: expected None or a positive int, got {num_cu!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected 'static' or 'work_steal', got {schedule!r}")
    if schedule == "work_steal" and num_cu is not None:
        raise ValueError(f"num_cu: schedule='work_steal' needs num_cu=None, got {num_cu!r}")


def _short(t: torch.Tensor, limit: int = 16) -> str:
    values = t[:limit].tolist()
    return str(values)[:-1] + ", ...]" if t.numel() > limit else str(values)


def check_group_values(group_lens: torch.Tensor, group_offs: torch.Tensor | None, m_total: int) -> None:
    """Eager value checks for CPU tensors (reading them costs no sync): lengths non-negative,
    summing to at most ``m_total``, and ``group_offs`` (when given) their exclusive prefix sum.
    Raises ``ValueError`` naming the argument. Does nothing for GPU tensors (see
    :func:`assert_group_values_async`) or while ``torch.compile`` traces (values are unknown then;
    the primitive's validator checks them when the compiled graph runs)."""
    if group_lens.device.type != "cpu" or torch.compiler.is_compiling():
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


def assert_group_values_async(group_lens: torch.Tensor, group_offs: torch.Tensor | None, m_total: int) -> None:
    """The checks of :func:`check_group_values` as a device-side assert (``torch._assert_async``):
    no host sync, so a violation surfaces **asynchronously**, as a device-side assertion failure
    reported by a later CUDA/HIP call (run with ``CUDA_LAUNCH_BLOCKING=1`` to pinpoint it)."""
    ok = (group_lens >= 0).all() & (group_lens.sum() <= m_total)
    if group_offs is not None:
        ok = ok & (group_offs[0] == 0) & (group_offs[1:] == torch.cumsum(group_lens, 0)).all()
    torch._assert_async(
        ok,
        "group_lens/group_offs: expected non-negative lengths summing to at most the rows of the packed "
        "operand, and group_offs equal to their exclusive prefix sum",
    )


# -- validators -----------------------------------------------------------------------------------


def _validate(args: GroupedGemmArgs) -> None:
    require_tensor("a", args.a, ndim=2, dtypes=FLOAT_DTYPES)
    require_tensor("b", args.b, ndim=3, dtypes=FLOAT_DTYPES)
    require_bool("trans_b", args.trans_b)
    if args.a.dtype != args.b.dtype:
        raise TypeError(f"b: expected the dtype of a ({dtype_name(args.a.dtype)}), got {dtype_name(args.b.dtype)}")
    g, m, n, k = grouped_gemm_dims(args)
    if args.a.shape[1] != k:
        want = f"[{g}, N, {args.a.shape[1]}]" if args.trans_b else f"[{g}, {args.a.shape[1]}, N]"
        raise ValueError(
            f"b: inner dimension mismatch: a is [{m}, {args.a.shape[1]}] so b must be {want}"
            f" (trans_b={args.trans_b}), got {tuple(args.b.shape)}"
        )
    check_group_lens(args.group_lens, g)
    _check_group_offs(args.group_offs, g)
    check_num_cu_schedule(args.num_cu, args.schedule)
    require_same_device(a=args.a, b=args.b, group_lens=args.group_lens, group_offs=args.group_offs)
    check_group_values(args.group_lens, args.group_offs, m)


def _validate_variable_k(args: GroupedGemmVariableKArgs) -> None:
    require_tensor("a", args.a, ndim=2, dtypes=FLOAT_DTYPES)
    require_tensor("b", args.b, ndim=2, dtypes=FLOAT_DTYPES)
    require_bool("trans_c", args.trans_c)
    if args.a.dtype != args.b.dtype:
        raise TypeError(f"b: expected the dtype of a ({dtype_name(args.a.dtype)}), got {dtype_name(args.b.dtype)}")
    m, k = args.a.shape
    if args.b.shape[0] != m:
        raise ValueError(f"b: expected {m} rows (the M_total of a), got shape {tuple(args.b.shape)}")
    n = args.b.shape[1]
    check_group_lens(args.group_lens)
    g = args.group_lens.shape[0]
    _check_group_offs(args.group_offs, g)
    check_num_cu_schedule(args.num_cu)
    if args.out is not None:
        require_tensor("out", args.out, ndim=3, dtypes=FLOAT_DTYPES)
        want = (g, n, k) if args.trans_c else (g, k, n)
        if tuple(args.out.shape) != want:
            raise ValueError(f"out: expected shape {want} (trans_c={args.trans_c}), got {tuple(args.out.shape)}")
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
