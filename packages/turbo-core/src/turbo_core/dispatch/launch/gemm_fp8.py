"""``turbo::gemm_fp8`` / ``turbo::gemm_fp8_accum`` and ``turbo::gemm_fp4`` / ``turbo::gemm_fp4_accum``
custom ops and their launchers.

The granularity crosses the custom-op boundary as its string value (``"ROWWISE"``), never as an
enum position. The fake implementations need only shapes (``[M, N]`` or ``[N, M]``).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, GemmFp8Args, gemm_fp8_dims
from turbo_core.low_precision import ScalingGranularity, as_granularity

__all__ = ["gemm_fp4", "gemm_fp8"]

T = torch.Tensor
G = ScalingGranularity


def _result_shape(m: int, n: int, trans_c: bool) -> tuple[int, int]:
    return (n, m) if trans_c else (m, n)


@torch.library.custom_op("turbo::gemm_fp8", mutates_args=())
def _gemm_fp8_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, trans_a: bool, trans_b: bool,
                 out_dtype: torch.dtype, granularity: str, block_size: int | None, trans_c: bool) -> T:
    return call("gemm_fp8", GemmFp8Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype,
                                        G(granularity), block_size, trans_c))


@_gemm_fp8_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, granularity, block_size, trans_c):
    m, n, _ = gemm_fp8_dims(GemmFp8Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b))
    return a.new_empty(_result_shape(m, n, trans_c), dtype=out_dtype)


@torch.library.custom_op("turbo::gemm_fp8_accum", mutates_args=("out",))
def _gemm_fp8_accum_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, trans_a: bool, trans_b: bool,
                       granularity: str, block_size: int | None, trans_c: bool, out: T) -> None:
    call("gemm_fp8", GemmFp8Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, None, G(granularity),
                                 block_size, trans_c, out))


@_gemm_fp8_accum_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, granularity, block_size, trans_c, out):
    return None


@torch.library.custom_op("turbo::gemm_fp4", mutates_args=())
def _gemm_fp4_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, trans_a: bool, trans_b: bool,
                 out_dtype: torch.dtype, trans_c: bool) -> T:
    return call("gemm_fp4", GemmFp4Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, trans_c))


@_gemm_fp4_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, trans_c):
    return a.new_empty(_result_shape(a.shape[0], b.shape[0], trans_c), dtype=out_dtype)


@torch.library.custom_op("turbo::gemm_fp4_accum", mutates_args=("out",))
def _gemm_fp4_accum_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, trans_a: bool, trans_b: bool,
                       trans_c: bool, out: T) -> None:
    call("gemm_fp4", GemmFp4Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, None, trans_c, out))


@_gemm_fp4_accum_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, trans_c, out):
    return None


def gemm_fp8(a: T, a_scale_inv: T, b: T, b_scale_inv: T, *, trans_a: bool = False, trans_b: bool = False,
             out_dtype: torch.dtype | None = None, granularity: G | str = G.TENSORWISE,
             block_size: int | None = None, trans_c: bool = False, out: T | None = None) -> T:
    """Run the ``gemm_fp8`` primitive (see :class:`GemmFp8Args`); with ``out``, accumulate into it."""
    gran = as_granularity(granularity)
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.gemm_fp8_accum(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, gran.value,
                                           block_size, trans_c, out)
            return out
        return torch.ops.turbo.gemm_fp8(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, gran.value,
                                        block_size, trans_c)
    return call("gemm_fp8", GemmFp8Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, gran,
                                        block_size, trans_c, out))


def gemm_fp4(a: T, a_scale_inv: T, b: T, b_scale_inv: T, *, trans_a: bool = False, trans_b: bool = True,
             out_dtype: torch.dtype | None = None, trans_c: bool = False, out: T | None = None) -> T:
    """Run the ``gemm_fp4`` primitive (see :class:`GemmFp4Args`); with ``out``, accumulate into it."""
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.gemm_fp4_accum(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, trans_c, out)
            return out
        return torch.ops.turbo.gemm_fp4(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, trans_c)
    return call("gemm_fp4", GemmFp4Args(a, a_scale_inv, b, b_scale_inv, trans_a, trans_b, out_dtype, trans_c, out))
