"""FP8 quantization (``turbo bench quant``): ``quantize_fp8``, ``quantize_fp8_with_trans`` and
``dequantize_fp8`` at model shapes, bf16 activations ``[T, H]``, E4M3.

Variants: TENSORWISE, ROWWISE (one scale per row), BLOCKWISE 1x128 (along the row) and 128x128
tiles, MX (1x32, E8M0); ``with_trans`` for ROWWISE, BLOCKWISE 1x128 and MX (the row- and
column-quantized copies from one call); ``dequantize`` of the ROWWISE and BLOCKWISE 1x128 quantizations to bf16.
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
from turbo_core.dispatch.specs.quantization import DequantizeFp8Args, QuantizeFp8Args, QuantizeFp8WithTransArgs
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.low_precision import ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.reference.quantization import quantize_fp8

__all__ = ["cases", "print_table", "run"]

#: Model hidden sizes: the activation width.
HIDDEN = {"llama3.1-8b": 4096, "deepseek-v3": 7168, "llama3.1-70b": 8192}
QUICK_HIDDEN = {"tiny": 256}
DEFAULT_TOKENS = 16384
FP8 = torch.float8_e4m3fn
#: op -> (primitive, granularity, block size, 2-D tiles)
VARIANTS = {
    "quantize/tensorwise": ("quantize_fp8", G.TENSORWISE, None, False),
    "quantize/rowwise": ("quantize_fp8", G.ROWWISE, None, False),
    "quantize/blockwise-1x128": ("quantize_fp8", G.BLOCKWISE, 128, False),
    "quantize/blockwise-128x128": ("quantize_fp8", G.BLOCKWISE, 128, True),
    "quantize/mx": ("quantize_fp8", G.MX_BLOCKWISE, 32, False),
    "with_trans/rowwise": ("quantize_fp8_with_trans", G.ROWWISE, None, False),
    "with_trans/blockwise-1x128": ("quantize_fp8_with_trans", G.BLOCKWISE, 128, False),
    "with_trans/mx": ("quantize_fp8_with_trans", G.MX_BLOCKWISE, 32, False),
    "dequantize/rowwise": ("dequantize_fp8", G.ROWWISE, None, False),
    "dequantize/blockwise-1x128": ("dequantize_fp8", G.BLOCKWISE, 128, False),
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
    for op, (prim, gran, bs, two_d) in VARIANTS.items():
        for model, hidden in table.items():
            if models and model not in models:
                continue
            th = tokens * hidden
            scales = _scale_bytes(gran, bs, two_d, tokens, hidden)
            if prim == "quantize_fp8":
                nbytes = 2 * th + th + scales
            elif prim == "quantize_fp8_with_trans":
                nbytes = 2 * th + 2 * th + scales + _scale_bytes(gran, bs, two_d, hidden, tokens)
            else:
                nbytes = th + scales + 2 * th
            pass_, variant = op.split("/")
            out.append(MemCase("quant", variant, model, pass_, tokens, hidden, torch.bfloat16,
                               nbytes, extra={"primitive": prim, "granularity": gran.value, "block_size": bs,
                                              "two_d": two_d}))
    return out


def _spec(case: MemCase):
    return VARIANTS[f"{case.pass_}/{case.op}"]


def _quant_args(case: MemCase, x: torch.Tensor):
    prim, gran, bs, two_d = _spec(case)
    if prim == "quantize_fp8_with_trans":
        return QuantizeFp8WithTransArgs(x, FP8, gran, bs)
    axis = None if gran == G.TENSORWISE or two_d else -1
    return QuantizeFp8Args(x, FP8, gran, axis, bs, ScalingRecipe(use_2d_block=two_d))


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    """``(x,)`` for the quantizers; ``(q, scale_inv)`` (the reference's quantization) to dequantize."""
    x = torch.randn(case.tokens, case.hidden, device=device, generator=gen).to(case.dtype)
    prim, gran, bs, _ = _spec(case)
    if prim != "dequantize_fp8":
        return (x,)

    q, s = quantize_fp8(QuantizeFp8Args(x, FP8, gran, -1, bs))
    return q, s


def _dequant_args(case: MemCase, inputs: tuple):
    _, gran, bs, _ = _spec(case)
    q, s = inputs
    return DequantizeFp8Args(q, s, torch.bfloat16, gran, -1, bs)


def turbo_args(case: MemCase, inputs: tuple):
    """``(primitive name, args)`` of the case."""
    prim = _spec(case)[0]
    return prim, (_dequant_args(case, inputs) if prim == "dequantize_fp8" else _quant_args(case, inputs[0]))


def _as_list(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


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
