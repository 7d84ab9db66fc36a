"""The ``grouped_gemm_fp8`` and ``grouped_gemm_fp8_variable_k`` primitives on Triton: capability checks,
scale addressing and launchers (TENSORWISE, ROWWISE and BLOCKWISE; E4M3, E5M2 and HYBRID pairs).

No host sync, as in the bf16 grouped GEMM (``turbo_triton.grouped_gemm.launch``, whose helpers are
reused): the group offsets stay on the device and the grid is sized from host-known shapes, so a call
can be captured in a CUDA graph once its kernels are compiled. Operand and scale layouts become
strides or descriptor block shapes (the K-major copies aside, below). ``num_cu`` caps the program count.

Kernel paths: ``"tma"`` on sm90+ (Triton with host tensor descriptors) when the FP8 operands are
16-byte aligned (K, and N for the wgrad, multiples of 16) and, for the NN forward (b ``[G, K, N]``), a
K step divides K; ``"pointer"`` otherwise (AMD, other NVIDIA GPUs, the interpreter). On NVIDIA the
operands the FP8 MMA would read M-major are first copied K-major (``+kmajor``: b of the NN forward,
both operands of the wgrad); those copies are the only data the launchers write besides the output.

``"gluon"`` (sm90, the default there; ``TURBO_TRITON_GG8_GLUON=0`` turns it off): the forward on the
warp-specialized Gluon kernel (``turbo_triton.grouped_gemm_fp8.gluon_sm90``), and ``"gluon+kmajor"`` the
BLOCKWISE wgrad on ``gluon_variable_k_sm90``; :func:`gluon_reason` and :func:`gluon_variable_k_reason`
say when and why not. A Gluon kernel that fails to compile or launch is reported once (a warning) and
neither is tried again in the process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from turbo_core.dispatch.specs.gemm_fp8 import blockwise_layout
from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
    grouped_lowp_dims,
)
from turbo_core.low_precision import ScalingGranularity, as_granularity
from turbo_triton import _runtime
from turbo_triton._runtime import device_facts as _device_facts
from turbo_triton._runtime import tma_arch as _tma_arch
from turbo_triton.gemm_fp8.configs import fast_accumulate
from turbo_triton.gemm_fp8.launch import _gluon_block_n
from turbo_triton.grouped_gemm.launch import (
    _INT32,
    _aligned,
    _block_g,
    _c_strides,
    _c_tma_ok,
    _offsets,
    _programs,
)
from turbo_triton.grouped_gemm_fp8 import configs
from turbo_triton.launcher import fast_kernel
from turbo_triton.transpose import transpose_last2

__all__ = ["can_handle", "can_handle_variable_k", "gluon_reason", "gluon_variable_k_reason", "grouped_gemm_fp8",
           "grouped_gemm_fp8_variable_k", "kernel_path", "variable_k_kernel_path"]

_GLUON_BROKEN: list[str] = []  # the first error of a Gluon launch (then never tried again in this process)
GLUON_ENV = "TURBO_TRITON_GG8_GLUON"

G = ScalingGranularity
_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2, *_FNUZ)
#: Where Triton has FNUZ FP8 types: CDNA3 (the interpreter computes with them too).
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942", "interpreter")


def _arch(a: torch.Tensor) -> str:
    return _device_facts(a)[0]


def _common_reason(args, what: str) -> str | None:
    a, b = args.a, args.b
    reason = _runtime.device_reason(a)
    if reason:
        return reason
    gran = as_granularity(args.granularity)
    if gran == G.MX_BLOCKWISE:
        return (f"TRITON {what} does not implement MX_BLOCKWISE (E8M0 1x32 blocks: no MX instructions on "
                "Hopper/gfx942 and no emulation written for the grouped layouts yet); it serves TENSORWISE, "
                "ROWWISE and BLOCKWISE")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in _FP8:
            return f"TRITON {what} multiplies FP8 operands; {name} is {t.dtype}"
    arch = _arch(a)
    fnuz = next((t.dtype for t in (a, b) if t.dtype in _FNUZ), None)
    if fnuz is not None and arch not in _FNUZ_ARCHS:
        return f"{fnuz} needs an AMD gfx942 GPU: Triton has no FNUZ FP8 types on {arch}"
    if arch.startswith("sm") and arch[2:].isdigit() and int(arch[2:]) < 89:
        return f"TRITON {what} needs FP8 tensor cores (sm89 or newer); this GPU is {arch}"
    if gran == G.BLOCKWISE:
        step = configs.min_block_k(arch)
        if args.block_size % step:
            return (f"TRITON {what} BLOCKWISE needs a block_size that is a multiple of {step} (a K step of "
                    f"the FP8 dot must lie in one block), got {args.block_size}")
    if a.shape[0] > _INT32:
        return f"TRITON {what} indexes rows with int32: {a.shape[0]} rows are too many"
    return None


def can_handle(args: GroupedGemmFp8Args) -> str | None:
    return _common_reason(args, "grouped_gemm_fp8")


def can_handle_variable_k(args: GroupedGemmFp8VariableKArgs) -> str | None:
    return _common_reason(args, "grouped_gemm_fp8_variable_k")


# -- shared helpers -------------------------------------------------------------------------------


def _block_size(args) -> int | None:
    return args.block_size if as_granularity(args.granularity) == G.BLOCKWISE else None


def _upcast(args, arch: str, upcast: bool | None) -> int:
    """The kernels' ``UPCAST``: multiply in fp16 for HYBRID pairs where Triton has no mixed FP8 dot
    (``upcast`` overrides), from bytes decoded in the kernel under the interpreter."""
    from turbo_triton.grouped_gemm_fp8 import kernels

    if upcast is not None:
        return kernels.FP16.value if upcast else kernels.NATIVE.value
    if _runtime.interpreting():
        return kernels.DECODED.value
    return kernels.FP16.value if args.a.dtype != args.b.dtype and not configs.hybrid_native(arch) else \
        kernels.NATIVE.value


def _imprecise(cfg: configs.Fp8GroupedConfig, block_k: int, upcast: bool) -> int | None:
    return block_k if cfg.precise_acc and not upcast else None


def _check_block_k(cfg: configs.Fp8GroupedConfig, bs: int | None) -> None:
    if bs is not None and bs % cfg.block_k:
        raise ValueError(f"config: BLOCKWISE needs a block_k that divides block_size ({bs}), got {cfg.block_k}")


# -- forward / dgrad ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FwdScales:
    """a's scale of (row m, K block kb) at ``m * s_am + kb * s_ak``; b's of (group g, K block kb,
    column n) at ``g * s_bg + kb * s_bk + (n // b_div) * s_bn``."""

    s_am: int = 0
    s_ak: int = 0
    s_bg: int = 0
    s_bk: int = 0
    s_bn: int = 0
    b_div: int = 1


def _fwd_scales(args: GroupedGemmFp8Args) -> _FwdScales:
    gran = as_granularity(args.granularity)
    sa, sb = args.a_scale_inv, args.b_scale_inv
    if gran == G.TENSORWISE:
        return _FwdScales()
    if gran == G.ROWWISE:  # a [M, 1]; b [G, N, 1] (trans_b) or [G, 1, N]
        return _FwdScales(s_am=sa.stride(0), s_bg=sb.stride(0), s_bn=sb.stride(1) if args.trans_b else sb.stride(2))
    # BLOCKWISE: a [cdiv(K, bs), M] (transposed); b 1-D blocks [G, N, kb] / [G, kb, N] or bs x bs tiles
    # [G, cdiv(N, bs), kb] / [G, kb, cdiv(N, bs)]: the same strides, the tiles with b_div = bs
    bs = args.block_size
    s_bk, s_bn = (sb.stride(2), sb.stride(1)) if args.trans_b else (sb.stride(1), sb.stride(2))
    two_d = blockwise_layout(tuple(args.b.shape), tuple(sb.shape), -1 if args.trans_b else -2, bs) == "2d"
    return _FwdScales(sa.stride(1), sa.stride(0), sb.stride(0), s_bk, s_bn, bs if two_d else 1)


def _nn_block_k(block_k: int, k: int, arch: str, blockwise: bool) -> int | None:
    """A K step that divides K (the NN TMA path reads b as ``[G*K, N]``); BLOCKWISE keeps its own."""
    if blockwise:
        return block_k if k % block_k == 0 else None
    while block_k >= configs.min_block_k(arch):
        if k % block_k == 0:
            return block_k
        block_k //= 2
    return None


def _tma_fwd_ok(args: GroupedGemmFp8Args, cfg: configs.Fp8GroupedConfig, arch: str) -> bool:
    g, m, n, k = grouped_lowp_dims(args)
    if m == 0 or n == 0 or k == 0 or g == 0 or g * max(n, k) > _INT32:
        return False
    if not (_aligned(args.a) and args.b.is_contiguous() and _aligned(args.b)):
        return False
    return args.trans_b or _nn_block_k(cfg.block_k, k, arch, _block_size(args) is not None) is not None


def _fwd_config(args: GroupedGemmFp8Args, arch: str, sms: int) -> configs.Fp8GroupedConfig:
    g, m, n, k = grouped_lowp_dims(args)
    return configs.pick_fwd(arch, m, n, k, g, sms, args.out_dtype.itemsize, _block_size(args))


def _k_major_b(args: GroupedGemmFp8Args, arch: str) -> GroupedGemmFp8Args:
    """Hopper's FP8 MMA reads both operands K-major: a Triton dot on a ``[K, N]`` FP8 tile takes a
    much slower path (the ``grouped-gemm-fp8`` suite times the dgrad). So on sm90 a b stored
    ``[G, K, N]`` is copied to ``[G, N, K]`` first (one pass over the weights, a tiled transpose:
    :func:`turbo_triton.transpose.transpose_last2`) and its scales are read through a transposed
    view (the kernels address scales by strides)."""
    if args.trans_b or not _tma_arch(arch):
        return args
    sb = args.b_scale_inv
    return replace(args, b=transpose_last2(args.b), trans_b=True,
                   b_scale_inv=sb.transpose(1, 2) if sb.dim() == 3 else sb)


def _as_k_major_b(args: GroupedGemmFp8Args) -> GroupedGemmFp8Args:
    """The arguments as :func:`_k_major_b` leaves them, with an unwritten ``[G, N, K]`` b (no copy made)."""
    sb = args.b_scale_inv
    return replace(args, b=args.b.new_empty((args.b.shape[0], args.b.shape[2], args.b.shape[1])), trans_b=True,
                   b_scale_inv=sb.transpose(1, 2) if sb.dim() == 3 else sb)


def _tuned(cfg: configs.Fp8GroupedConfig, arch: str) -> configs.Fp8GroupedConfig:
    """The table's config adjusted for the call: on sm90 the FP8 sum is promoted to fp32 once per K
    step (the accuracy of cuBLAS; ``TURBO_TRITON_FP8_FAST_ACCUM=1`` turns it off, as for the dense
    kernel)."""
    if arch.startswith("sm"):
        cfg = replace(cfg, precise_acc=not fast_accumulate())
    return cfg


def kernel_path(args: GroupedGemmFp8Args, config: configs.Fp8GroupedConfig | None = None) -> str:
    """``"gluon"``, ``"tma"`` or ``"pointer"``: which kernel :func:`grouped_gemm_fp8` launches for these
    arguments, with ``"+kmajor"`` when b is first copied K-major (:func:`_k_major_b`)."""
    if _runtime.interpreting() or args.a.device.type != "cuda":
        return "pointer"
    arch, sms = _device_facts(args.a)
    copied = not args.trans_b and _tma_arch(arch)
    if copied:
        args = _as_k_major_b(args)
    cfg = config or _fwd_config(args, arch, sms)
    path = "tma" if _tma_arch(arch) and _tma_fwd_ok(args, cfg, arch) else "pointer"
    if config is None and gluon_reason(args, arch, sms) is None:
        path = "gluon"
    return path + "+kmajor" if copied else path


_GLUON_AB = (torch.float8_e4m3fn, torch.float8_e5m2)
_GLUON_C = (torch.bfloat16, torch.float16, torch.float32)


def _gluon_gate(arch: str) -> str | None:
    """Why neither Gluon kernel runs here at all (turned off, an earlier failure, the GPU), or ``None``."""
    if os.environ.get(GLUON_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{GLUON_ENV}=0 turns the Gluon grouped kernels off"
    if _GLUON_BROKEN:
        return f"the Gluon kernel failed earlier in this process: {_GLUON_BROKEN[0]}"
    if arch != "sm90" or _runtime.interpreting():
        return f"the Gluon kernels are written for sm90 (wgmma), this is {arch}"
    return None


def gluon_reason(args: GroupedGemmFp8Args, arch: str, sms: int, out: torch.Tensor | None = None) -> str | None:
    """Why the Gluon sm90 kernel does not take these forward arguments (b already K-major, as
    :func:`_k_major_b` leaves it), or ``None``.

    It takes TENSORWISE, ROWWISE and BLOCKWISE (1 x 128 blocks for a, 128 x 128 tiles for b) with fp32
    scales, E4M3/E5M2 operands in any pairing, ``a [M, K]`` and a contiguous ``b [G, N, K]`` with
    16-byte aligned rows, bf16/fp16/fp32 results, and problems of at least one wave of its tiles
    (counted as if the rows were one group; smaller ones keep the Triton kernel's smaller tiles)."""
    gate = _gluon_gate(arch)
    if gate:
        return gate
    gran = as_granularity(args.granularity)
    if gran == G.BLOCKWISE:
        if args.block_size != 128 or _fwd_scales(args).b_div != 128:
            return "the Gluon kernel's BLOCKWISE takes 128-deep blocks with 128 x 128 tiles for b"
    elif gran not in (G.TENSORWISE, G.ROWWISE):
        return f"{gran.name} is not implemented in the Gluon kernel"
    if fast_accumulate():
        return "TURBO_TRITON_FP8_FAST_ACCUM=1 runs the unpromoted Triton kernel"
    if not args.trans_b:
        return "the Gluon kernel reads b K-major ([G, N, K])"
    if args.a.dtype not in _GLUON_AB or args.b.dtype not in _GLUON_AB or args.out_dtype not in _GLUON_C:
        return f"dtypes {args.a.dtype}/{args.b.dtype} -> {args.out_dtype} are not the Gluon kernel's"
    if args.a_scale_inv.dtype != torch.float32 or args.b_scale_inv.dtype != torch.float32:
        return "the Gluon kernel reads fp32 scales"
    g, m, n, k = grouped_lowp_dims(args)
    if k % 16 or (n * args.out_dtype.itemsize) % 16 or not (
            _aligned(args.a) and args.b.is_contiguous() and _aligned(args.b)) or (
            out is not None and not _aligned(out)):
        return "TMA needs 16-byte aligned rows and bases (K a multiple of 16, rows of the result too)"
    if g * n > _INT32:
        return f"the Gluon kernel indexes b's rows with int32: {g} x {n} rows are too many"
    wave = min(sms, args.num_cu or sms)
    bn = _block_n(gran, args.out_dtype, m, n, wave)
    tiles = -(-m // 128) * -(-n // bn)
    if tiles < wave:
        return f"{tiles} tiles of 128 x {bn} are less than one wave"
    return None


def _block_n(gran: G, out_dtype: torch.dtype, m: int, n: int, wave: int) -> int:
    """The Gluon kernel's tile width: the dense kernel's (256; 128 for BLOCKWISE and fp32 results), and
    128 where 256-wide tiles of the ``m`` rows (counted as one group) would not fill one ``wave``."""
    bn = _gluon_block_n(gran, out_dtype)
    if bn == 256 and -(-m // 128) * -(-n // 256) < wave:
        return 128
    return bn


def _launch_gluon(args: GroupedGemmFp8Args, c: torch.Tensor, g: int, m: int, n: int, sms: int) -> bool:
    """Run the Gluon kernel; ``False`` (and a warning, once) if it cannot compile or launch here."""
    try:
        from turbo_triton.grouped_gemm_fp8 import gluon_sm90

        gran = as_granularity(args.granularity)
        bn = _block_n(gran, c.dtype, m, n, min(sms, args.num_cu or sms))
        s = _fwd_scales(args)
        programs = _programs((-(-m // 128) + g) * -(-n // bn), sms, args.num_cu)
        gluon_sm90.grouped_gemm_fp8_nt(args.a, args.b, args.a_scale_inv, args.b_scale_inv, _offsets(args.group_offs),
                                       c, gran.name, programs, block_n=bn, s_am=s.s_am, s_ak=s.s_ak, s_bg=s.s_bg,
                                       s_bk=s.s_bk, s_bn=s.s_bn)
        return True
    except Exception as exc:  # an unsupported Triton version, a driver without the features: keep working
        return _runtime.gluon_failed(_GLUON_BROKEN, "a Gluon grouped FP8 GEMM", exc)


def grouped_gemm_fp8(args: GroupedGemmFp8Args, config: configs.Fp8GroupedConfig | None = None,
                     path: str | None = None, upcast: bool | None = None) -> torch.Tensor:
    """Run the forward kernel: ``out[rows of g] = dequant(A_g) @ dequant(op(B[g]))``, ``[M_total, N]``
    in ``out_dtype``, rows past ``group_offs[-1]`` zero. ``config`` overrides the heuristic table,
    ``path`` ("tma" or "pointer") the kernel choice ("tma" runs under the interpreter too, for tests)
    and ``upcast`` whether the FP8 tiles are converted to fp16 before the dot (default: only HYBRID
    pairs on a GPU without a mixed FP8 dot); with any of the three given, the Gluon kernel is not used."""
    a = args.a
    g, m, n, k = grouped_lowp_dims(args)
    c = torch.empty((m, n), dtype=args.out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if g == 0 or k == 0:
        return c.zero_()  # every row is outside the groups, or every product is an empty sum
    arch, sms = _device_facts(a)
    args = _k_major_b(args, arch)
    if (config is None and path is None and upcast is None and gluon_reason(args, arch, sms, c) is None
            and _launch_gluon(args, c, g, m, n, sms)):
        return c
    cfg = config or _tuned(_fwd_config(args, arch, sms), arch)
    _check_block_k(cfg, _block_size(args))
    if path is None:
        path = kernel_path(args, cfg)
    elif path == "tma" and not _tma_fwd_ok(args, cfg, arch):
        raise ValueError("path: these operands cannot use the TMA kernel (alignment, layout or K step)")
    tiles = (-(-m // cfg.block_m) + g) * -(-n // cfg.block_n)  # an upper bound: the lengths are on the device
    programs = _programs(tiles, sms, args.num_cu)
    up = _upcast(args, arch, upcast)
    key = (a.dtype, args.b.dtype, c.dtype, args.trans_b, str(args.granularity), up, programs)
    launch = _launch_fp8_fwd_tma if path == "tma" else _launch_fp8_fwd_pointer
    _runtime.launch_fitted(launch, cfg, key, args, c, _offsets(args.group_offs), g, m, n, k, programs, arch, up,
                           shrink=configs.shrink)
    return c


def _fwd_constexprs(args, cfg, block_k: int, up: bool) -> dict:
    bs = _block_size(args)
    return dict(BLOCKWISE=bs is not None, BS=bs or 1, UPCAST=up, IMPRECISE=_imprecise(cfg, block_k, up),
                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_k, GROUP_M=cfg.group_m,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _launch_fp8_fwd_pointer(cfg, args, c, offs, g, m, n, k, programs, arch, up):
    from turbo_triton.grouped_gemm_fp8 import kernels

    a, b = args.a, args.b
    s = _fwd_scales(args)
    sbk, sbn = (b.stride(2), b.stride(1)) if args.trans_b else (b.stride(1), b.stride(2))
    fast_kernel(kernels.grouped_gemm_fp8_kernel)[(programs,)](
        a, b, c, args.a_scale_inv, args.b_scale_inv, offs, g, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), sbk, sbn, c.stride(0), c.stride(1),
        s.s_am, s.s_ak, s.s_bg, s.s_bk, s.s_bn, B_DIV=s.b_div,
        BLOCK_G=_block_g(g), NUM_PROGRAMS=programs, **_fwd_constexprs(args, cfg, cfg.block_k, up),
    )


def _launch_fp8_fwd_tma(cfg, args, c, offs, g, m, n, k, programs, arch, up):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.grouped_gemm_fp8 import kernels

    a, b = args.a, args.b
    bm, bn = cfg.block_m, cfg.block_n
    if args.trans_b:
        bk = cfg.block_k
        b_desc = TensorDescriptor.from_tensor(b.view(g * n, k), [bn, bk])
    else:
        bk = _nn_block_k(cfg.block_k, k, arch, _block_size(args) is not None)
        b_desc = TensorDescriptor.from_tensor(b.view(g * k, n), [bk, bn])
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    c_tma = _aligned(c)
    subtile = cfg.subtile and c_tma
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // 2 if subtile else bn]) if c_tma else None
    s = _fwd_scales(args)
    fast_kernel(kernels.grouped_gemm_fp8_tma_kernel)[(programs,)](
        a_desc, b_desc, c_desc, c, args.a_scale_inv, args.b_scale_inv, offs, g, m, n, k,
        c.stride(0), s.s_am, s.s_ak, s.s_bg, s.s_bk, s.s_bn,
        TRANS_B=args.trans_b, C_TMA=c_tma, B_DIV=s.b_div, BLOCK_G=_block_g(g), NUM_PROGRAMS=programs,
        FLATTEN=cfg.flatten, SUBTILE=subtile, DEFER_SCALE=cfg.defer_scale and _block_size(args) is not None,
        **_fwd_constexprs(args, cfg, bk, up),
    )


# -- variable K (wgrad) ---------------------------------------------------------------------------


def _variable_k_dims(args: GroupedGemmFp8VariableKArgs) -> tuple[int, int, int, int]:
    """``(G, M_total, K, N)``."""
    return int(args.group_lens.shape[0]), int(args.a.shape[0]), int(args.a.shape[1]), int(args.b.shape[1])


def _variable_k_scales(args: GroupedGemmFp8VariableKArgs) -> tuple[int, int, int, int]:
    """``(s_ar, s_ak, s_br, s_bn)``: a's scale of (row block rb, column k) at ``rb * s_ar + k * s_ak``,
    b's of (rb, column n) at ``rb * s_br + n * s_bn`` (ROWWISE: ``[1, K]`` / ``[1, N]``; BLOCKWISE:
    ``[cdiv(M, bs), K]`` / ``[cdiv(M, bs), N]``; TENSORWISE: all zero)."""
    gran = as_granularity(args.granularity)
    sa, sb = args.a_scale_inv, args.b_scale_inv
    if gran == G.TENSORWISE:
        return 0, 0, 0, 0
    if gran == G.ROWWISE:
        return 0, sa.stride(1), 0, sb.stride(1)
    return sa.stride(0), sa.stride(1), sb.stride(0), sb.stride(1)


def _tma_variable_k_ok(args: GroupedGemmFp8VariableKArgs) -> bool:
    g, m, k, n = _variable_k_dims(args)
    return m > 0 and g * max(k, n) <= _INT32 and _aligned(args.a) and _aligned(args.b)


def variable_k_kernel_path(args: GroupedGemmFp8VariableKArgs) -> str:
    """``"gluon+kmajor"``, ``"tma+kmajor"``, ``"tma"`` or ``"pointer"``: which kernel
    :func:`grouped_gemm_fp8_variable_k` launches (``"gluon+kmajor"``: see :func:`gluon_variable_k_reason`).
    ``"tma+kmajor"`` (sm90+): both operands are first copied K-major (the tokens along the contiguous
    dim: :func:`turbo_triton.transpose.transpose_last2`, rows padded to 16 bytes), since Hopper's FP8 MMA
    reads its operands K-major and a Triton dot on M-major FP8 tiles takes a much slower path. The
    copies cost one pass over each operand."""
    if _runtime.interpreting() or args.a.device.type != "cuda":
        return "pointer"
    arch, sms = _device_facts(args.a)
    if not (_tma_arch(arch) and _tma_variable_k_ok(args)):
        return "pointer"
    if gluon_variable_k_reason(args, arch, sms) is None:
        return "gluon+kmajor"
    return "tma+kmajor" if arch.startswith("sm") else "tma"


def gluon_variable_k_reason(args: GroupedGemmFp8VariableKArgs, arch: str, sms: int) -> str | None:
    """Why the Gluon sm90 wgrad kernel (``gluon_variable_k_sm90``) does not take these arguments, or ``None``.

    It takes BLOCKWISE with 128-row blocks (``[cdiv(M, 128), K]`` / ``[cdiv(M, 128), N]`` fp32 scales,
    unit column stride; the group offsets 128-aligned, as the spec requires for BLOCKWISE), E4M3/E5M2
    operands, a result whose rows (``K``, or ``N`` with ``trans_c``) are a multiple of 128, written or
    accumulated into ``out``, 16-byte aligned rows, and at least one wave of its 128 x 128 tiles."""
    gate = _gluon_gate(arch)
    if gate:
        return gate
    if as_granularity(args.granularity) != G.BLOCKWISE or args.block_size != 128:
        return ("the Gluon wgrad takes BLOCKWISE with 128-row blocks only (TENSORWISE / ROWWISE groups may start "
                "on any row, which its whole-step loads cannot mask)")
    if fast_accumulate():
        return "TURBO_TRITON_FP8_FAST_ACCUM=1 runs the unpromoted Triton kernel"
    out_dtype = args.out.dtype if args.out is not None else args.out_dtype
    if args.a.dtype not in _GLUON_AB or args.b.dtype not in _GLUON_AB or out_dtype not in _GLUON_C:
        return f"dtypes {args.a.dtype}/{args.b.dtype} -> {out_dtype} are not the Gluon kernel's"
    sa, sb = args.a_scale_inv, args.b_scale_inv
    if sa.dtype != torch.float32 or sb.dtype != torch.float32 or sa.dim() != 2 or sb.dim() != 2 or (
            sa.stride(1) != 1 or sb.stride(1) != 1):
        return "the Gluon wgrad reads 2-D fp32 block scales with unit column stride"
    g, m, k, n = _variable_k_dims(args)
    rows, cols = (n, k) if args.trans_c else (k, n)
    if rows % 128:
        return f"the Gluon wgrad writes whole 128-row tiles per group: the result's {rows} rows are not a multiple"
    if args.out is not None and not _aligned(args.out):
        return "TMA needs 16-byte aligned rows of out"
    if args.out is None and (cols * args.out_dtype.itemsize) % 16:
        return "TMA needs 16-byte aligned rows of the result"
    tiles = g * (rows // 128) * -(-cols // 128)
    if tiles < min(sms, args.num_cu or sms):
        return f"{tiles} tiles of 128 x 128 are less than one wave"
    return None


def _launch_gluon_variable_k(args: GroupedGemmFp8VariableKArgs, c: torch.Tensor, sms: int) -> bool:
    """Run the Gluon wgrad on K-major copies of both operands (``C[g]^T = B_g^T A_g`` with ``trans_c``:
    the operands' roles swap); ``False`` (and a warning, once) if it cannot compile or launch here."""
    try:
        from turbo_triton.grouped_gemm_fp8 import gluon_variable_k_sm90

        g, m, k, n = _variable_k_dims(args)
        a_t = transpose_last2(args.a, row_align=16)
        b_t = transpose_last2(args.b, row_align=16)
        x_t, y_t, sx, sy = (b_t, a_t, args.b_scale_inv, args.a_scale_inv) if args.trans_c else \
            (a_t, b_t, args.a_scale_inv, args.b_scale_inv)
        rows, cols = x_t.shape[0], y_t.shape[0]
        programs = _programs(g * (rows // 128) * -(-cols // 128), sms, args.num_cu)
        gluon_variable_k_sm90.grouped_gemm_fp8_variable_k_nt(x_t, y_t, sx, sy, _offsets(args.group_offs), c, programs,
                                                             accumulate=args.out is not None)
        return True
    except Exception as exc:  # an unsupported Triton version, a driver without the features: keep working
        return _runtime.gluon_failed(_GLUON_BROKEN, "a Gluon grouped FP8 GEMM", exc)


def grouped_gemm_fp8_variable_k(args: GroupedGemmFp8VariableKArgs, config: configs.Fp8GroupedConfig | None = None,
                                path: str | None = None, upcast: bool | None = None) -> torch.Tensor:
    """Run the variable-K kernel: ``C[g] = dequant(A_g)^T @ dequant(B_g)``, ``[G, K, N]`` (``[G, N, K]``
    with ``trans_c``) in ``out_dtype``, or accumulated into ``out`` (``out[g] += C[g]`` in fp32, rounded
    once to out's dtype); an empty group gives zeros (leaves ``out[g]``). ``config`` and ``upcast`` as
    in :func:`grouped_gemm_fp8`; ``path``: ``"tma+kmajor"``, ``"tma"`` or ``"pointer"`` (see
    :func:`variable_k_kernel_path`; the TMA ones run under the interpreter too, for tests); with any of
    ``config``, ``path``, ``upcast`` given, the Gluon kernel is not used."""
    a = args.a
    g, m, k, n = _variable_k_dims(args)
    if args.out is not None:
        c = args.out
    else:
        c = torch.empty((g, n, k) if args.trans_c else (g, k, n), dtype=args.out_dtype, device=a.device)
    if g == 0 or k == 0 or n == 0:
        return c
    if m == 0:
        return c if args.out is not None else c.zero_()  # every group is empty
    arch, sms = _device_facts(a)
    if (config is None and path is None and upcast is None and _tma_arch(arch) and _tma_variable_k_ok(args)
            and gluon_variable_k_reason(args, arch, sms) is None and _launch_gluon_variable_k(args, c, sms)):
        return c
    cfg = config or _tuned(configs.pick_variable_k(arch, k, n, g, sms, c.element_size(), _block_size(args)),
                           arch)
    _check_block_k(cfg, _block_size(args))
    if path is None:
        path = variable_k_kernel_path(args)
    elif path not in ("tma", "tma+kmajor", "pointer"):
        raise ValueError(f"path: expected 'tma', 'tma+kmajor' or 'pointer', got {path!r}")
    elif path.startswith("tma") and not _tma_variable_k_ok(args):
        raise ValueError("path: these operands cannot use the TMA kernel (alignment or layout)")
    tiles = g * -(-k // cfg.block_m) * -(-n // cfg.block_n)
    programs = _programs(tiles, sms, args.num_cu)
    up = _upcast(args, arch, upcast)
    key = (a.dtype, args.b.dtype, c.dtype, args.trans_c, args.out is not None, str(args.granularity), up, programs,
           path)
    if path == "tma+kmajor":
        launch = _launch_fp8_variable_k_kmajor
    else:
        launch = _launch_fp8_variable_k_tma if path == "tma" else _launch_fp8_variable_k_pointer
    _runtime.launch_fitted(launch, cfg, key, args, c, _offsets(args.group_offs), g, m, k, n, programs, up,
                           shrink=configs.shrink)
    return c


def _variable_k_constexprs(args, cfg, up: bool) -> dict:
    bs = _block_size(args)
    return dict(ACCUMULATE=args.out is not None, BLOCKWISE=bs is not None, BS=bs or 1, UPCAST=up,
                IMPRECISE=_imprecise(cfg, cfg.block_k, up), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _launch_fp8_variable_k_pointer(cfg, args, c, offs, g, m, k, n, programs, up):
    from turbo_triton.grouped_gemm_fp8 import kernels

    a, b = args.a, args.b
    fast_kernel(kernels.grouped_gemm_fp8_variable_k_kernel)[(programs,)](
        a, b, c, args.a_scale_inv, args.b_scale_inv, offs, g, m, k, n,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), *_c_strides(c, args.trans_c),
        *_variable_k_scales(args), NUM_PROGRAMS=programs, **_variable_k_constexprs(args, cfg, up),
    )


def _launch_fp8_variable_k_kmajor(cfg, args, c, offs, g, m, k, n, programs, up):
    """The TMA kernel on K-major copies of both operands (see :func:`variable_k_kernel_path`)."""
    a_t = transpose_last2(args.a, row_align=16)
    b_t = transpose_last2(args.b, row_align=16)
    _launch_fp8_variable_k_tma(cfg, args, c, offs, g, m, k, n, programs, up, kmajor=(a_t, b_t))


def _launch_fp8_variable_k_tma(cfg, args, c, offs, g, m, k, n, programs, up, kmajor=None):
    from triton.tools.tensor_descriptor import TensorDescriptor

    from turbo_triton.grouped_gemm_fp8 import kernels

    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    if kmajor is None:
        a_desc = TensorDescriptor.from_tensor(args.a, [bk, bm])
        b_desc = TensorDescriptor.from_tensor(args.b, [bk, bn])
    else:
        a_desc = TensorDescriptor.from_tensor(kmajor[0], [bm, bk])
        b_desc = TensorDescriptor.from_tensor(kmajor[1], [bn, bk])
    c_tma = _c_tma_ok(c, args.trans_c, cfg, k, n)
    subtile = cfg.subtile and c_tma
    c_desc = None
    if c_tma:
        c_desc = (TensorDescriptor.from_tensor(c.view(g * n, k), [bn, bm // 2 if subtile else bm]) if args.trans_c
                  else TensorDescriptor.from_tensor(c.view(g * k, n), [bm, bn // 2 if subtile else bn]))
    fast_kernel(kernels.grouped_gemm_fp8_variable_k_tma_kernel)[(programs,)](
        a_desc, b_desc, c_desc, c, args.a_scale_inv, args.b_scale_inv, offs, g, m, k, n,
        *_c_strides(c, args.trans_c), *_variable_k_scales(args),
        TRANS_C=args.trans_c, C_TMA=c_tma, NUM_PROGRAMS=programs, SUBTILE=subtile,
        DEFER_SCALE=cfg.defer_scale and _block_size(args) is not None, KMAJOR=kmajor is not None,
        **_variable_k_constexprs(args, cfg, up),
    )
