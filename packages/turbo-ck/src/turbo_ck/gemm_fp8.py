"""``gemm_fp8`` on Composable Kernel (semantics: ``turbo_core.dispatch.specs.gemm_fp8``).

Every call becomes one "RCR" CK GEMM (``csrc/ck_instances.hpp``): A ``[M, K]`` and B ``[N, K]``, both
contiguous along K, C ``[M, N]`` row-major, fp32 accumulation, rounded once to bf16/fp16.

* TENSORWISE and ROWWISE: the rowwise instance (MultiplyMultiply epilogue); a tensorwise scale is
  expanded to a vector (``[M]`` / ``[N]`` fp32, one small copy each).
* BLOCKWISE (``block_size=128``): a in 1x128 blocks, b in 128x128 tiles (the DeepSeek layout), K a multiple
  of 128; scales re-laid out K-fastest (``[M, K/128]``, ``[N/128, K/128]``).
* An operand not contiguous along K (``trans_a=True``, ``trans_b=False``, other strides) is copied into
  that layout first. ``trans_c`` swaps the operands (``C.T = B A.T``; not for BLOCKWISE).
* FP8 dtypes: the arch's flavour only (gfx942: FNUZ, gfx950: OCP); E4M3, E5M2 and both mixed pairs.
Declined, with the reason: MX_BLOCKWISE, fp32 results, ``out`` (accumulation), K not a multiple of 16,
the result's row length not a multiple of 8, other archs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_ck.codes import ARCH_CODES, ARCH_FP8, DTYPE_CODES, KIND_BLOCKWISE, KIND_ROWWISE
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, gemm_fp8_dims
from turbo_core.low_precision import ScalingGranularity

__all__ = ["Plan", "can_handle", "gemm_fp8", "plan", "run"]

G = ScalingGranularity
BLOCK = 128
_OUT = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Plan:
    """The CK call decided from metadata: ``kind``, ``swap`` (trans_c), ``(M, N, K)`` of turbo's call."""

    kind: int
    swap: bool
    m: int
    n: int
    k: int


def dtype_reason(arch: str | None, a: torch.dtype, b: torch.dtype, what: str) -> str | None:
    """Why this arch's CK instances cannot read FP8 dtypes ``a``/``b``, else None. Pure."""
    if arch is None:
        return f"CK {what}: instances are compiled for gfx942 and gfx950 only"
    allowed = ARCH_FP8[arch]
    if a not in allowed or b not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        return (f"CK {what} on {arch} reads {names} only (gfx942: FNUZ FP8, gfx950: OCP FP8), "
                f"got {str(a).replace('torch.', '')} x {str(b).replace('torch.', '')}")
    return None


def plan(args: GemmFp8Args, arch: str | None) -> Plan | str:
    """The CK call for ``args`` on ``arch`` ("gfx942", "gfx950" or None), or why it is declined. Pure
    (reads shapes and dtypes only)."""
    reason = dtype_reason(arch, args.a.dtype, args.b.dtype, "gemm_fp8")
    if reason:
        return reason
    gran = G(args.granularity)
    m, n, k = gemm_fp8_dims(args)
    if args.out is not None:
        return "CK gemm_fp8 writes its result (no accumulation into out: no beta in the compiled instances)"
    if args.result_dtype not in _OUT:
        return f"CK gemm_fp8 instances write bf16 or fp16, not {args.result_dtype}"
    if gran in (G.TENSORWISE, G.ROWWISE):
        kind = KIND_ROWWISE
    elif gran == G.BLOCKWISE:
        kind = KIND_BLOCKWISE
        if args.block_size != BLOCK:
            return f"CK gemm_fp8 BLOCKWISE serves block_size=128 only, not {args.block_size}"
        if k % BLOCK:
            return f"CK gemm_fp8 BLOCKWISE needs K to be a multiple of 128 (K={k})"
        a_kind = blockwise_layout(tuple(args.a.shape), tuple(args.a_scale_inv.shape), -2 if args.trans_a else -1, BLOCK)
        b_kind = blockwise_layout(tuple(args.b.shape), tuple(args.b_scale_inv.shape), -1 if args.trans_b else -2, BLOCK)
        if (a_kind, b_kind) != ("1d", "2d"):
            return (f"CK gemm_fp8 BLOCKWISE serves a in 1x128 blocks with b in 128x128 tiles only "
                    f"(got a {a_kind}, b {b_kind})")
        if args.trans_c:
            return "CK gemm_fp8 BLOCKWISE does not write the transposed result (trans_c)"
    else:
        return f"CK gemm_fp8 does not serve {gran.value}"
    if k % 16:
        return f"CK gemm_fp8 reads 16-byte vectors along K: K must be a multiple of 16 (K={k})"
    row = m if args.trans_c else n
    if row % 8:
        return f"CK gemm_fp8 writes 8-element vectors: the result's rows need a multiple of 8 columns (got {row})"
    return Plan(kind, bool(args.trans_c), m, n, k)


def _k_major(t: torch.Tensor) -> torch.Tensor:
    """``t`` (a ``[rows, K]`` view) with unit stride along K, copied only when it has none."""
    return t if t.stride(1) == 1 and t.stride(0) >= t.shape[1] else t.contiguous()


def operands(args: GemmFp8Args, p: Plan) -> tuple[torch.Tensor, ...]:
    """``(A [M, K], B [N, K], a_scale, b_scale)`` in the layouts the instances read (before the swap)."""
    a = _k_major(args.a.t() if args.trans_a else args.a)
    b = _k_major(args.b if args.trans_b else args.b.t())
    sa, sb = args.a_scale_inv, args.b_scale_inv
    if G(args.granularity) == G.TENSORWISE:
        sa = sa.reshape(1).expand(p.m).contiguous()
        sb = sb.reshape(1).expand(p.n).contiguous()
    elif G(args.granularity) == G.ROWWISE:
        sa, sb = sa.reshape(-1).contiguous(), sb.reshape(-1).contiguous()
    else:
        sa = (sa.t() if args.trans_a else sa).contiguous()  # [M, K/128]
        sb = (sb if args.trans_b else sb.t()).contiguous()  # [N/128, K/128]
    return a, b, sa, sb


def run(args: GemmFp8Args, p: Plan, ext, arch: str, stream: int) -> torch.Tensor:
    """Launch ``p`` through ``ext.gemm`` (the compiled ``_C`` or a test's fake); returns the result."""
    a, b, sa, sb = operands(args, p)
    if p.swap:
        a, b, sa, sb = b, a, sb, sa
    rows, cols = a.shape[0], b.shape[0]
    c = torch.empty((rows, cols), dtype=args.result_dtype, device=args.a.device)
    ext.gemm(ARCH_CODES[arch], p.kind, DTYPE_CODES[a.dtype], DTYPE_CODES[b.dtype], DTYPE_CODES[c.dtype], rows, cols,
             p.k, a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), c.data_ptr(), cols, sa.data_ptr(),
             sb.data_ptr(), stream)
    return c


def can_handle(args: GemmFp8Args) -> str | None:
    from turbo_ck import runtime

    reason = runtime.gpu_reason(args.a, "gemm_fp8")
    if reason:
        return reason
    m, n, k = gemm_fp8_dims(args)
    if 0 in (m, n, k):
        return None
    p = plan(args, runtime.arch(args.a))
    return p if isinstance(p, str) else None


def gemm_fp8(args: GemmFp8Args) -> torch.Tensor:
    from turbo_ck import runtime

    m, n, k = gemm_fp8_dims(args)
    if 0 in (m, n, k):
        shape = (n, m) if args.trans_c else (m, n)
        return torch.zeros(shape, dtype=args.result_dtype, device=args.a.device)
    arch = runtime.arch(args.a)
    p = plan(args, arch)
    if isinstance(p, str):
        raise ValueError(p)
    with runtime.on_device(args.a):
        return run(args, p, runtime.ext(), arch, runtime.stream(args.a))
