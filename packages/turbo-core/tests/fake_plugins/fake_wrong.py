"""Fake plugin: backend WRONG, the reference kernels with one deliberate mistake each, for the tests
that the property tests catch what they claim to (each mistake hides from the easy cases):

- gemm: one element off by 1 % when K > 8;
- quantize_fp8: ROWWISE scales 0.1 % large;
- rmsnorm_fwd: eps ignored (right unless a row's mean square is near eps);
- moe_permute_preprocess: the last expert's tokens_per_expert one short when padding to a multiple;
- swiglu_fwd: the right result, but it zeroes its input afterwards;
- attention_fwd: the window ignored;
- dequantize_fp8: declines every call.
"""

from __future__ import annotations

import dataclasses

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_core.reference import activation, attention, gemm, normalization, quantization
from turbo_core.reference.moe_permute import moe_permute_preprocess

NAME = "WRONG"


def _gemm(args):
    out = gemm.gemm(args)
    m, k = (args.a.shape[1], args.a.shape[0]) if args.trans_a else tuple(args.a.shape)
    if k > 8 and out.numel():
        out.view(-1)[-1] *= 1.01
    return out


def _quantize_fp8(args):
    q, s = quantization.quantize_fp8(args)
    return q, s * 1.001 if str(args.granularity).endswith("ROWWISE") else s


def _rmsnorm_fwd(args):
    return normalization.rmsnorm_fwd(dataclasses.replace(args, eps=1e-30))


def _preprocess(args):
    row_map, tpe, overflow, dispatched = moe_permute_preprocess(args)
    if args.pad_multiple > 1 and tpe.numel() and int(tpe[-1]) > 0:
        tpe = tpe.clone()
        tpe[-1] -= 1
    return row_map, tpe, overflow, dispatched


def _swiglu_fwd(args):
    out = activation.swiglu_fwd(args)
    args.x.zero_()
    return out


def _attention_fwd(args):
    return attention.attention_fwd(dataclasses.replace(args, window_size=(-1, -1)))


@hookimpl
def turbo_backend_info():
    return BackendInfo(name=NAME, package="fake-wrong", version="0", platforms=("cpu", "cuda", "rocm"))


@hookimpl
def turbo_register_kernels(register):
    for primitive, impl in (("gemm", _gemm), ("quantize_fp8", _quantize_fp8), ("rmsnorm_fwd", _rmsnorm_fwd),
                            ("moe_permute_preprocess", _preprocess), ("swiglu_fwd", _swiglu_fwd),
                            ("attention_fwd", _attention_fwd)):
        register(Kernel(primitive, NAME, impl))
    register(Kernel("dequantize_fp8", NAME, quantization.dequantize_fp8, check=lambda args: "WRONG declines"))
