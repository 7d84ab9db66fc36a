"""The ``gemm`` primitive on BLASLt: fp16/bf16/fp32 inputs, every layout (``trans_a``/``trans_b``/
``trans_c`` and any strides with a unit stride on one dim), accumulate-into-``out`` as beta = 1.

Numerics: products accumulated in fp32 by the library (fp32 inputs: exact fp32, or TF32 when
``torch.backends.cuda.matmul.allow_tf32``), rounded once to the result dtype. The library writes the
result dtype directly for the pairs in :data:`DIRECT` (fp32->fp32, fp16->fp16/fp32, bf16->bf16/fp32);
any other result dtype (e.g. fp32 inputs with a bf16 ``out_dtype``) is written as fp32 by the library
and rounded once by torch (``out + C`` formed in fp32 for accumulation).

Algorithm: the heuristic's first choice, or the rank a tuning database holds for the call's key
(``turbo_hipblaslt.algos``; this module registers the ``("HIPBLASLT", "gemm")`` search space).

Host cost: a call without ``out`` looks its *launch template* up by its metadata (shapes, strides,
dtypes, flags, device, TF32 setting): the result's shape and dtype and the call tuple with every slot
but the data pointers, stream and workspace filled in (:func:`blaslt.template_args`). Only those slots
are written per call. The memo holds plain integers (no tensor) and keeps at most
:data:`TEMPLATES` entries (cleared when full).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims
from turbo_hipblaslt import algos, blaslt, runtime
from turbo_hipblaslt.codes import DTYPE_CODES
from turbo_hipblaslt.layout import LayoutUnsupported
from turbo_hipblaslt.matmul_args import Side, call_args

__all__ = ["DIRECT", "call_for", "call_reason", "can_handle", "gemm", "plan_call", "plan_reason", "result_layout"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Launch templates kept before the memo is cleared (one per distinct call metadata).
TEMPLATES = 1024
_templates: dict[tuple, tuple] = {}
#: (input dtype, result dtype) pairs the library writes itself.
DIRECT = frozenset({
    (torch.float32, torch.float32),
    (torch.float16, torch.float16), (torch.float16, torch.float32),
    (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
})


def gpu_reason(t: torch.Tensor, what: str) -> str | None:
    if t.device.type != "cuda":
        return f"HIPBLASLT {what} runs on GPU tensors only (got {t.device.type})"
    return None


def result_layout(shape: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(shape, strides)`` of a fresh contiguous result."""
    return (int(shape[0]), int(shape[1])), (int(shape[1]), 1)


def _target(args: GemmArgs) -> tuple[bool, torch.dtype]:
    """``(direct, dtype the library writes)``."""
    direct = (args.a.dtype, args.result_dtype) in DIRECT
    return direct, (args.result_dtype if direct else torch.float32)


def can_handle(args: GemmArgs) -> str | None:
    reason = gpu_reason(args.a, "gemm")
    if reason:
        return reason
    if args.a.dtype not in _DTYPES:
        return f"HIPBLASLT gemm serves fp16/bf16/fp32, not {args.a.dtype}"
    m, n, k = gemm_dims(args)
    if m == 0 or n == 0 or k == 0:
        return None  # answered without the library
    return call_reason("gemm", call_for(args))


def call_reason(what: str, call: tuple | str) -> str | None:
    """Why the library cannot run ``call`` (a call tuple, or already a reason), or ``None``."""
    if isinstance(call, str):
        return call
    why = blaslt.check(call)
    return None if why is None else f"HIPBLASLT {what}: {why}"


def call_for(args: GemmArgs) -> tuple | str:
    """The call tuple :func:`gemm` launches for ``args`` as the capability check sees it (a fresh
    result's pointer 0: aligned; the configured workspace size), or why there is none."""
    m, n, k = gemm_dims(args)
    direct, d_dtype = _target(args)
    shape = (n, m) if args.trans_c else (m, n)
    d_meta = blaslt.meta(args.out) if (args.out is not None and direct) else result_layout(shape)
    try:
        p = blaslt._cached_plan(blaslt.meta(args.a), args.trans_a, blaslt.meta(args.b), args.trans_b, d_meta,
                                args.trans_c, False, False)
    except LayoutUnsupported as exc:
        return f"HIPBLASLT gemm: {exc}"
    return plan_call(p, args.a, args.b, args.out if direct else None, d_dtype)


def plan_call(p: blaslt.BlasPlan, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
              d_dtype: torch.dtype) -> tuple:
    """The call tuple of a 16/32-bit plan of ``a`` and ``b`` writing ``d_dtype`` (``out``: the result is
    accumulated into it, beta = 1), as the capability checks ask the library about it."""
    code = DTYPE_CODES[a.dtype]
    return call_args(p, Side(a.data_ptr(), code), Side(b.data_ptr(), code),
                     out.data_ptr() if out is not None else 0, DTYPE_CODES[d_dtype],
                     device=runtime.device_index(a), beta=1.0 if out is not None else 0.0,
                     compute=runtime.tf32() if a.dtype == torch.float32 else 0,
                     workspace_size=runtime.workspace_bytes())


def plan_reason(what: str, p: blaslt.BlasPlan, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None,
                d_dtype: torch.dtype) -> str | None:
    """Why the library has no algorithm for :func:`plan_call`'s call, or ``None``."""
    return call_reason(what, plan_call(p, a, b, out, d_dtype))


def _template_key(args: GemmArgs) -> tuple:
    a, b = args.a, args.b
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype, args.out_dtype, args.trans_a, args.trans_b,
            args.trans_c, a.device, a.dtype is torch.float32 and runtime.tf32())


def gemm(args: GemmArgs) -> torch.Tensor:
    a, b, out = args.a, args.b, args.out
    if out is None:
        key = _template_key(args)
        t = _templates.get(key)
        if t is not None:  # (shape, d dtype, result dtype or None when direct, swapped, head tuple)
            d = torch.empty(t[0], dtype=t[1], device=a.device)
            algos.launch("gemm", blaslt.template_args(t[4], t[3], a.data_ptr(), b.data_ptr(), d))
            return d if t[2] is None else d.to(t[2])
    m, n, k = gemm_dims(args)
    shape = (n, m) if args.trans_c else (m, n)
    if m == 0 or n == 0 or k == 0:  # an empty sum: C = 0
        return out if out is not None else torch.zeros(shape, dtype=args.result_dtype, device=a.device)
    direct, d_dtype = _target(args)
    if direct and out is not None:
        d, beta = out, 1.0
    else:
        d, beta = torch.empty(shape, dtype=d_dtype, device=a.device), 0.0
    p = blaslt.plan(a, args.trans_a, b, args.trans_b, d, args.trans_c)
    code = DTYPE_CODES[a.dtype]
    call = blaslt.args_for(p, Side(a.data_ptr(), code), Side(b.data_ptr(), code), d, beta=beta)
    algos.launch("gemm", call)
    if out is None:
        if len(_templates) >= TEMPLATES:
            _templates.clear()
        _templates[key] = (shape, d_dtype, None if direct else args.result_dtype, p.swapped, tuple(call))
    if direct:
        return d
    if out is not None:
        out.copy_(out.to(torch.float32) + d)
        return out
    return d.to(args.result_dtype)


algos.register_space("gemm", call_for)
