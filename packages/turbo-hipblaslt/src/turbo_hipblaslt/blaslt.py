"""One BLASLt call from torch tensors: the plan (``layout.plan_gemm``), the tuple of plain integers
the extension takes (``matmul_args.call_args``, pure), and its launch on the current
stream of the tensors' device with that (device, stream)'s workspace. The tuple's last slot,
``algo``, is the rank of the algorithm in the library heuristic's list (0: its first choice; which
rank a launcher asks for: ``turbo_hipblaslt.algos``).

Numerics of a call: ``d = epilogue(op(a) @ op(b) * scales + beta * d + bias)`` accumulated in fp32
(TF32 for fp32 inputs only when ``torch.backends.cuda.matmul.allow_tf32``), rounded once to d's dtype.
"""

from __future__ import annotations

import functools

import torch

from turbo_hipblaslt import runtime
from turbo_hipblaslt.codes import DTYPE_CODES, EPILOGUE_CODES
from turbo_hipblaslt.layout import BlasPlan, plan_gemm
from turbo_hipblaslt.matmul_args import Side, call_args, probe_args

__all__ = ["HeldArgs", "algo_count", "args_for", "check", "launch", "launch_many", "meta", "plan", "template_args"]


def meta(t: torch.Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    return (int(t.shape[0]), int(t.shape[1])), (int(t.stride(0)), int(t.stride(1)))


@functools.lru_cache(maxsize=4096)
def _cached_plan(a, trans_a, b, trans_b, d, trans_c, need_tn, need_swapped) -> BlasPlan:
    return plan_gemm(a, trans_a, b, trans_b, d, trans_c, need_tn=need_tn, need_swapped=need_swapped)


def plan(a: torch.Tensor, trans_a: bool, b: torch.Tensor, trans_b: bool, d: torch.Tensor, trans_c: bool, *,
         need_tn: bool = False, need_swapped: bool = False) -> BlasPlan:
    """:func:`layout.plan_gemm` on tensors (cached by shapes, strides and flags)."""
    return _cached_plan(meta(a), bool(trans_a), meta(b), bool(trans_b), meta(d), bool(trans_c), need_tn, need_swapped)


class HeldArgs(tuple):
    """A call's argument tuple that also holds the workspace made for this call alone
    (``runtime.workspace``'s ``held``): the workspace lives as long as the tuple, which the caller
    keeps until the launch is queued."""

    workspace: torch.Tensor


def args_for(p: BlasPlan, a: Side, b: Side, d: torch.Tensor, *, beta: float = 0.0, epilogue: str | None = None,
             bias: torch.Tensor | None = None, algo: int = 0) -> tuple:
    """The argument tuple of a call writing ``d`` (on d's device, current stream, its workspace): a
    plain tuple with the stream's kept workspace, or a :class:`HeldArgs` holding a workspace of its
    own (inside CUDA-graph capture; see ``runtime.workspace``)."""
    index = runtime.device_index(d)
    stream = runtime.stream_handle(index)
    ws, ws_size, held = runtime.workspace(index, stream)
    compute = runtime.tf32() if a.code == DTYPE_CODES[torch.float32] else 0
    args = call_args(p, a, b, d.data_ptr(), DTYPE_CODES[d.dtype], device=index, beta=beta, compute=compute,
                     epilogue=EPILOGUE_CODES[epilogue], bias_ptr=bias.data_ptr() if bias is not None else 0,
                     bias_code=DTYPE_CODES[bias.dtype] if bias is not None else -1, stream=stream, workspace=ws,
                     workspace_size=ws_size, algo=algo)
    if held is None:
        return args
    args = HeldArgs(args)
    args.workspace = held
    return args


def template_args(head: tuple, swapped: bool, a_ptr: int, b_ptr: int, d: torch.Tensor, a_scale_ptr: int = 0,
                  b_scale_ptr: int = 0) -> tuple:
    """:func:`args_for`'s tuple from ``head``, an earlier call's tuple of the same metadata (plan,
    dtypes, flags, scale modes, device): its data and scale pointers, stream and workspace replaced
    by this call's (turbo's ``a``/``b`` and their scales are BLAS B/A when the plan is ``swapped``),
    ``algo`` 0. Unscaled calls leave the scale pointers 0."""
    index = head[0]
    stream = runtime.stream_handle(index)
    ws, ws_size, held = runtime.workspace(index, stream)
    first, second = (b_ptr, a_ptr) if swapped else (a_ptr, b_ptr)
    first_s, second_s = (b_scale_ptr, a_scale_ptr) if swapped else (a_scale_ptr, b_scale_ptr)
    args = (*head[:6], first, *head[7:9], second, *head[10:12], d.data_ptr(), *head[13:21], first_s, head[22],
            second_s, head[24], stream, ws, ws_size, 0)
    if held is None:
        return args
    args = HeldArgs(args)
    args.workspace = held
    return args


def launch(args: tuple) -> None:
    """Run one call (``_C.BlasLtError`` with the library's status name on failure)."""
    runtime.run_on(args[0], runtime.ext().matmul, *args)


def launch_many(args: tuple, groups: list[tuple[int, int, int, int, int, int]]) -> None:
    """Run ``args`` once per ``(m, n, k, a_ptr, b_ptr, d_ptr)`` group, in order (empty ones skipped)."""
    runtime.run_on(args[0], runtime.ext().matmul_many, args, groups)


def check(args: tuple) -> str | None:
    """``None`` when the library has an algorithm (of rank ``args``' ``algo``) for ``args``'
    configuration, else why not."""
    return runtime.run_on(args[0], runtime.ext().check, *probe_args(args))


def algo_count(args: tuple) -> int:
    """How many usable algorithms (0..16) the library's heuristic offers for ``args``' configuration
    (its ``algo`` ignored), at the alignments of ``args``' own pointers (those of the launch being
    tuned: unlike :func:`check`, no reduction to the selection cache's residues, which would let the
    heuristic assume only 16 bytes); asked anew each time (for tuning, not for launches)."""
    return int(runtime.run_on(args[0], runtime.ext().algo_count, *args))
