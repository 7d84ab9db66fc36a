"""``turbo::gemm`` / ``turbo::gemm_accum`` custom ops and their launcher."""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims

__all__ = ["gemm"]


@torch.library.custom_op("turbo::gemm", mutates_args=())
def _gemm_op(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool,
             out_dtype: torch.dtype | None, trans_c: bool) -> torch.Tensor:
    return call("gemm", GemmArgs(a, b, trans_a, trans_b, out_dtype, trans_c))


@_gemm_op.register_fake
def _gemm_fake(a, b, trans_a, trans_b, out_dtype, trans_c):
    m, n, _ = gemm_dims(GemmArgs(a, b, trans_a, trans_b))
    return a.new_empty((n, m) if trans_c else (m, n), dtype=out_dtype or a.dtype)


@torch.library.custom_op("turbo::gemm_accum", mutates_args=("out",))
def _gemm_accum_op(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool,
                   trans_c: bool, out: torch.Tensor) -> None:
    call("gemm", GemmArgs(a, b, trans_a, trans_b, None, trans_c, out))


@_gemm_accum_op.register_fake
def _gemm_accum_fake(a, b, trans_a, trans_b, trans_c, out):
    return None


def gemm(a: torch.Tensor, b: torch.Tensor, *, trans_a: bool = False, trans_b: bool = False,
         out_dtype: torch.dtype | None = None, trans_c: bool = False,
         out: torch.Tensor | None = None) -> torch.Tensor:
    """Run the ``gemm`` primitive (see :class:`GemmArgs`); with ``out``, accumulate into it."""
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.gemm_accum(a, b, trans_a, trans_b, trans_c, out)
            return out
        return torch.ops.turbo.gemm(a, b, trans_a, trans_b, out_dtype, trans_c)
    return call("gemm", GemmArgs(a, b, trans_a, trans_b, out_dtype, trans_c, out))
