"""The ``gemm_fp8`` primitive on Triton: capability check, scale addressing and launcher.

Every layout (NN, NT, TN, TT; trans_c; accumulate into ``out``) and every granularity runs without
copying operands or scales: layouts become strides or descriptor block shapes, scale layouts become
scale strides (see ``turbo_triton.gemm_fp8.kernels``). Compiled variants are cached by Triton.

On sm90, TENSORWISE / ROWWISE / BLOCKWISE (128-deep blocks) problems of at least one wave of tiles,
with a fresh output, go to the Gluon kernel (``turbo_triton.gemm_fp8.gluon_sm90``: warp-specialized, its
fp32 promotion overlapped with the tensor cores); :func:`gluon_reason` says when and why not. A fresh
``trans_c`` call (the ops' wgrad) runs there as its :func:`transposed` problem.
``TURBO_TRITON_FP8_GLUON=0`` turns it off; a Gluon kernel that fails to compile or launch is reported
once (a warning) and not tried again in the process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, gemm_fp8_dims
from turbo_core.low_precision import ScalingGranularity
from turbo_triton import _runtime
from turbo_triton.gemm import configs as gemm_configs
from turbo_triton.gemm.launch import _tma_eligible, _tma_ok
from turbo_triton.gemm_fp8 import configs
from turbo_triton.launcher import fast_kernel
from turbo_triton.transpose import transpose_last2

__all__ = ["can_handle", "gemm_fp8", "gluon_reason", "kernel_path", "transposed"]

_GLUON_BROKEN: list[str] = []  # the first error of a Gluon launch (then never tried again in this process)

G = ScalingGranularity
_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_MODES = {G.TENSORWISE: 0, G.ROWWISE: 0, G.BLOCKWISE: 1, G.MX_BLOCKWISE: 2}


def _arch(t: torch.Tensor) -> str:
    return _runtime.device_facts(t)[0]


def can_handle(args: GemmFp8Args) -> str | None:
    reason = _runtime.device_reason(args.a)
    if reason:
        return reason
    arch = _arch(args.a)
    fnuz = args.a.dtype in _FNUZ
    if fnuz and arch not in ("gfx940", "gfx941", "gfx942"):
        return f"FNUZ FP8 ({args.a.dtype}) runs on gfx942 only (Triton has no FNUZ dot on {arch})"
    if arch.startswith("sm") and int(arch[2:]) < 89:
        return f"FP8 tensor cores need sm89 or newer; this GPU is {arch}"
    gran = G(args.granularity)
    if gran == G.BLOCKWISE:
        bs = args.block_size
        smallest = 16 if arch == "interpreter" else 32
        if bs & (bs - 1) or not smallest <= bs <= 256:
            return f"TRITON BLOCKWISE FP8 GEMM needs a power-of-two block size in [{smallest}, 256], got {bs}"
    return None


@dataclass(frozen=True)
class _Scales:
    """Strides of the scales in (row of op(A), K block) and (K block, column of op(B)), and the
    row / column divisors (the block edge for ``bs x bs`` tiles, else 1)."""

    s_am: int
    s_ak: int
    s_bk: int
    s_bn: int
    a_div: int = 1
    b_div: int = 1


def scale_addressing(args: GemmFp8Args) -> _Scales:
    gran = G(args.granularity)
    sa, sb = args.a_scale_inv, args.b_scale_inv
    if gran == G.TENSORWISE:
        return _Scales(0, 0, 0, 0)
    # The stored a is [M, K] ([K, M] when trans_a), b is [K, N] ([N, K] when trans_b): both
    # ROWWISE and BLOCKWISE scales follow the stored operand's dim order.
    a_m, a_k = (1, 0) if args.trans_a else (0, 1)
    b_k, b_n = (1, 0) if args.trans_b else (0, 1)
    if gran == G.ROWWISE:
        return _Scales(sa.stride(a_m), 0, 0, sb.stride(b_n))
    if gran == G.MX_BLOCKWISE:  # NT: a [M, K/32], b [N, K/32]
        return _Scales(sa.stride(0), sa.stride(1), sb.stride(1), sb.stride(0))
    bs = args.block_size
    a_div = bs if blockwise_layout(tuple(args.a.shape), tuple(sa.shape), a_k - 2, bs) == "2d" else 1
    b_div = bs if blockwise_layout(tuple(args.b.shape), tuple(sb.shape), b_k - 2, bs) == "2d" else 1
    return _Scales(sa.stride(a_m), sa.stride(a_k), sb.stride(b_k), sb.stride(b_n), a_div, b_div)


def kernel_path(args: GemmFp8Args) -> str:
    """``"tma"`` or ``"pointer"``: which kernel :func:`gemm_fp8` launches for these arguments,
    with ``"+kmajor"`` when an operand is first copied K-major (see :func:`_k_major`)."""
    if _runtime.interpreting() or args.a.device.type != "cuda":
        return "pointer"
    _, _, k = gemm_fp8_dims(args)
    arch = _arch(args.a)
    flipped = _flipped_for_gluon(args, arch, k)
    if flipped is not None:
        return kernel_path(flipped)
    moved, copied = _as_k_major(args, arch, k)
    path = "tma" if _tma_eligible(arch, k, moved.a, moved.b) else "pointer"
    if gluon_reason(moved, arch, k, scale_addressing(args)) is None:
        path = "gluon"
    return path + "+kmajor" if copied else path


def _as_k_major(args: GemmFp8Args, arch: str, k: int) -> tuple[GemmFp8Args, bool]:
    """The arguments as :func:`_k_major` would leave them, with unwritten operands in place of its
    copies (none made), and whether it copies."""
    copied = _k_major_needed(arch, k) and (args.trans_a or not args.trans_b)
    a = args.a.new_empty(args.a.shape[::-1]) if copied and args.trans_a else args.a
    b = args.b.new_empty(args.b.shape[::-1]) if copied and not args.trans_b else args.b
    return replace(args, a=a, b=b, trans_a=args.trans_a and not copied, trans_b=args.trans_b or copied), copied


def transposed(args: GemmFp8Args) -> GemmFp8Args:
    """The same product as a problem of its own written transposed: ``C^T = op(B)^T @ op(A)^T`` (a and b,
    their scales and their trans flags swapped; ``trans_c`` off). Its ``[N, M]`` result is what a
    ``trans_c`` call returns."""
    return replace(args, a=args.b, a_scale_inv=args.b_scale_inv, b=args.a, b_scale_inv=args.a_scale_inv,
                   trans_a=not args.trans_b, trans_b=not args.trans_a, trans_c=False)


def _flipped_for_gluon(args: GemmFp8Args, arch: str, k: int) -> GemmFp8Args | None:
    """A fresh ``trans_c`` call (the ops' wgrad writes ``dB`` in b's ``[N, K]`` layout so) as its
    :func:`transposed` problem, when the Gluon kernel (which writes ``[M, N]`` only) takes that; else
    ``None``. Not when a's blocks would become 128 x 128 tiles (that mode of the kernel has not run on a
    GPU through this path)."""
    if not args.trans_c or args.out is not None or arch != "sm90":
        return None
    flipped = transposed(args)
    scales = scale_addressing(flipped)
    if scales.a_div != 1 or gluon_reason(_as_k_major(flipped, arch, k)[0], arch, k, scales) is not None:
        return None
    return flipped


_GLUON_A = (torch.float8_e4m3fn, torch.float8_e5m2)
_GLUON_C = (torch.bfloat16, torch.float16, torch.float32)


def gluon_reason(args: GemmFp8Args, arch: str, k: int, scales: _Scales, out: torch.Tensor | None = None) -> str | None:
    """Why the Gluon sm90 kernel does not take these (already K-major) arguments, or ``None``.

    It takes TENSORWISE, ROWWISE and BLOCKWISE (128-deep blocks: 1 x 128 or 128 x 128 for ``a`` and
    for ``b``) with fp32 scales (``scales``: their addressing, from
    :func:`scale_addressing` of the arguments as given), NT operands (``a [M, K]``, ``b [N, K]``) in
    E4M3/E5M2, a fresh row-major bf16/fp16/fp32 output, TMA-compatible strides, and problems of at
    least one wave of its tiles (smaller ones keep the Triton kernel's smaller tiles)."""
    if os.environ.get("TURBO_TRITON_FP8_GLUON", "1").strip().lower() in ("0", "false", "no", "off"):
        return "TURBO_TRITON_FP8_GLUON=0"
    if _GLUON_BROKEN:
        return f"the Gluon kernel failed earlier in this process: {_GLUON_BROKEN[0]}"
    if arch != "sm90" or _runtime.interpreting():
        return f"the Gluon kernel is written for sm90 (wgmma), this is {arch}"
    gran = G(args.granularity)
    if gran == G.BLOCKWISE:
        if args.block_size != 128 or scales.b_div not in (1, 128) or (scales.b_div == 1 and scales.s_bn != 1):
            return ("the Gluon kernel's BLOCKWISE takes 128-deep blocks (for b 128 x 128 tiles, or 1 x 128 blocks "
                    "with unit-stride columns)")
    elif gran not in (G.TENSORWISE, G.ROWWISE):
        return f"{gran.name} is not implemented in the Gluon kernel"
    if configs.fast_accumulate():
        return "TURBO_TRITON_FP8_FAST_ACCUM=1 runs the unpromoted Triton kernel"
    if args.out is not None or args.trans_c or args.trans_a or not args.trans_b:
        return "the Gluon kernel writes a fresh [M, N] output from K-major a [M, K] and b [N, K]"
    if args.a.dtype not in _GLUON_A or args.b.dtype not in _GLUON_A or args.result_dtype not in _GLUON_C:
        return f"dtypes {args.a.dtype}/{args.b.dtype} -> {args.result_dtype} are not the Gluon kernel's"
    if args.a_scale_inv.dtype != torch.float32 or args.b_scale_inv.dtype != torch.float32:
        return "the Gluon kernel reads fp32 scales"
    if k % 16 or not _tma_ok(args.a, args.b) or (out is not None and not _tma_ok(out)):
        return "TMA needs 16-byte aligned rows and bases"
    m, n = args.a.shape[0], args.b.shape[0]
    bm, bn = 128, _gluon_block_n(gran, args.result_dtype)
    tiles = -(-m // bm) * -(-n // bn)
    if tiles < _runtime.num_sms(args.a.device.index or 0):
        return f"{tiles} tiles of {bm} x {bn} are less than one wave"
    return None


def _gluon_block_n(gran: G, out_dtype: torch.dtype) -> int:
    """256-wide tiles, but 128 for BLOCKWISE (the per-step scales spill registers at 256) and for fp32
    outputs (their staging leaves room for 5 operand stages at 128, 2 at 256)."""
    return 128 if gran == G.BLOCKWISE or out_dtype == torch.float32 else 256


def _launch_gluon(args: GemmFp8Args, c: torch.Tensor, scales: _Scales, sms: int) -> bool:
    """Run the Gluon kernel; ``False`` (and a warning, once) if it cannot compile or launch here."""
    try:
        from turbo_triton.gemm_fp8 import gluon_sm90

        gran = G(args.granularity)
        gluon_sm90.gemm_fp8_nt(args.a, args.b, args.a_scale_inv, args.b_scale_inv, c, gran.name, sms,
                               block_n=_gluon_block_n(gran, c.dtype), group_m=16, s_am=scales.s_am,
                               s_ak=scales.s_ak, s_bk=scales.s_bk, s_bn=scales.s_bn, a_row_div=scales.a_div,
                               b_col_div=scales.b_div)
        return True
    except Exception as exc:  # an unsupported Triton version, a driver without the features: keep working
        return _runtime.gluon_failed(_GLUON_BROKEN, "the Gluon FP8 GEMM", exc)


def _k_major_needed(arch: str, k: int) -> bool:
    return arch.startswith("sm") and int(arch[2:]) >= 90 and k % 16 == 0


def _k_major(args: GemmFp8Args, arch: str, k: int) -> GemmFp8Args:
    """Hopper's FP8 tensor cores read both operands K-major (the transposed-operand forms are
    16-bit only); a Triton dot on a non-K-major FP8 tile takes a path an order of magnitude slower
    (the ``gemm-fp8`` suite times the NN/TN layouts). So on sm90 an operand stored the other way
    (``trans_a``, or not ``trans_b``) is copied K-major first with a tiled transpose
    (:func:`turbo_triton.transpose.transpose_last2`): one pass over it. The ops avoid it where they
    can by quantizing straight into the K-major layout."""
    if not _k_major_needed(arch, k):
        return args
    if args.trans_a:
        args = replace(args, a=transpose_last2(args.a), trans_a=False)
    if not args.trans_b:
        args = replace(args, b=transpose_last2(args.b), trans_b=True)
    return args


def _scale_arg(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype not in (torch.float32, torch.uint8) else t


def gemm_fp8(args: GemmFp8Args, config: gemm_configs.GemmConfig | None = None) -> torch.Tensor:
    """Run the kernel; ``config`` overrides the heuristic table (tuning and benchmarks use it).
    BLOCKWISE forces ``block_k`` to the block size."""
    a, b = args.a, args.b
    m, n, k = gemm_fp8_dims(args)
    if config is None and m and n and k and args.trans_c and args.out is None:
        flipped = _flipped_for_gluon(args, _runtime.device_facts(a)[0], k)
        if flipped is not None:
            return gemm_fp8(flipped)  # the same [N, M] result, from the Gluon kernel
    if args.out is not None:
        c = args.out
    else:
        c = torch.empty((n, m) if args.trans_c else (m, n), dtype=args.result_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        if args.out is None:
            c.zero_()
        return c
    gran = G(args.granularity)
    arch, sms = _runtime.device_facts(a)
    scales = scale_addressing(args)  # logical (row, K block) addressing: unchanged by the copies below
    args = _k_major(args, arch, k)
    a, b = args.a, args.b
    if config is None and gluon_reason(args, arch, k, scales, c) is None and _launch_gluon(args, c, scales, sms):
        return c
    tma = arch != "interpreter" and _tma_eligible(arch, k, a, b)
    tma_store = tma and _tma_ok(c)
    block_k = args.block_size if gran == G.BLOCKWISE else None
    cfg = config or configs.pick(arch, m, n, k, sms, c.element_size(), block_k, tma_store, gran == G.BLOCKWISE)
    if block_k is not None and cfg.block_k != block_k:
        raise ValueError(f"config: BLOCKWISE needs block_k == block_size ({block_k}), got {cfg.block_k}")
    launch = _launch_tma if tma else _launch_pointer
    key = (args.a.dtype, args.b.dtype, c.dtype, args.trans_a, args.trans_b, args.trans_c, args.out is not None,
           gran, tma_store)
    _runtime.launch_fitted(launch, cfg, key, args, c, m, n, k, sms, gran, scales, tma_store,
                           shrink=gemm_configs.shrink)
    return c


def _common(cfg, args, m, n, sms, gran, scales):
    import triton.language as tl

    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    interp = _runtime.interpreting()
    return dict(
        s_am=scales.s_am, s_ak=scales.s_ak, s_bk=scales.s_bk, s_bn=scales.s_bn,
        SCALING=_MODES[gran], A_ROW_DIV=scales.a_div, B_COL_DIV=scales.b_div,
        ACCUMULATE=args.out is not None, DEQ=tl.float32 if interp else tl.bfloat16,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        NUM_PROGRAMS=max(1, min(sms, tiles)), num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def _launch_tma(cfg, args, c, m, n, k, sms, gran, scales, tma_store):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.gemm_fp8 import kernels

    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    a_desc = TensorDescriptor.from_tensor(args.a, [bk, bm] if args.trans_a else [bm, bk])
    b_desc = TensorDescriptor.from_tensor(args.b, [bn, bk] if args.trans_b else [bk, bn])
    subtile = tma_store and cfg.subtile and not args.trans_c
    if tma_store:
        c_arg = TensorDescriptor.from_tensor(c, [bn, bm] if args.trans_c else [bm, bn // 2 if subtile else bn])
    else:
        c_arg = c
    scm, scn = (c.stride(1), c.stride(0)) if args.trans_c else (c.stride(0), c.stride(1))
    common = _common(cfg, args, m, n, sms, gran, scales)
    fast_kernel(kernels.gemm_fp8_tma_persistent_kernel)[(common["NUM_PROGRAMS"],)](
        a_desc, b_desc, c_arg, _scale_arg(args.a_scale_inv), _scale_arg(args.b_scale_inv), m, n, k, scm, scn,
        TRANS_A=args.trans_a, TRANS_B=args.trans_b, TRANS_C=args.trans_c, C_DESC=tma_store,
        FLATTEN=cfg.flatten, SUBTILE=subtile, WARP_SPECIALIZE=cfg.warp_specialize,
        IMPRECISE_ACC=cfg.imprecise_acc, **common,
    )


def _launch_pointer(cfg, args, c, m, n, k, sms, gran, scales, tma_store):
    from turbo_triton.gemm_fp8 import kernels

    a, b = args.a, args.b
    sam, sak = (a.stride(1), a.stride(0)) if args.trans_a else (a.stride(0), a.stride(1))
    sbk, sbn = (b.stride(1), b.stride(0)) if args.trans_b else (b.stride(0), b.stride(1))
    scm, scn = (c.stride(1), c.stride(0)) if args.trans_c else (c.stride(0), c.stride(1))
    common = _common(cfg, args, m, n, sms, gran, scales)
    fast_kernel(kernels.gemm_fp8_persistent_kernel)[(common["NUM_PROGRAMS"],)](
        a, b, c, _scale_arg(args.a_scale_inv), _scale_arg(args.b_scale_inv), m, n, k,
        sam, sak, sbk, sbn, scm, scn, UPCAST=_runtime.interpreting(),
        IMPRECISE_ACC=None if _runtime.interpreting() else cfg.imprecise_acc, **common,
    )
