"""Dense GEMM primitives."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    check_inner_dim,
    check_out,
    require_bool,
    require_dtype,
    require_same_device,
    require_same_dtype,
    require_tensor,
)

__all__ = ["GEMM", "GemmArgs", "gemm_dims"]


@dataclass(frozen=True, eq=False)
class GemmArgs:
    """``C = op(A) @ op(B)`` with ``op(X) = X.T if trans_x else X``.

    Shapes: ``a`` is ``[M, K]`` (``[K, M]`` when ``trans_a``), ``b`` is ``[K, N]`` (``[N, K]``
    when ``trans_b``); the result is ``[M, N]``, or its transpose ``[N, M]`` when ``trans_c``
    (backends compute it as ``op(B).T @ op(A).T``). Dtypes: ``a`` and ``b`` equal, one of
    fp16/bf16/fp32; ``out_dtype`` (``None`` means ``a.dtype``) is fp16/bf16/fp32.
    Products are accumulated in fp32 (or wider) and rounded once to ``out_dtype``.

    ``out``: when given, the kernel accumulates into it (``out += C``, beta=1), in ``out``'s
    dtype, and returns it; it must have the result's shape. This is the fused-wgrad path.
    """

    a: torch.Tensor
    b: torch.Tensor
    trans_a: bool = False
    trans_b: bool = False
    out_dtype: torch.dtype | None = None
    trans_c: bool = False
    out: torch.Tensor | None = None

    @property
    def result_dtype(self) -> torch.dtype:
        return self.out.dtype if self.out is not None else (self.out_dtype or self.a.dtype)


def gemm_dims(args: GemmArgs) -> tuple[int, int, int]:
    """``(M, N, K)`` of a GEMM call."""
    m, k = (args.a.shape[1], args.a.shape[0]) if args.trans_a else tuple(args.a.shape)
    n = args.b.shape[0] if args.trans_b else args.b.shape[1]
    return int(m), int(n), int(k)


def _validate(args: GemmArgs) -> None:
    require_tensor("a", args.a, ndim=2, dtypes=FLOAT_DTYPES)
    require_tensor("b", args.b, ndim=2, dtypes=FLOAT_DTYPES)
    for name in ("trans_a", "trans_b", "trans_c"):
        require_bool(name, getattr(args, name))
    require_same_dtype("b", args.b, "a", args.a)
    if args.out_dtype is not None:
        require_dtype("out_dtype", args.out_dtype, FLOAT_DTYPES)
    if args.out is not None:
        require_tensor("out", args.out, ndim=2, dtypes=FLOAT_DTYPES)
    require_same_device(a=args.a, b=args.b, out=args.out)
    m, n, k = gemm_dims(args)
    check_inner_dim(m, k, args.b.shape[1] if args.trans_b else args.b.shape[0], n, args.trans_a, args.trans_b)
    check_out(args.out, (n, m) if args.trans_c else (m, n))


GEMM = define_primitive(Primitive(
    name="gemm",
    args_type=GemmArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="gemm",
    validate=_validate,
    mutates=("out",),
    doc="Dense GEMM in fp16/bf16/fp32: C = op(A) @ op(B), optional trans_c and accumulate-into-out.",
))
