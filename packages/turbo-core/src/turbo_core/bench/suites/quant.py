"""FP8 and MXFP4 quantization (``turbo bench quant``): ``quantize_fp8``, ``quantize_fp8_with_trans``,
``dequantize_fp8`` (E4M3) and ``quantize_fp4``, ``quantize_fp4_with_trans``, ``dequantize_fp4``
(E2M1 packed two a byte, 1x32 blocks, E8M0 scales) at model shapes, bf16 activations ``[T, H]``.

FP8 variants: TENSORWISE, ROWWISE (one scale per row), BLOCKWISE 1x128 (along the row) and 128x128
tiles, MX (1x32, E8M0); ``with_trans`` for ROWWISE, BLOCKWISE 1x128 and MX (the row- and
column-quantized copies from one call); ``dequantize`` of the ROWWISE and BLOCKWISE 1x128 quantizations to bf16.
MXFP4 variants (where this torch has ``float4_e2m1fn_x2``): row-wise (``mxfp4``) and col-wise
(``mxfp4-col``) quantization, ``with_trans`` and the row-wise ``dequantize`` to bf16.
Bytes: the input read once, every output (data and scales) written once.

Providers: ``torch`` (eager: the reference backend's kernel, which is plain sync-free PyTorch),
``torch.compile`` of the same function, and ``turbo:<BACKEND>`` for every available backend with
a kernel for the primitive. Accuracy: max relative difference of every output (data and scales,
as numbers) from the reference kernel's in float64 — 0 when bit-identical.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from turbo_core.bench.suites.norm import MemCase, print_table, run_bandwidth
from turbo_core.dispatch import call, use_backend
from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    DequantizeFp8Args,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.low_precision import ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.reference.quantization import quantize_fp4, quantize_fp8

__all__ = ["cases", "print_table", "run"]

#: Model hidden sizes: the activation width.
HIDDEN = {"llama3.1-8b": 4096, "deepseek-v3": 7168, "llama3.1-70b": 8192}
QUICK_HIDDEN = {"tiny": 256}
DEFAULT_TOKENS = 16384
FP8 = torch.float8_e4m3fn
#: Packed E2M1 (None on a torch without it: no MXFP4 cases).
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
#: op -> (primitive, granularity, block size, 2-D tiles, quantized axis)
VARIANTS = {
    "quantize/tensorwise": ("quantize_fp8", G.TENSORWISE, None, False, -1),
    "quantize/rowwise": ("quantize_fp8", G.ROWWISE, None, False, -1),
    "quantize/blockwise-1x128": ("quantize_fp8", G.BLOCKWISE, 128, False, -1),
    "quantize/blockwise-128x128": ("quantize_fp8", G.BLOCKWISE, 128, True, -1),
    "quantize/mx": ("quantize_fp8", G.MX_BLOCKWISE, 32, False, -1),
    "with_trans/rowwise": ("quantize_fp8_with_trans", G.ROWWISE, None, False, -1),
    "with_trans/blockwise-1x128": ("quantize_fp8_with_trans", G.BLOCKWISE, 128, False, -1),
    "with_trans/mx": ("quantize_fp8_with_trans", G.MX_BLOCKWISE, 32, False, -1),
    "dequantize/rowwise": ("dequantize_fp8", G.ROWWISE, None, False, -1),
    "dequantize/blockwise-1x128": ("dequantize_fp8", G.BLOCKWISE, 128, False, -1),
    "quantize/mxfp4": ("quantize_fp4", G.MX_BLOCKWISE, 32, False, -1),
    "quantize/mxfp4-col": ("quantize_fp4", G.MX_BLOCKWISE, 32, False, -2),
    "with_trans/mxfp4": ("quantize_fp4_with_trans", G.MX_BLOCKWISE, 32, False, -1),
    "dequantize/mxfp4": ("dequantize_fp4", G.MX_BLOCKWISE, 32, False, -1),
}


def _scale_bytes(gran: G, bs: int | None, two_d: bool, t: int, h: int) -> int:
    if gran == G.TENSORWISE:
        return 4
    if gran == G.ROWWISE:
        return 4 * t
    if gran == G.MX_BLOCKWISE:
        return t * -(-h // 32)
    return 4 * (-(-t // bs) * -(-h // bs) if two_d else t * -(-h // bs))


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MemCase]:
    table = QUICK_HIDDEN if quick else HIDDEN
    tokens = tokens or (32 if quick else DEFAULT_TOKENS)
    out = []
    for op, (prim, gran, bs, two_d, _) in VARIANTS.items():
        if "fp4" in prim and FP4 is None:
            continue
        for model, hidden in table.items():
            if models and model not in models:
                continue
            th = tokens * hidden
            data = th // 2 if "fp4" in prim else th  # E2M1: two a byte
            scales = _scale_bytes(gran, bs, two_d, tokens, hidden)
            if prim.startswith("quantize") and "with_trans" not in prim:
                nbytes = 2 * th + data + scales
            elif "with_trans" in prim:
                nbytes = 2 * th + 2 * data + scales + _scale_bytes(gran, bs, two_d, hidden, tokens)
            else:
                nbytes = data + scales + 2 * th
            pass_, variant = op.split("/")
            out.append(MemCase("quant", variant, model, pass_, tokens, hidden, torch.bfloat16,
                               nbytes, extra={"primitive": prim, "granularity": gran.value, "block_size": bs,
                                              "two_d": two_d}))
    return out


def _spec(case: MemCase):
    return VARIANTS[f"{case.pass_}/{case.op}"]


def _quant_args(case: MemCase, x: torch.Tensor):
    prim, gran, bs, two_d, axis = _spec(case)
    if prim == "quantize_fp4":
        return QuantizeFp4Args(x, FP4, axis)
    if prim == "quantize_fp4_with_trans":
        return QuantizeFp4WithTransArgs(x, FP4)
    if prim == "quantize_fp8_with_trans":
        return QuantizeFp8WithTransArgs(x, FP8, gran, bs)
    axis = None if gran == G.TENSORWISE or two_d else -1
    return QuantizeFp8Args(x, FP8, gran, axis, bs, ScalingRecipe(use_2d_block=two_d))


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    """``(x,)`` for the quantizers; ``(q, scale_inv)`` (the reference's quantization) to dequantize."""
    x = torch.randn(case.tokens, case.hidden, device=device, generator=gen).to(case.dtype)
    prim, gran, bs, _, axis = _spec(case)
    if prim == "dequantize_fp4":
        return quantize_fp4(QuantizeFp4Args(x, FP4, axis))
    if prim == "dequantize_fp8":
        return quantize_fp8(QuantizeFp8Args(x, FP8, gran, axis, bs))
    return (x,)


def _dequant_args(case: MemCase, inputs: tuple):
    prim, gran, bs, _, axis = _spec(case)
    q, s = inputs
    if prim == "dequantize_fp4":
        return DequantizeFp4Args(q, s, torch.bfloat16, axis)
    return DequantizeFp8Args(q, s, torch.bfloat16, gran, axis, bs)


def turbo_args(case: MemCase, inputs: tuple):
    """``(primitive name, args)`` of the case."""
    prim = _spec(case)[0]
    return prim, (_dequant_args(case, inputs) if prim.startswith("dequantize") else _quant_args(case, inputs[0]))


def _as_list(out) -> list[torch.Tensor]:
    """The outputs; packed E2M1 data as its bytes (compared as numbers: 0 when bit-identical)."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [t.view(torch.uint8) if FP4 is not None and t.dtype == FP4 else t for t in outs]


def _reference_fn(prim: str) -> Callable:
    return getattr(ref, prim)


def reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """The reference kernel's outputs, as float64 numbers."""
    name, args = turbo_args(case, inputs)
    return [t.double() for t in _as_list(_reference_fn(name)(args))]


def torch_provider(case: MemCase, compiled: bool) -> Callable:
    name = _spec(case)[0]
    fn = _reference_fn(name)
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, dynamic=False)

    def prepare(inputs):
        args = turbo_args(case, inputs)[1]
        return lambda: _as_list(fn(args))

    return prepare


def turbo_provider(case: MemCase, backend: str) -> Callable:
    def prepare(inputs):
        name, args = turbo_args(case, inputs)

        def run_once():
            with use_backend(backend):
                return _as_list(call(name, args))

        return run_once

    return prepare


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """The quantization suite: rows as :func:`turbo_core.bench.suites.norm.run_bandwidth`'s."""
    return run_bandwidth(sys.modules[__name__], cases(tokens, quick, models), providers=providers,
                         include_reference=include_reference,
                         warmup=warmup, iters=iters, device=device, progress=progress)
