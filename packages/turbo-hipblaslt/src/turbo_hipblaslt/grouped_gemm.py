"""``grouped_gemm`` and ``grouped_gemm_variable_k`` on BLASLt: hipBLASLt's one-launch grouped GEMM on
ROCm, a loop of BLASLt calls elsewhere.

The group offsets are read on the host (``group_offs.tolist()``: **one host sync per call** when they
live on the GPU, hence no CUDA-graph capture: ``can_handle`` declines while a stream is capturing); each
non-empty group becomes one ``(m, n, k, A, B, D)`` problem of the same plan (layouts), with its own size
and pointers (``group_calls``). Then:

* ROCm (the loaded extension has ``matmul_grouped``): one ``_C.matmul_grouped`` call runs every group as
  one ``hipblaslt_ext::GroupedGemm`` (one launch; the heuristic's algorithm and the GroupedGemm object
  are cached per group sizes). When the library has no grouped algorithm for them (it answers ``False``,
  nothing launched), the loop below runs them instead. Written against hipBLASLt's header, not yet
  compiled or run (see the package README).
* CUDA (cuBLASLt has no grouped GEMM with device-side group sizes), or the fallback: one
  ``_C.matmul_many`` call runs one ordinary matmul per group, in order, on the current stream; the
  heuristic's algorithm is cached per distinct size.

Numerics as the dense ``gemm``: fp32 accumulation, rounded once. The forward's rows past
``group_offs[-1]`` are zero; an empty group writes nothing (forward) or gives a zero matrix / leaves
``out[g]`` unchanged (variable-K).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs, grouped_gemm_dims
from turbo_hipblaslt import blaslt, runtime
from turbo_hipblaslt.codes import DTYPE_CODES
from turbo_hipblaslt.gemm import DIRECT, gpu_reason, plan_reason, result_layout
from turbo_hipblaslt.layout import LayoutUnsupported
from turbo_hipblaslt.matmul_args import Side

__all__ = ["can_handle", "can_handle_variable_k", "group_calls", "grouped_gemm", "grouped_gemm_variable_k",
           "launch_groups"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _common_reason(a: torch.Tensor, what: str) -> str | None:
    reason = gpu_reason(a, what)
    if reason:
        return reason
    if a.dtype not in _DTYPES:
        return f"HIPBLASLT {what} serves fp16/bf16/fp32, not {a.dtype}"
    if torch.cuda.is_current_stream_capturing():
        return (f"HIPBLASLT {what} reads the group offsets on the host (a sync), which CUDA-graph capture "
                "forbids")
    return None


def _matrix(t: torch.Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(shape, strides)`` of one matrix ``t[g]`` of a 3-D tensor."""
    return (int(t.shape[1]), int(t.shape[2])), (int(t.stride(1)), int(t.stride(2)))


def group_calls(plan: blaslt.BlasPlan, offs: list[int], *, vary: str, a_ptr: int, a_step: int, b_ptr: int,
                b_step: int, d_ptr: int, d_step: int, fixed: tuple[int, int]) -> list[tuple[int, int, int, int, int, int]]:
    """The ``(m, n, k, A, B, D)`` tuples of ``_C.matmul_many``: one per non-empty group.

    ``vary="rows"`` (forward): group g's rows ``[offs[g], offs[g+1])`` of ``a`` and of the output;
    ``b`` is matrix g. ``vary="k"`` (variable-K): the rows are group g's contraction; the output is
    matrix g. ``*_ptr``/``*_step``: base address and the byte step per row (rows) or per group
    (matrices); ``fixed``: the sizes that do not vary, ``(N, K)`` for rows, ``(K, N)`` for k. Pure."""
    out = []
    for g in range(len(offs) - 1):
        start, length = offs[g], offs[g + 1] - offs[g]
        if length <= 0:
            continue
        if vary == "rows":
            n_, k_ = fixed
            a_g, b_g, d_g = a_ptr + start * a_step, b_ptr + g * b_step, d_ptr + start * d_step
            m, n, k = length, n_, k_
        else:
            m_, n_ = fixed
            a_g, b_g, d_g = a_ptr + start * a_step, b_ptr + start * b_step, d_ptr + g * d_step
            m, n, k = m_, n_, length
        if plan.swapped:
            out.append((n, m, k, b_g, a_g, d_g))
        else:
            out.append((m, n, k, a_g, b_g, d_g))
    return out


def launch_groups(base: tuple, calls: list[tuple[int, int, int, int, int, int]]) -> None:
    """Run ``base`` once per ``(m, n, k, A, B, D)`` group (``group_calls``): as one grouped GEMM when the
    extension has ``matmul_grouped`` (ROCm) and the library has a grouped algorithm for them, else as
    ``matmul_many``'s loop."""
    if not calls:
        return
    grouped = getattr(runtime.ext(), "matmul_grouped", None)
    if grouped is not None and runtime.run_on(base[0], grouped, base, calls):
        return
    blaslt.launch_many(base, calls)


# -- forward / dgrad ----------------------------------------------------------------------------------------

def _forward_plan(args: GroupedGemmArgs) -> blaslt.BlasPlan:
    g, m, n, k = grouped_gemm_dims(args)
    return blaslt._cached_plan(blaslt.meta(args.a), False, _matrix(args.b), args.trans_b, result_layout((m, n)),
                               False, False, False)


def can_handle(args: GroupedGemmArgs) -> str | None:
    reason = _common_reason(args.a, "grouped_gemm")
    if reason:
        return reason
    g, m, n, k = grouped_gemm_dims(args)
    if g == 0 or m == 0 or n == 0 or k == 0:
        return None
    try:
        p = _forward_plan(args)
    except LayoutUnsupported as exc:
        return f"HIPBLASLT grouped_gemm: {exc}"
    return plan_reason("grouped_gemm", p, args.a, args.b, None, args.a.dtype)


def grouped_gemm(args: GroupedGemmArgs) -> torch.Tensor:
    a, b = args.a, args.b
    g, m, n, k = grouped_gemm_dims(args)
    offs = [int(x) for x in args.group_offs.tolist()]  # the host sync (none for CPU offsets)
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    end = offs[-1] if offs else 0
    if end < m:
        out[end:].zero_()
    if k == 0 or n == 0 or g == 0:
        out[:end].zero_()
        return out
    p = _forward_plan(args)
    code = DTYPE_CODES[a.dtype]
    base = blaslt.args_for(p, Side(a.data_ptr(), code), Side(b.data_ptr(), code), out)
    es = a.element_size()
    calls = group_calls(p, offs, vary="rows", a_ptr=a.data_ptr(), a_step=a.stride(0) * es, b_ptr=b.data_ptr(),
                        b_step=b.stride(0) * es, d_ptr=out.data_ptr(), d_step=out.stride(0) * es, fixed=(n, k))
    launch_groups(base, calls)
    return out


# -- variable-K (wgrad) ---------------------------------------------------------------------------------------

def _vk_target(args: GroupedGemmVariableKArgs) -> tuple[bool, torch.dtype]:
    direct = (args.a.dtype, args.result_dtype) in DIRECT
    return direct, (args.result_dtype if direct else torch.float32)


def _vk_plan(args: GroupedGemmVariableKArgs, d_matrix) -> blaslt.BlasPlan:
    return blaslt._cached_plan(blaslt.meta(args.a), True, blaslt.meta(args.b), False, d_matrix, args.trans_c,
                               False, False)


def can_handle_variable_k(args: GroupedGemmVariableKArgs) -> str | None:
    reason = _common_reason(args.a, "grouped_gemm_variable_k")
    if reason:
        return reason
    m, k = args.a.shape
    n = args.b.shape[1]
    if m == 0 or n == 0 or k == 0 or args.group_lens.shape[0] == 0:
        return None
    direct, d_dtype = _vk_target(args)
    use_out = args.out is not None and direct
    d_matrix = _matrix(args.out) if use_out else result_layout((n, k) if args.trans_c else (k, n))
    try:
        p = _vk_plan(args, d_matrix)
    except LayoutUnsupported as exc:
        return f"HIPBLASLT grouped_gemm_variable_k: {exc}"
    return plan_reason("grouped_gemm_variable_k", p, args.a, args.b, args.out if use_out else None, d_dtype)


def grouped_gemm_variable_k(args: GroupedGemmVariableKArgs) -> torch.Tensor:
    a, b, out = args.a, args.b, args.out
    m, k = a.shape
    n = b.shape[1]
    groups = args.group_lens.shape[0]
    shape = (groups, n, k) if args.trans_c else (groups, k, n)
    offs = [int(x) for x in args.group_offs.tolist()]  # the host sync (none for CPU offsets)
    direct, d_dtype = _vk_target(args)
    empty = any(offs[g + 1] <= offs[g] for g in range(groups))
    if direct and out is not None:
        d, beta = out, 1.0
    else:
        alloc = torch.zeros if (empty or k == 0 or n == 0) else torch.empty
        d, beta = alloc(shape, dtype=d_dtype, device=a.device), 0.0
    if m and n and k and groups:
        p = _vk_plan(args, _matrix(d))
        code = DTYPE_CODES[a.dtype]
        base = blaslt.args_for(p, Side(a.data_ptr(), code), Side(b.data_ptr(), code), d, beta=beta)
        es = a.element_size()
        calls = group_calls(p, offs, vary="k", a_ptr=a.data_ptr(), a_step=a.stride(0) * es, b_ptr=b.data_ptr(),
                            b_step=b.stride(0) * es, d_ptr=d.data_ptr(), d_step=d.stride(0) * d.element_size(),
                            fixed=(k, n))
        launch_groups(base, calls)
    if direct:
        return d
    if out is not None:
        out.copy_(out.to(torch.float32) + d)
        return out
    return d.to(args.result_dtype)
