"""``grouped_gemm`` (bf16/fp16) and ``grouped_gemm_fp8`` (TENSORWISE/ROWWISE) on Composable Kernel.

Each non-empty group is one CK GEMM of the "RCR" instances (``csrc/ck_instances.hpp``), launched in order
by one ``_C.gemm_many`` call: group g's rows of a ``[M_total, K]`` times b[g] as ``[N, K]`` (b ``[G, K, N]``
is copied into ``[G, N, K]`` first when ``trans_b=False``). The group offsets are read on the host (one
sync per call), so CUDA-graph capture is declined. Rows past ``group_offs[-1]`` are zero. Numerics: fp32
accumulation, FP8 scales applied to the fp32 sum (MultiplyMultiply), rounded once to bf16/fp16.
Declined, with the reason: other archs or FP8 flavours, BLOCKWISE/MX FP8, fp32, K not a multiple of
16 bytes' worth of elements, N not a multiple of 8.
"""

from __future__ import annotations

import torch

from turbo_ck.codes import ARCH_CODES, DTYPE_CODES, KIND_PLAIN, KIND_ROWWISE
from turbo_ck.gemm_fp8 import dtype_reason
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, grouped_gemm_dims
from turbo_core.dispatch.specs.grouped_gemm_fp8 import GroupedGemmFp8Args, grouped_lowp_dims
from turbo_core.low_precision import ScalingGranularity

__all__ = ["can_handle", "can_handle_fp8", "group_calls", "grouped_gemm", "grouped_gemm_fp8", "reason",
           "reason_fp8", "run"]

G = ScalingGranularity


def _shape_reason(what: str, n: int, k: int, elem: int) -> str | None:
    vec = 16 // elem
    if k % vec:
        return f"CK {what} reads 16-byte vectors along K: K must be a multiple of {vec} (K={k})"
    if n % 8:
        return f"CK {what} writes 8-element vectors: N must be a multiple of 8 (N={n})"
    return None


def reason(args: GroupedGemmArgs, arch: str | None) -> str | None:
    """Why the CK instances decline this bf16/fp16 grouped GEMM on ``arch``, else None. Pure."""
    if arch is None:
        return "CK grouped_gemm: instances are compiled for gfx942 and gfx950 only"
    if args.a.dtype not in (torch.bfloat16, torch.float16):
        return f"CK grouped_gemm serves bf16/fp16, not {args.a.dtype}"
    _, _, n, k = grouped_gemm_dims(args)
    return _shape_reason("grouped_gemm", n, k, 2)


def reason_fp8(args: GroupedGemmFp8Args, arch: str | None) -> str | None:
    """Why the CK instances decline this FP8 grouped GEMM on ``arch``, else None. Pure."""
    why = dtype_reason(arch, args.a.dtype, args.b.dtype, "grouped_gemm_fp8")
    if why:
        return why
    gran = G(args.granularity)
    if gran not in (G.TENSORWISE, G.ROWWISE):
        return f"CK grouped_gemm_fp8 serves TENSORWISE and ROWWISE, not {gran.value}"
    if args.out_dtype not in (torch.bfloat16, torch.float16):
        return f"CK grouped_gemm_fp8 instances write bf16 or fp16, not {args.out_dtype}"
    _, _, n, k = grouped_lowp_dims(args)
    return _shape_reason("grouped_gemm_fp8", n, k, 1)


def group_calls(offs: list[int], *, a_ptr: int, a_row: int, b_ptr: int, b_step: int, c_ptr: int, c_row: int,
                sa_ptr: int = 0, sb_ptr: int = 0, sb_step: int = 0) -> list[tuple[int, int, int, int, int, int]]:
    """The ``(m, a, b, c, a_scale, b_scale)`` tuples of ``_C.gemm_many``, one per non-empty group: group g's
    rows ``[offs[g], offs[g+1])`` of a (``a_row`` bytes per row), of the result (``c_row``) and of a's
    fp32 scale vector; matrix g of b (``b_step`` bytes) and its scale vector (``sb_step`` bytes). Pure."""
    calls = []
    for g in range(len(offs) - 1):
        start, length = offs[g], offs[g + 1] - offs[g]
        if length <= 0:
            continue
        calls.append((length, a_ptr + start * a_row, b_ptr + g * b_step, c_ptr + start * c_row,
                      sa_ptr + start * 4 if sa_ptr else 0, sb_ptr + g * sb_step if sb_ptr else 0))
    return calls


def run(a: torch.Tensor, b: torch.Tensor, trans_b: bool, offs: list[int], out_dtype: torch.dtype, ext, arch: str,
        stream: int, scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The grouped GEMM through ``ext.gemm_many``; ``scales``: fp32 ``[M_total]`` and ``[G, N]`` (FP8)."""
    a = a if a.stride(1) == 1 and a.stride(0) >= a.shape[1] else a.contiguous()
    b = (b if trans_b else b.transpose(1, 2)).contiguous()  # [G, N, K]
    m_total, k = a.shape
    n = b.shape[1]
    out = torch.empty((m_total, n), dtype=out_dtype, device=a.device)
    out[offs[-1]:].zero_()
    sa, sb = scales if scales is not None else (None, None)
    calls = group_calls(offs, a_ptr=a.data_ptr(), a_row=a.stride(0) * a.element_size(), b_ptr=b.data_ptr(),
                        b_step=b.stride(0) * b.element_size(), c_ptr=out.data_ptr(), c_row=n * out.element_size(),
                        sa_ptr=sa.data_ptr() if sa is not None else 0, sb_ptr=sb.data_ptr() if sb is not None else 0,
                        sb_step=n * 4)
    if calls:
        ext.gemm_many(ARCH_CODES[arch], KIND_ROWWISE if scales is not None else KIND_PLAIN, DTYPE_CODES[a.dtype],
                      DTYPE_CODES[b.dtype], DTYPE_CODES[out_dtype], n, k, a.stride(0), b.stride(1), n, stream, calls)
    return out


def fp8_scales(args: GroupedGemmFp8Args) -> tuple[torch.Tensor, torch.Tensor]:
    """a's scales as fp32 ``[M_total]`` and b's as ``[G, N]`` (tensorwise scales expanded)."""
    g, m, n, _ = grouped_lowp_dims(args)
    if G(args.granularity) == G.TENSORWISE:
        return (args.a_scale_inv.reshape(1).expand(m).contiguous(),
                args.b_scale_inv.reshape(1, 1).expand(g, n).contiguous())
    return args.a_scale_inv.reshape(m).contiguous(), args.b_scale_inv.reshape(g, n).contiguous()


def _gpu_reason(a: torch.Tensor, what: str) -> str | None:
    from turbo_ck import runtime

    why = runtime.gpu_reason(a, what)
    if why is None and torch.cuda.is_current_stream_capturing():
        why = f"CK {what} reads the group offsets on the host (a sync), which CUDA-graph capture forbids"
    return why


def can_handle(args: GroupedGemmArgs) -> str | None:
    from turbo_ck import runtime

    return _gpu_reason(args.a, "grouped_gemm") or reason(args, runtime.arch(args.a))


def can_handle_fp8(args: GroupedGemmFp8Args) -> str | None:
    from turbo_ck import runtime

    return _gpu_reason(args.a, "grouped_gemm_fp8") or reason_fp8(args, runtime.arch(args.a))


def grouped_gemm(args: GroupedGemmArgs) -> torch.Tensor:
    from turbo_ck import runtime

    offs = [int(x) for x in args.group_offs.tolist()]
    with runtime.on_device(args.a):
        return run(args.a, args.b, args.trans_b, offs, args.a.dtype, runtime.ext(), runtime.arch(args.a),
                   runtime.stream(args.a))


def grouped_gemm_fp8(args: GroupedGemmFp8Args) -> torch.Tensor:
    from turbo_ck import runtime

    offs = [int(x) for x in args.group_offs.tolist()]
    with runtime.on_device(args.a):
        return run(args.a, args.b, args.trans_b, offs, args.out_dtype, runtime.ext(), runtime.arch(args.a),
                   runtime.stream(args.a), fp8_scales(args))
