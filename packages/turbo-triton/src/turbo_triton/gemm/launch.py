"""The ``gemm`` primitive on Triton: capability check and launcher (compiled variants are cached
by Triton itself, keyed by the constexpr values and the specialisations)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims
from turbo_triton import _runtime
from turbo_triton.gemm import configs
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def can_handle(args: GemmArgs) -> str | None:
    reason = _runtime.device_reason(args.a)
    if reason:
        return reason
    if args.a.dtype not in _DTYPES:
        return f"TRITON gemm serves fp16/bf16/fp32, not {args.a.dtype}"
    return None


def _tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs a unit inner stride, 16-byte aligned outer strides and base addresses."""
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.shape[0] == 0 or t.shape[1] == 0:
            return False
        if (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return False
    return True


def kernel_path(args: GemmArgs) -> str:
    """``"tma"`` or ``"pointer"``: which kernel :func:`gemm` launches for these arguments."""
    a = args.a
    if _runtime.interpreting() or a.device.type != "cuda":
        return "pointer"
    arch, _ = _runtime.device_facts(a)
    m, n, k = gemm_dims(args)
    c_like = args.out if args.out is not None else a.new_empty((n, m) if args.trans_c else (m, n))
    return "tma" if _tma_eligible(arch, k, a, args.b, c_like) else "pointer"


def _tma_eligible(arch: str, k: int, *tensors: torch.Tensor) -> bool:
    """The TMA kernel can take these operands (and output) on ``arch``."""
    return k > 0 and _runtime.tma_arch(arch) and _tma_ok(*tensors)


def gemm(args: GemmArgs, config: configs.GemmConfig | None = None) -> torch.Tensor:
    """Run the kernel; ``config`` overrides the heuristic table (tuning and benchmarks use it)."""

    a, b = args.a, args.b
    m, n, k = gemm_dims(args)
    if args.out is not None:
        c = args.out
    else:
        c = torch.empty((n, m) if args.trans_c else (m, n), dtype=args.result_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    interp = _runtime.interpreting()
    arch, sms = _runtime.device_facts(a)
    cfg = config or configs.pick(arch, m, n, k, sms, a.element_size(), c.element_size(), not args.trans_b)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    programs = max(1, min(sms, tiles))
    fp32 = a.dtype == torch.float32
    precision = "ieee" if (interp or not fp32) else "tf32x3"
    accumulate = args.out is not None

    launch = _launch_tma if not interp and _tma_eligible(arch, k, a, b, c) else _launch_pointer
    key = (a.dtype, c.dtype, args.trans_a, args.trans_b, args.trans_c, accumulate)
    _runtime.launch_fitted(launch, cfg, key, args, a, b, c, m, n, k, programs, accumulate, precision,
                           shrink=configs.shrink)
    return c


def _launch_tma(cfg, args, a, b, c, m, n, k, programs, accumulate, precision):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.gemm import kernels

    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(a, [bk, bm] if args.trans_a else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bn, bk] if args.trans_b else [bk, bn])
    subtile = cfg.subtile and not args.trans_c
    c_desc = TensorDescriptor.from_tensor(c, [bn, bm] if args.trans_c else [bm, bn // 2 if subtile else bn])
    fast_kernel(kernels.gemm_tma_persistent_kernel)[(programs,)](
        a_desc, b_desc, c_desc, m, n, k,
        TRANS_A=args.trans_a, TRANS_B=args.trans_b, TRANS_C=args.trans_c,
        ACCUMULATE=accumulate, PRECISION=precision,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, NUM_PROGRAMS=programs,
        FLATTEN=cfg.flatten, WARP_SPECIALIZE=cfg.warp_specialize, SUBTILE=subtile,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def _launch_pointer(cfg, args, a, b, c, m, n, k, programs, accumulate, precision):
    from turbo_triton.gemm import kernels

    interp = _runtime.interpreting()
    sam, sak = (a.stride(1), a.stride(0)) if args.trans_a else (a.stride(0), a.stride(1))
    sbk, sbn = (b.stride(1), b.stride(0)) if args.trans_b else (b.stride(0), b.stride(1))
    scm, scn = (c.stride(1), c.stride(0)) if args.trans_c else (c.stride(0), c.stride(1))
    fast_kernel(kernels.gemm_persistent_kernel)[(programs,)](
        a, b, c, m, n, k, sam, sak, sbk, sbn, scm, scn,
        ACCUMULATE=accumulate, UPCAST=interp and a.dtype == torch.bfloat16, PRECISION=precision,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m, NUM_PROGRAMS=programs,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
