"""The ``gemm_fp8`` primitive on BLASLt (semantics: ``turbo_core.dispatch.specs.gemm_fp8``).

Served granularities and how they map onto the library's scale modes (``scales.py`` re-lays the
scales out where the library wants another order):

* TENSORWISE: ``SCALAR_32F`` on both operands (the ``*_SCALE_POINTER`` attributes; every FP8 library).
* ROWWISE: ``OUTER_VEC_32F`` on both (cuBLASLt >= 12.9; hipBLASLt with ``A_SCALE_MODE``).
* BLOCKWISE, ``block_size=128``: 1x128 blocks -> ``VEC128_32F``, 128x128 tiles -> ``BLK128x128_32F``
  (cuBLASLt >= 12.9 on Hopper); 1-D x 1-D, 1-D x 2-D and 2-D x 1-D, K a multiple of 128, a tiled
  operand's outer dim a multiple of 128. 2-D x 2-D is declined (the library has no such kernel).
* MX_BLOCKWISE: declined (cuBLASLt's MX needs Blackwell and swizzled scales; hipBLASLt's gfx950 MX
  path is not wired up).

FP8 pairs: E4M3 x E4M3, and the HYBRID pairs; E5M2 x E5M2 on cuBLASLt is declined (no kernel). OCP
FP8 on CUDA; FNUZ and OCP on ROCm as the headers provide. Layouts: every layout. On sm89/sm90,
cuBLASLt's FP8 kernels take only the "TN" layout (both operands contiguous along K); an operand that
is not is first copied into that layout (one extra read and write of that FP8 operand), by cuBLASLt's
own matrix transform (``relayout``).

Numerics: ``C = sa * sb * sum_k a*b`` accumulated by the library (fast accumulation off), rounded
once to ``out_dtype``; with ``out``, beta = 1 (``out + C`` formed in fp32, rounded once). On sm89/sm90
cuBLASLt the FP8 tensor cores add products at reduced precision (about 14 bits of the running sum
within each MMA step, promoted to fp32 between steps): errors of a few 1e-4 of the result's largest
magnitude, invisible in a bf16/fp16 result but beyond fp32's tolerance, so an fp32 result
(``out_dtype=float32`` or an fp32 ``out``) is declined there unless ``TURBO_HIPBLASLT_FP8_FP32_OUT=1``
(``runtime.fp8_reduced_accumulation``). hipBLASLt and Blackwell: fp32 accumulation, no such decline.

Algorithm: the heuristic's first choice, or the rank a tuning database holds for the call's key,
whose layout names both scale modes (``turbo_hipblaslt.algos``; this module registers the
``("HIPBLASLT", "gemm_fp8")`` search space).

Host cost: as ``gemm``'s, a call without ``out`` looks its *launch template* up by its metadata
(shapes, strides and dtypes of both operands and both scales, the flags, granularity, block size,
result dtype, device and the fp32-result opt-in): what :func:`_prepare` decided (scale modes,
copies, plan), the result's shape and the call tuple of an earlier call; per call only the scale
re-layouts and operand copies the template names run, and the data and scale pointers, stream and
workspace are written. The memo holds plain values (no tensor) and keeps at most
:data:`TEMPLATES` entries (cleared when full).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, gemm_fp8_dims
from turbo_core.low_precision import ScalingGranularity
from turbo_hipblaslt import algos, blaslt, relayout, runtime, scales
from turbo_hipblaslt.codes import DTYPE_CODES, SCALE_BLOCK128, SCALE_OUTER_VEC, SCALE_SCALAR, SCALE_VEC128
from turbo_hipblaslt.gemm import call_reason, gpu_reason, result_layout
from turbo_hipblaslt.layout import LayoutUnsupported, k_contiguous, plan_gemm
from turbo_hipblaslt.matmul_args import Side, call_args

__all__ = ["TEMPLATES", "call_for", "can_handle", "gemm_fp8"]

G = ScalingGranularity
_OCP = (torch.float8_e4m3fn, torch.float8_e5m2)
_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
_E5M2 = (torch.float8_e5m2, torch.float8_e5m2fnuz)
BLOCK = 128
#: Launch templates kept before the memo is cleared (one per distinct call metadata).
TEMPLATES = 1024
_templates: dict[tuple, tuple] = {}
_FP32_REASON = ("HIPBLASLT gemm_fp8: no fp32 result (out_dtype=float32 or an fp32 out) on sm{cc} with {lib}: its "
                "FP8 tensor-core MMAs add products at reduced precision (about 14 bits; cuBLASLt promotes to fp32 "
                "only between MMA steps), so the result misses fp32's tolerance (1e-4) by "
                "orders of magnitude; ask for a bf16/fp16 result, or set {env}=1 to accept that precision")


@dataclass(frozen=True)
class _Prep:
    """What a call needs, decided from metadata only."""

    copy_a: bool  # make a K-contiguous copy of a ([M, K] row-major, trans_a=False)
    copy_b: bool  # make a K-contiguous copy of b ([N, K] row-major, trans_b=True)
    a_mode: int
    b_mode: int
    a_kind: str | None  # BLOCKWISE: "1d" or "2d"
    b_kind: str | None
    plan: blaslt.BlasPlan


def _dtype_reason(a: torch.dtype, b: torch.dtype, caps: dict) -> str | None:
    if caps["platform"] == "cuda":
        if a in _FNUZ or b in _FNUZ:
            return "HIPBLASLT gemm_fp8: FNUZ FP8 exists on AMD GPUs only; cuBLASLt takes OCP E4M3/E5M2"
        if a in _E5M2 and b in _E5M2:
            return "HIPBLASLT gemm_fp8: cuBLASLt has no E5M2 x E5M2 kernel (E4M3 x E4M3 and the HYBRID pairs only)"
        return None
    if (a in _OCP or b in _OCP) and not caps["ocp_fp8"]:
        return "HIPBLASLT gemm_fp8: this hipBLASLt build has no OCP FP8 types (ROCm >= 6.3 headers needed)"
    if (a in _FNUZ or b in _FNUZ) and not caps["fnuz_fp8"]:
        return "HIPBLASLT gemm_fp8: this hipBLASLt build has no FNUZ FP8 types"
    return None


def _prepare(args: GemmFp8Args) -> _Prep | str:
    a, b = args.a, args.b
    index = runtime.device_index(a)
    caps = runtime.capabilities(index)
    reason = _dtype_reason(a.dtype, b.dtype, caps)
    if reason:
        return reason
    gran = G(args.granularity)
    m, n, k = gemm_fp8_dims(args)
    a_kind = b_kind = None
    if gran == G.TENSORWISE:
        a_mode = b_mode = SCALE_SCALAR
    elif gran == G.ROWWISE:
        if not caps["outer_vec"]:
            return f"HIPBLASLT gemm_fp8 ROWWISE needs the OUTER_VEC_32F scale mode, absent from this {caps['library']}"
        a_mode = b_mode = SCALE_OUTER_VEC
    elif gran == G.BLOCKWISE:
        if not caps["block128"]:
            return f"HIPBLASLT gemm_fp8 BLOCKWISE needs the VEC128/BLK128x128 scale modes, absent from this " \
                   f"{caps['library']}"
        if args.block_size != BLOCK:
            return f"HIPBLASLT gemm_fp8 BLOCKWISE serves block_size=128 only, not {args.block_size}"
        if k % BLOCK:
            return f"HIPBLASLT gemm_fp8 BLOCKWISE needs K to be a multiple of 128 (K={k})"
        a_kind = blockwise_layout(tuple(a.shape), tuple(args.a_scale_inv.shape), -2 if args.trans_a else -1, BLOCK)
        b_kind = blockwise_layout(tuple(b.shape), tuple(args.b_scale_inv.shape), -1 if args.trans_b else -2, BLOCK)
        if a_kind == "2d" and b_kind == "2d":
            return "HIPBLASLT gemm_fp8 BLOCKWISE: the library has no 128x128 x 128x128 kernel (one operand must use " \
                   "1x128 blocks)"
        for name, kind, outer in (("a", a_kind, m), ("b", b_kind, n)):
            if kind == "2d" and outer % BLOCK:
                return f"HIPBLASLT gemm_fp8 BLOCKWISE: {name}'s 128x128 tiles need its outer dim to be a multiple " \
                       f"of 128 (got {outer})"
        a_mode = SCALE_BLOCK128 if a_kind == "2d" else SCALE_VEC128
        b_mode = SCALE_BLOCK128 if b_kind == "2d" else SCALE_VEC128
    else:
        return f"HIPBLASLT gemm_fp8 does not serve {gran.value} (cuBLASLt MX needs Blackwell and swizzled scales; " \
               "the hipBLASLt MX path is not implemented)"
    if args.result_dtype == torch.float32 and runtime.fp8_reduced_accumulation(index) \
            and not runtime.fp8_fp32_out_allowed():
        return _FP32_REASON.format(cc="".join(map(str, caps["compute_capability"])), lib=caps["library"],
                                   env=runtime.FP8_FP32_OUT_ENV)

    need_tn = runtime.fp8_needs_tn(index)
    a_meta, b_meta = blaslt.meta(a), blaslt.meta(b)
    copy_a = need_tn and not k_contiguous(*a_meta, 0 if args.trans_a else 1)
    copy_b = need_tn and not k_contiguous(*b_meta, 1 if args.trans_b else 0)
    if copy_a:
        a_meta = ((m, k), (k, 1))
    if copy_b:
        b_meta = ((n, k), (k, 1))
    shape = (n, m) if args.trans_c else (m, n)
    d_meta = blaslt.meta(args.out) if args.out is not None else result_layout(shape)
    try:
        p = plan_gemm(a_meta, args.trans_a and not copy_a, b_meta, args.trans_b or copy_b, d_meta, args.trans_c,
                      need_tn=need_tn)
    except LayoutUnsupported as exc:
        return f"HIPBLASLT gemm_fp8: {exc}"
    return _Prep(copy_a, copy_b, a_mode, b_mode, a_kind, b_kind, p)


def _scale(t: torch.Tensor, mode: int, kind: str | None, contraction_dim: int) -> torch.Tensor:
    if mode == SCALE_SCALAR:
        return t
    if mode == SCALE_OUTER_VEC:
        return scales.outer_vector(t)
    if kind == "2d":
        return scales.blk128_scales(t, contraction_dim)
    return scales.vec128_scales(t, contraction_dim)


def can_handle(args: GemmFp8Args) -> str | None:
    reason = gpu_reason(args.a, "gemm_fp8")
    if reason:
        return reason
    m, n, k = gemm_fp8_dims(args)
    if m == 0 or n == 0 or k == 0:
        return None
    return call_reason("gemm_fp8", call_for(args))


def call_for(args: GemmFp8Args) -> tuple | str:
    """The call tuple :func:`gemm_fp8` launches for ``args`` as the capability check sees it (a copied
    operand's and a fresh result's pointers 0: aligned; scale pointers an aligned stand-in), or why
    there is none."""
    prep = _prepare(args)
    if isinstance(prep, str):
        return prep
    a_ptr = 0 if prep.copy_a else args.a.data_ptr()
    b_ptr = 0 if prep.copy_b else args.b.data_ptr()
    return call_args(prep.plan, Side(a_ptr, DTYPE_CODES[args.a.dtype], 16, prep.a_mode),
                     Side(b_ptr, DTYPE_CODES[args.b.dtype], 16, prep.b_mode),
                     args.out.data_ptr() if args.out is not None else 0, DTYPE_CODES[args.result_dtype],
                     device=runtime.device_index(args.a), beta=1.0 if args.out is not None else 0.0,
                     workspace_size=runtime.workspace_bytes())


def _template_key(args: GemmFp8Args) -> tuple:
    a, b, sa, sb = args.a, args.b, args.a_scale_inv, args.b_scale_inv
    return (a.shape, a.stride(), a.dtype, b.shape, b.stride(), b.dtype, sa.shape, sa.stride(), sa.dtype, sb.shape,
            sb.stride(), sb.dtype, args.out_dtype, args.trans_a, args.trans_b, args.trans_c, args.granularity,
            args.block_size, a.device, runtime.fp8_fp32_out_allowed())


def _operands(args: GemmFp8Args, prep: _Prep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(a, a's scales, b, b's scales)`` as the library takes them: scales re-laid out for their mode,
    operands copied K-contiguous where ``prep`` says."""
    a, b = args.a, args.b
    sa = _scale(args.a_scale_inv, prep.a_mode, prep.a_kind, 0 if args.trans_a else 1)
    sb = _scale(args.b_scale_inv, prep.b_mode, prep.b_kind, 1 if args.trans_b else 0)
    if prep.copy_a:
        a = relayout.contiguous(a.t() if args.trans_a else a)
    if prep.copy_b:
        b = relayout.contiguous(b if args.trans_b else b.t())
    return a, sa, b, sb


def gemm_fp8(args: GemmFp8Args) -> torch.Tensor:
    out = args.out
    if out is None:
        key = _template_key(args)
        t = _templates.get(key)
        if t is not None:  # (prep, result shape, head tuple)
            prep, shape, head = t
            a, sa, b, sb = _operands(args, prep)
            d = torch.empty(shape, dtype=args.result_dtype, device=a.device)
            algos.launch("gemm_fp8", blaslt.template_args(head, prep.plan.swapped, a.data_ptr(), b.data_ptr(), d,
                                                          sa.data_ptr(), sb.data_ptr()))
            return d
    m, n, k = gemm_fp8_dims(args)
    shape = (n, m) if args.trans_c else (m, n)
    if m == 0 or n == 0 or k == 0:
        return out if out is not None else torch.zeros(shape, dtype=args.result_dtype, device=args.a.device)
    prep = _prepare(args)
    if isinstance(prep, str):  # the dispatcher asked can_handle first; reached only when called directly
        raise ValueError(prep)
    a, sa, b, sb = _operands(args, prep)
    d = out if out is not None else torch.empty(shape, dtype=args.result_dtype, device=a.device)
    side_a = Side(a.data_ptr(), DTYPE_CODES[a.dtype], sa.data_ptr(), prep.a_mode)
    side_b = Side(b.data_ptr(), DTYPE_CODES[b.dtype], sb.data_ptr(), prep.b_mode)
    call = blaslt.args_for(prep.plan, side_a, side_b, d, beta=1.0 if out is not None else 0.0)
    algos.launch("gemm_fp8", call)
    if out is None:
        if len(_templates) >= TEMPLATES:
            _templates.clear()
        _templates[key] = (prep, shape, tuple(call))
    return d


algos.register_space("gemm_fp8", call_for)
