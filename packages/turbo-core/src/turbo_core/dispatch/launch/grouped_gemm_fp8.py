"""``turbo::grouped_gemm_fp8``, ``turbo::grouped_gemm_fp8_variable_k`` (+ ``_accum``) and their FP4
counterparts: custom ops and launchers.

Output shapes depend on shapes only: the forward gives ``[M_total, N]`` (a's rows), the variable-K
form ``[G, K, N]`` / ``[G, N, K]`` (G = ``len(group_lens)``).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GroupedGemmFp4Args,
    GroupedGemmFp4VariableKArgs,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
    grouped_lowp_dims,
    variable_k_lowp_dims,
)
from turbo_core.low_precision import ScalingGranularity, as_granularity

__all__ = ["grouped_gemm_fp4", "grouped_gemm_fp4_variable_k", "grouped_gemm_fp8", "grouped_gemm_fp8_variable_k"]

T = torch.Tensor
G = ScalingGranularity


def _vk_shape(args, trans_c: bool) -> tuple[int, int, int]:
    g, _, k, n = variable_k_lowp_dims(args)
    return (g, n, k) if trans_c else (g, k, n)


# -- FP8 ----------------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::grouped_gemm_fp8", mutates_args=())
def _grouped_fp8_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, trans_b: bool,
                    out_dtype: torch.dtype, granularity: str, block_size: int | None, num_cu: int | None) -> T:
    return call("grouped_gemm_fp8", GroupedGemmFp8Args(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                       trans_b, out_dtype, G(granularity), block_size, num_cu))


@_grouped_fp8_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, trans_b, out_dtype, granularity, block_size, num_cu):
    _, m, n, _ = grouped_lowp_dims(GroupedGemmFp8Args(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                      trans_b))
    return a.new_empty((m, n), dtype=out_dtype)


@torch.library.custom_op("turbo::grouped_gemm_fp8_variable_k", mutates_args=())
def _vk_fp8_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, out_dtype: torch.dtype,
               granularity: str, block_size: int | None, trans_c: bool, num_cu: int | None) -> T:
    return call("grouped_gemm_fp8_variable_k", GroupedGemmFp8VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, G(granularity), block_size, trans_c, num_cu))


@_vk_fp8_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, granularity, block_size, trans_c, num_cu):
    args = GroupedGemmFp8VariableKArgs(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype,
                                       G(granularity))
    return a.new_empty(_vk_shape(args, trans_c), dtype=out_dtype)


@torch.library.custom_op("turbo::grouped_gemm_fp8_variable_k_accum", mutates_args=("out",))
def _vk_fp8_accum_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, granularity: str,
                     block_size: int | None, trans_c: bool, num_cu: int | None, out: T) -> None:
    call("grouped_gemm_fp8_variable_k", GroupedGemmFp8VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, None, G(granularity), block_size, trans_c, num_cu,
        out))


@_vk_fp8_accum_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, granularity, block_size, trans_c, num_cu, out):
    return None


# -- FP4 ----------------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::grouped_gemm_fp4", mutates_args=())
def _grouped_fp4_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, trans_b: bool,
                    out_dtype: torch.dtype, num_cu: int | None) -> T:
    return call("grouped_gemm_fp4", GroupedGemmFp4Args(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                       trans_b, out_dtype, num_cu))


@_grouped_fp4_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, trans_b, out_dtype, num_cu):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


@torch.library.custom_op("turbo::grouped_gemm_fp4_variable_k", mutates_args=())
def _vk_fp4_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, out_dtype: torch.dtype,
               trans_c: bool, num_cu: int | None) -> T:
    return call("grouped_gemm_fp4_variable_k", GroupedGemmFp4VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, trans_c, num_cu))


@_vk_fp4_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, trans_c, num_cu):
    args = GroupedGemmFp4VariableKArgs(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype)
    return a.new_empty(_vk_shape(args, trans_c), dtype=out_dtype)


@torch.library.custom_op("turbo::grouped_gemm_fp4_variable_k_accum", mutates_args=("out",))
def _vk_fp4_accum_op(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, trans_c: bool,
                     num_cu: int | None, out: T) -> None:
    call("grouped_gemm_fp4_variable_k", GroupedGemmFp4VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, None, trans_c, num_cu, out))


@_vk_fp4_accum_op.register_fake
def _(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, trans_c, num_cu, out):
    return None


# -- launchers ------------------------------------------------------------------------------------------

def grouped_gemm_fp8(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, *,
                     trans_b: bool = True, out_dtype: torch.dtype | None = None,
                     granularity: G | str = G.TENSORWISE, block_size: int | None = None,
                     num_cu: int | None = None) -> T:
    """Run the ``grouped_gemm_fp8`` primitive (see :class:`GroupedGemmFp8Args`)."""
    gran = as_granularity(granularity)
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_gemm_fp8(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, trans_b,
                                                out_dtype, gran.value, block_size, num_cu)
    return call("grouped_gemm_fp8", GroupedGemmFp8Args(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                       trans_b, out_dtype, gran, block_size, num_cu))


def grouped_gemm_fp8_variable_k(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, *,
                                out_dtype: torch.dtype | None = None, granularity: G | str = G.TENSORWISE,
                                block_size: int | None = None, trans_c: bool = False, num_cu: int | None = None,
                                out: T | None = None) -> T:
    """Run the ``grouped_gemm_fp8_variable_k`` primitive; with ``out``, accumulate into it and return it."""
    gran = as_granularity(granularity)
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.grouped_gemm_fp8_variable_k_accum(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                              gran.value, block_size, trans_c, num_cu, out)
            return out
        return torch.ops.turbo.grouped_gemm_fp8_variable_k(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                           out_dtype, gran.value, block_size, trans_c, num_cu)
    return call("grouped_gemm_fp8_variable_k", GroupedGemmFp8VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, gran, block_size, trans_c, num_cu, out))


def grouped_gemm_fp4(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, *,
                     trans_b: bool = True, out_dtype: torch.dtype | None = None, num_cu: int | None = None) -> T:
    """Run the ``grouped_gemm_fp4`` primitive (see :class:`GroupedGemmFp4Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_gemm_fp4(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, trans_b,
                                                out_dtype, num_cu)
    return call("grouped_gemm_fp4", GroupedGemmFp4Args(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                       trans_b, out_dtype, num_cu))


def grouped_gemm_fp4_variable_k(a: T, a_scale_inv: T, b: T, b_scale_inv: T, group_lens: T, group_offs: T, *,
                                out_dtype: torch.dtype | None = None, trans_c: bool = False,
                                num_cu: int | None = None, out: T | None = None) -> T:
    """Run the ``grouped_gemm_fp4_variable_k`` primitive; with ``out``, accumulate into it and return it."""
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.grouped_gemm_fp4_variable_k_accum(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                              trans_c, num_cu, out)
            return out
        return torch.ops.turbo.grouped_gemm_fp4_variable_k(a, a_scale_inv, b, b_scale_inv, group_lens, group_offs,
                                                           out_dtype, trans_c, num_cu)
    return call("grouped_gemm_fp4_variable_k", GroupedGemmFp4VariableKArgs(
        a, a_scale_inv, b, b_scale_inv, group_lens, group_offs, out_dtype, trans_c, num_cu, out))
