"""The ``grouped_gemm`` and ``grouped_gemm_variable_k`` primitives on Triton: capability checks and
launchers.

No host sync: the group offsets are passed to the kernels as a device tensor and the grid is sized
from host-known shapes only (an upper bound on the tiles, walked by persistent programs), so a call
can be captured in a CUDA graph once the kernels are compiled. ``num_cu`` caps the program count;
``schedule`` is a hint this backend serves statically either way (the tiles are dealt round-robin,
which already spreads skewed groups over every program).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.grouped_gemm import (
    GroupedGemmArgs,
    GroupedGemmVariableKArgs,
    grouped_gemm_dims,
)
from turbo_triton import _runtime
from turbo_triton._runtime import device_facts as _device_facts
from turbo_triton._runtime import tma_arch as _tma_arch
from turbo_triton.grouped_gemm import configs
from turbo_triton.intmath import next_power_of_2
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_INT32 = 2**31 - 1
#: Below this many multiply-adds (``M_total * N * K``) a call takes the pointer kernel even where TMA
#: applies: its device time is launch latency on either kernel, and the TMA kernel's host work (three
#: descriptors built in Python, then encoded by the launcher) is most of such a call's host cost.
SMALL_MACS = 1 << 22

__all__ = ["can_handle", "can_handle_variable_k", "grouped_gemm", "grouped_gemm_variable_k",
           "kernel_path", "variable_k_kernel_path"]


def _common_reason(a: torch.Tensor, what: str) -> str | None:
    reason = _runtime.device_reason(a)
    if reason:
        return reason
    if a.dtype not in _DTYPES:
        return f"TRITON {what} serves fp16/bf16/fp32, not {a.dtype}"
    if a.shape[0] > _INT32:
        return f"TRITON {what} indexes rows with int32: M_total={a.shape[0]} is too large"
    return None


def can_handle(args: GroupedGemmArgs) -> str | None:
    return _common_reason(args.a, "grouped_gemm")


def can_handle_variable_k(args: GroupedGemmVariableKArgs) -> str | None:
    reason = _common_reason(args.a, "grouped_gemm_variable_k")
    if reason is None and args.out is not None and args.out.dtype not in _DTYPES:
        return f"TRITON grouped_gemm_variable_k accumulates into fp16/bf16/fp32, not {args.out.dtype}"
    return reason


# -- shared helpers -------------------------------------------------------------------------------


def _precision(a: torch.Tensor) -> str:
    return "ieee" if (_runtime.interpreting() or a.dtype != torch.float32) else "tf32x3"


def _upcast(a: torch.Tensor) -> bool:
    """The interpreter's bf16 dot is wrong: multiply in fp32 there (exact for bf16 products)."""
    return _runtime.interpreting() and a.dtype == torch.bfloat16


def _programs(tiles: int, num_sms: int, num_cu: int | None) -> int:
    return max(1, min(num_sms, tiles, num_cu or num_sms))


def _aligned(t: torch.Tensor) -> bool:
    """TMA: unit inner stride, 16-byte aligned outer strides and base address, no empty dim."""
    if t.numel() == 0 or t.stride(-1) != 1 or t.data_ptr() % 16:
        return False
    return all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1])


def _offsets(group_offs: torch.Tensor) -> torch.Tensor:
    return group_offs if group_offs.is_contiguous() else group_offs.contiguous()




# -- forward / dgrad ------------------------------------------------------------------------------


def _nn_block_k(block_k: int, k: int) -> int | None:
    """A K step that divides K (the NN TMA path reads b as ``[G*K, N]``), at least 16."""
    while block_k >= 16:
        if k % block_k == 0:
            return block_k
        block_k //= 2
    return None


def _tma_fwd_ok(args: GroupedGemmArgs, cfg: configs.GroupedConfig) -> bool:
    g, m, n, k = grouped_gemm_dims(args)
    if m == 0 or n == 0 or k == 0 or g == 0 or g * max(n, k) > _INT32:
        return False
    if not (_aligned(args.a) and args.b.is_contiguous() and _aligned(args.b)):
        return False
    return args.trans_b or _nn_block_k(cfg.block_k, k) is not None


def kernel_path(args: GroupedGemmArgs, config: configs.GroupedConfig | None = None) -> str:
    """``"tma"`` or ``"pointer"``: which kernel :func:`grouped_gemm` launches for these arguments
    (the pointer kernel below :data:`SMALL_MACS`, in the interpreter, and where TMA does not apply)."""
    if _runtime.interpreting() or args.a.device.type != "cuda":
        return "pointer"
    g, m, n, k = grouped_gemm_dims(args)
    if m * n * k < SMALL_MACS:
        return "pointer"
    arch, sms = _device_facts(args.a)
    cfg = config or configs.pick_fwd(arch, m, n, k, g, sms, args.a.element_size())
    return "tma" if _tma_arch(arch) and _tma_fwd_ok(args, cfg) else "pointer"


def grouped_gemm(args: GroupedGemmArgs, config: configs.GroupedConfig | None = None,
                 path: str | None = None) -> torch.Tensor:
    """Run the forward kernel. ``config`` overrides the heuristic table and ``path`` ("tma" or
    "pointer") the kernel choice (tests and benchmarks use them; "tma" runs under the interpreter
    too, for tests)."""
    a = args.a
    g, m, n, k = grouped_gemm_dims(args)
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if g == 0 or k == 0:
        return c.zero_()  # every row is outside the groups, or every product is an empty sum
    arch, sms = _device_facts(a)
    cfg = config or configs.pick_fwd(arch, m, n, k, g, sms, a.element_size())
    if path is None:
        path = kernel_path(args, cfg)
    elif path == "tma" and not _tma_fwd_ok(args, cfg):
        raise ValueError("path: these operands cannot use the TMA kernel (alignment, layout or K step)")
    tiles = (-(-m // cfg.block_m) + g) * -(-n // cfg.block_n)  # an upper bound: the lengths are on the device
    programs = _programs(tiles, sms, args.num_cu)
    key = (a.dtype, args.trans_b, programs)
    launch = _launch_fwd_tma if path == "tma" else _launch_fwd_pointer
    _runtime.launch_fitted(launch, cfg, key, args, c, _offsets(args.group_offs), g, m, n, k, programs,
                           shrink=configs.shrink)
    return c


def _block_g(g: int) -> int:

    return max(2, next_power_of_2(g))


def _launch_fwd_pointer(cfg, args, c, offs, g, m, n, k, programs):
    from turbo_triton.grouped_gemm import kernels

    a, b = args.a, args.b
    sbk, sbn = (b.stride(2), b.stride(1)) if args.trans_b else (b.stride(1), b.stride(2))
    fast_kernel(kernels.grouped_gemm_kernel)[(programs,)](
        a, b, c, offs, g, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), sbk, sbn, c.stride(0), c.stride(1),
        UPCAST=_upcast(a), PRECISION=_precision(a),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        BLOCK_G=_block_g(g), NUM_PROGRAMS=programs,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def _launch_fwd_tma(cfg, args, c, offs, g, m, n, k, programs):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.grouped_gemm import kernels

    a, b = args.a, args.b
    bm, bn = cfg.block_m, cfg.block_n
    if args.trans_b:
        bk = cfg.block_k
        b_desc = TensorDescriptor.from_tensor(b.view(g * n, k), [bn, bk])
    else:
        bk = _nn_block_k(cfg.block_k, k)
        b_desc = TensorDescriptor.from_tensor(b.view(g * k, n), [bk, bn])
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    c_tma = _aligned(c)
    subtile = cfg.subtile and c_tma
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // 2 if subtile else bn]) if c_tma else None
    fast_kernel(kernels.grouped_gemm_tma_kernel)[(programs,)](
        a_desc, b_desc, c_desc, c, offs, g, m, n, k, c.stride(0),
        TRANS_B=args.trans_b, C_TMA=c_tma, UPCAST=_upcast(a), PRECISION=_precision(a),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, BLOCK_G=_block_g(g),
        NUM_PROGRAMS=programs, FLATTEN=cfg.flatten, SUBTILE=subtile,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


# -- variable K (wgrad) ---------------------------------------------------------------------------


def _variable_k_dims(args: GroupedGemmVariableKArgs) -> tuple[int, int, int, int]:
    """``(G, M_total, K, N)``."""
    return int(args.group_lens.shape[0]), int(args.a.shape[0]), int(args.a.shape[1]), int(args.b.shape[1])


def _tma_variable_k_ok(args: GroupedGemmVariableKArgs) -> bool:
    g, m, k, n = _variable_k_dims(args)
    return m > 0 and g * max(k, n) <= _INT32 and _aligned(args.a) and _aligned(args.b)


def _c_tma_ok(c: torch.Tensor, trans_c: bool, cfg: configs.GroupedConfig, k: int, n: int) -> bool:
    """The output as one 2-D descriptor: contiguous, aligned, and tiles that never cross from one
    group's matrix into the next."""
    exact = (n % cfg.block_n == 0) if trans_c else (k % cfg.block_m == 0)
    return c.is_contiguous() and _aligned(c) and exact


def variable_k_kernel_path(args: GroupedGemmVariableKArgs) -> str:
    """``"tma"`` or ``"pointer"``: which kernel :func:`grouped_gemm_variable_k` launches (as in
    :func:`kernel_path`)."""
    if _runtime.interpreting() or args.a.device.type != "cuda":
        return "pointer"
    _, m, k, n = _variable_k_dims(args)
    if m * k * n < SMALL_MACS:
        return "pointer"
    arch, _ = _device_facts(args.a)
    return "tma" if _tma_arch(arch) and _tma_variable_k_ok(args) else "pointer"


def grouped_gemm_variable_k(args: GroupedGemmVariableKArgs, config: configs.GroupedConfig | None = None,
                            path: str | None = None) -> torch.Tensor:
    """Run the variable-K kernel (``config`` and ``path`` as in :func:`grouped_gemm`)."""
    a = args.a
    g, m, k, n = _variable_k_dims(args)
    if args.out is not None:
        c = args.out
    else:
        c = torch.empty((g, n, k) if args.trans_c else (g, k, n), dtype=a.dtype, device=a.device)
    if g == 0 or k == 0 or n == 0:
        return c
    if m == 0:
        return c if args.out is not None else c.zero_()  # every group is empty
    arch, sms = _device_facts(a)
    cfg = config or configs.pick_variable_k(arch, k, n, g, sms, a.element_size(), c.element_size())
    if path is None:
        path = variable_k_kernel_path(args)
    elif path == "tma" and not _tma_variable_k_ok(args):
        raise ValueError("path: these operands cannot use the TMA kernel (alignment or layout)")
    tiles = g * -(-k // cfg.block_m) * -(-n // cfg.block_n)
    programs = _programs(tiles, sms, args.num_cu)
    key = (a.dtype, c.dtype, args.trans_c, args.out is not None, programs)
    launch = _launch_variable_k_tma if path == "tma" else _launch_variable_k_pointer
    _runtime.launch_fitted(launch, cfg, key, args, c, _offsets(args.group_offs), g, m, k, n, programs,
                           shrink=configs.shrink)
    return c


def _c_strides(c: torch.Tensor, trans_c: bool) -> tuple[int, int, int]:
    """``(group, K, N)`` strides of the output, whichever its layout."""
    return (c.stride(0), c.stride(2), c.stride(1)) if trans_c else (c.stride(0), c.stride(1), c.stride(2))


def _launch_variable_k_pointer(cfg, args, c, offs, g, m, k, n, programs):
    from turbo_triton.grouped_gemm import kernels

    a, b = args.a, args.b
    fast_kernel(kernels.grouped_gemm_variable_k_kernel)[(programs,)](
        a, b, c, offs, g, m, k, n,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), *_c_strides(c, args.trans_c),
        ACCUMULATE=args.out is not None, UPCAST=_upcast(a), PRECISION=_precision(a),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        NUM_PROGRAMS=programs, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def _launch_variable_k_tma(cfg, args, c, offs, g, m, k, n, programs):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.grouped_gemm import kernels

    a, b = args.a, args.b
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(a, [bk, bm])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    c_tma = _c_tma_ok(c, args.trans_c, cfg, k, n)
    subtile = cfg.subtile and c_tma
    c_desc = None
    if c_tma:
        c_desc = (TensorDescriptor.from_tensor(c.view(g * n, k), [bn, bm // 2 if subtile else bm]) if args.trans_c
                  else TensorDescriptor.from_tensor(c.view(g * k, n), [bm, bn // 2 if subtile else bn]))
    fast_kernel(kernels.grouped_gemm_variable_k_tma_kernel)[(programs,)](
        a_desc, b_desc, c_desc, c, offs, g, m, k, n, *_c_strides(c, args.trans_c),
        TRANS_C=args.trans_c, C_TMA=c_tma, ACCUMULATE=args.out is not None, UPCAST=_upcast(a),
        PRECISION=_precision(a),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, NUM_PROGRAMS=programs,
        SUBTILE=subtile, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
