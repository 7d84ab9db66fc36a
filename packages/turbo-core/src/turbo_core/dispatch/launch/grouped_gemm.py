"""``turbo::grouped_gemm``, ``turbo::grouped_gemm_variable_k`` and ``..._variable_k_accum``
custom ops and their launchers.

The fake implementations need only shapes: the forward's result is ``[M_total, N]`` (the rows of
``a``, not ``sum(group_lens)``), the variable-K result ``[G, K, N]`` / ``[G, N, K]``, so no output
shape depends on tensor data.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.grouped_gemm import (
    GroupedGemmArgs,
    GroupedGemmVariableKArgs,
    grouped_gemm_dims,
)

__all__ = ["grouped_gemm", "grouped_gemm_variable_k"]


@torch.library.custom_op("turbo::grouped_gemm", mutates_args=())
def _grouped_gemm_op(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor,
                     trans_b: bool, num_cu: int | None, schedule: str) -> torch.Tensor:
    return call("grouped_gemm", GroupedGemmArgs(a, b, group_lens, group_offs, trans_b, num_cu, schedule))


@_grouped_gemm_op.register_fake
def _grouped_gemm_fake(a, b, group_lens, group_offs, trans_b, num_cu, schedule):
    _, m, n, _ = grouped_gemm_dims(GroupedGemmArgs(a, b, group_lens, group_offs, trans_b))
    return a.new_empty((m, n))


def _variable_k_shape(a, b, group_lens, trans_c):
    g, k, n = group_lens.shape[0], a.shape[1], b.shape[1]
    return (g, n, k) if trans_c else (g, k, n)


@torch.library.custom_op("turbo::grouped_gemm_variable_k", mutates_args=())
def _variable_k_op(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor,
                   trans_c: bool, num_cu: int | None) -> torch.Tensor:
    return call("grouped_gemm_variable_k", GroupedGemmVariableKArgs(a, b, group_lens, group_offs, trans_c, num_cu))


@_variable_k_op.register_fake
def _variable_k_fake(a, b, group_lens, group_offs, trans_c, num_cu):
    return a.new_empty(_variable_k_shape(a, b, group_lens, trans_c))


@torch.library.custom_op("turbo::grouped_gemm_variable_k_accum", mutates_args=("out",))
def _variable_k_accum_op(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor,
                         trans_c: bool, num_cu: int | None, out: torch.Tensor) -> None:
    call("grouped_gemm_variable_k", GroupedGemmVariableKArgs(a, b, group_lens, group_offs, trans_c, num_cu, out))


@_variable_k_accum_op.register_fake
def _variable_k_accum_fake(a, b, group_lens, group_offs, trans_c, num_cu, out):
    return None


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor, *,
                 trans_b: bool = False, num_cu: int | None = None, schedule: str = "static") -> torch.Tensor:
    """Run the ``grouped_gemm`` primitive (see :class:`GroupedGemmArgs`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_gemm(a, b, group_lens, group_offs, trans_b, num_cu, schedule)
    return call("grouped_gemm", GroupedGemmArgs(a, b, group_lens, group_offs, trans_b, num_cu, schedule))


def grouped_gemm_variable_k(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor, *,
                            trans_c: bool = False, num_cu: int | None = None,
                            out: torch.Tensor | None = None) -> torch.Tensor:
    """Run the ``grouped_gemm_variable_k`` primitive (see :class:`GroupedGemmVariableKArgs`);
    with ``out``, accumulate into it and return it."""
    if torch.compiler.is_compiling():
        if out is not None:
            torch.ops.turbo.grouped_gemm_variable_k_accum(a, b, group_lens, group_offs, trans_c, num_cu, out)
            return out
        return torch.ops.turbo.grouped_gemm_variable_k(a, b, group_lens, group_offs, trans_c, num_cu)
    return call("grouped_gemm_variable_k",
                GroupedGemmVariableKArgs(a, b, group_lens, group_offs, trans_c, num_cu, out))
