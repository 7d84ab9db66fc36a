"""``grouped_gemm``: grouped GEMM with autograd (forward and dgrad are ``grouped_gemm`` primitives,
wgrad is a ``grouped_gemm_variable_k`` primitive), and ``grouped_gemm_compute_offs``."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import grouped_gemm as launch
from turbo_core.dispatch.specs.grouped_gemm import GROUPED_GEMM, GroupedGemmArgs
from turbo_core.dispatch.specs.validate import assert_group_values_async, check_group_lens, device_asserts
from turbo_core.ops._autograd import grad_needed
from turbo_core.ops._grad_accum import check_pattern, dummy_grad

__all__ = ["grouped_gemm", "grouped_gemm_compute_offs"]


def grouped_gemm_compute_offs(group_lens: torch.Tensor) -> torch.Tensor:
    """The exclusive prefix sum of ``group_lens``: ``[0, l0, l0+l1, ..., sum]``.

    Args:
        group_lens: int64 ``[G]``.

    Returns:
        int64 ``[G + 1]`` on group_lens' device, computed there (no host sync).
    """
    check_group_lens(group_lens)
    offs = group_lens.new_zeros(group_lens.shape[0] + 1)
    return torch.cat([offs[:1], torch.cumsum(group_lens, 0)])


class _GroupedGemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, group_lens, group_offs, trans_b, num_cu, schedule, fused_accum):
        ctx.save_for_backward(a, b, group_lens, group_offs)
        ctx.trans_b, ctx.num_cu, ctx.schedule, ctx.fused_accum = trans_b, num_cu, schedule, fused_accum
        return launch.grouped_gemm(a.contiguous(), b.contiguous(), group_lens, group_offs,
                                   trans_b=trans_b, num_cu=num_cu, schedule=schedule)

    @staticmethod
    def backward(ctx, grad_out):
        a, b, group_lens, group_offs = ctx.saved_tensors
        tb, num_cu = ctx.trans_b, ctx.num_cu
        grad_out = grad_out.contiguous()
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            # dgrad: dA_g = dC_g @ op(B[g])^T, the same grouped GEMM with b's other reading.
            grad_a = launch.grouped_gemm(grad_out, b.contiguous(), group_lens, group_offs,
                                         trans_b=not tb, num_cu=num_cu, schedule=ctx.schedule)
        if ctx.fused_accum:
            # wgrad straight into main_grad (beta=1), in b's layout.
            launch.grouped_gemm_variable_k(a.contiguous(), grad_out, group_lens, group_offs,
                                           trans_c=tb, num_cu=num_cu, out=b.main_grad)
            grad_b = dummy_grad(b)
        elif ctx.needs_input_grad[1]:
            # wgrad: dB[g] = A_g^T @ dC_g over group g's rows, as [G, N, K] when trans_b.
            grad_b = launch.grouped_gemm_variable_k(a.contiguous(), grad_out, group_lens, group_offs,
                                                    trans_c=tb, num_cu=num_cu)
        return grad_a, grad_b, None, None, None, None, None, None


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, group_offs: torch.Tensor | None = None,
                 trans_b: bool = False, num_cu: int | None = None, schedule: str = "static",
                 fuse_bgrad_accum_pattern: str | None = None) -> torch.Tensor:
    """Grouped GEMM (mixture-of-experts layers) with autograd: ``out_g = A_g @ op(B[g])``.

    Args:
        a: ``[M_total, K]``, fp16/bf16/fp32: tokens packed by group along M (group ``g`` owns rows
            ``[group_offs[g], group_offs[g+1])``). Non-contiguous input is made contiguous.
        b: ``[G, K, N]``, or ``[G, N, K]`` when ``trans_b`` (a GroupedLinear weight ``[G, out, in]``
            is used with ``trans_b=True``); a's dtype and device.
        group_lens: int64 ``[G]`` on a's device: non-negative, ``sum(group_lens) <= M_total``.
        group_offs: int64 ``[G + 1]``, the exclusive prefix sum of ``group_lens``; ``None`` computes
            it on the device (:func:`grouped_gemm_compute_offs`).
        num_cu: ``None`` or a positive cap on the compute units persistent kernels use (a hint;
            some backends, and the reference, ignore it).
        schedule: ``"static"`` or ``"work_steal"`` (a hint; work stealing needs ``num_cu=None``).
        fuse_bgrad_accum_pattern: ``None`` or ``"megatron"`` (accumulate b's gradient into
            ``b.main_grad``; see ``turbo_core.ops._grad_accum``).

    Returns:
        ``[M_total, N]`` in a's dtype; products accumulated in fp32 (or wider) and rounded once.
        Rows ``[sum(group_lens), M_total)`` (an over-allocated tail) are zero.
        The backward computes ``dA = grouped_gemm(dC, b, trans_b=not trans_b)`` (tail rows zero)
        and ``dB[g] = A_g^T @ dC_g`` with the variable-K primitive, in b's layout; a zero-length
        group gets a zero gradient. ``group_lens``/``group_offs`` get no gradient.

    Raises:
        ValueError / TypeError naming the argument, before any kernel runs: ranks, dtypes, devices,
        the K match, the length of group_lens/group_offs, ``num_cu``, ``schedule``. The *values*
        of ``group_lens`` (negative lengths, a sum past ``M_total``) and of a given ``group_offs``
        (not their prefix sum) are checked eagerly when they live on the CPU. On a GPU, reading them
        would cost a host sync, so they are checked only with ``TURBO_DEVICE_ASSERTS=1``, by a
        device-side assert (``torch._assert_async``): that error is **asynchronous**, it surfaces at
        a later synchronizing call as a device-side assertion failure (``CUDA_LAUNCH_BLOCKING=1``
        pins it to this op).
    """
    check_group_lens(group_lens)
    offs_given = group_offs is not None
    if not offs_given:
        group_offs = grouped_gemm_compute_offs(group_lens)
    asserts = group_lens.device.type != "cpu" and device_asserts()
    if (torch.compiler.is_compiling() or fuse_bgrad_accum_pattern is not None or asserts
            or not all(isinstance(t, torch.Tensor) for t in (a, b, group_offs))):
        # Eagerly the dispatcher validates these very arguments (its verdict cached per signature)
        # before any kernel runs; here the check runs where errors must come first: at trace time,
        # before the Megatron pattern marks b, before the device-side asserts launch, and before
        # autograd reads non-tensors.
        GROUPED_GEMM.check_args(GroupedGemmArgs(a, b, group_lens, group_offs, trans_b, num_cu, schedule))
    fused = check_pattern(fuse_bgrad_accum_pattern, b)
    if asserts:
        # (CPU values are checked eagerly by the validator, or when a compiled graph runs; GPU values
        # only with TURBO_DEVICE_ASSERTS=1.)
        assert_group_values_async(group_lens, group_offs if offs_given else None, a.shape[0])
    if fused:
        b.grad_added_to_main_grad = True
    elif not grad_needed(a, b):
        return launch.grouped_gemm(a.contiguous(), b.contiguous(), group_lens, group_offs, trans_b=trans_b,
                                   num_cu=num_cu, schedule=schedule)
    return _GroupedGemmFunction.apply(a, b, group_lens, group_offs, trans_b, num_cu, schedule, fused)
