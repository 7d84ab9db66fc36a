"""FP8 and MXFP4 quantization (``turbo bench quant``): ``quantize_fp8``, ``quantize_fp8_with_trans``,
``dequantize_fp8`` (E4M3) and ``quantize_fp4``, ``quantize_fp4_with_trans``, ``dequantize_fp4``
(E2M1 packed two a byte, 1x32 blocks, E8M0 scales) at model shapes, bf16 activations ``[T, H]``.

FP8 variants: TENSORWISE, ROWWISE (one scale per row), BLOCKWISE 1x128 (along the row) and 128x128
tiles, MX (1x32, E8M0); ``with_trans`` for ROWWISE, BLOCKWISE 1x128 and MX (the row- and
column-quantized copies from one call); ``dequantize`` of the ROWWISE and BLOCKWISE 1x128 quantizations to bf16.
MXFP4 variants (where this torch has ``float4_e2m1fn_x2``): row-wise (``mxfp4``) and col-wise
(``mxfp4-col``) quantization, ``with_trans`` and the row-wise ``dequantize`` to bf16.

Grouped variants (``grouped-*``: the MoE activations, tokens packed by expert along the rows):
``grouped_quantize_fp8`` BLOCKWISE 1x128 and 1x32 and MX, row-wise and col-wise (``-col``: the
blocks run down the columns, each group's rows padded to the layout's alignment),
``grouped_quantize_fp8_with_trans`` (BLOCKWISE 1x128, MX), ``grouped_dequantize_fp8`` of each
``grouped_quantize_fp8`` layout, and MXFP4 ``grouped_quantize_fp4`` row / col,
``grouped_quantize_fp4_with_trans`` and ``grouped_dequantize_fp4`` row / col (where this torch has
the FP4 dtype). Widths: :data:`GROUPED_HIDDEN`; rows: the token count, split over each of
:data:`GROUPS` groups by :func:`skewed_lens` (shares falling as 1/(i+1), the second group empty);
``--quick``: :data:`QUICK_GROUPED_HIDDEN`, :data:`QUICK_GROUPS`. Layouts and their padding:
:func:`turbo_core.dispatch.specs.quantization.grouped_fp8_shapes` / ``grouped_fp4_shapes``. Their
rows also carry ``groups``, ``group_lens`` and ``balance = "skewed"`` (a variant: the report gives
them tables of their own).

Bytes: the input read once, every output (data and scales; grouped: also the int64 group lengths
and offsets, read and written) written once, the shapes being the spec's (padded) layouts.

Providers: ``torch`` (eager: the reference backend's kernel, which is plain sync-free PyTorch),
``torch.compile`` of the same function, and ``turbo:<BACKEND>`` for every available backend with
a kernel for the primitive. Accuracy: max relative difference of every output (data and scales,
as numbers; grouped: also the padded lengths and offsets) from the reference kernel's in float64 —
0 when bit-identical (``torch.compile``'s is not 0 where Inductor rounds the scale math otherwise).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch

from turbo_core.bench.suites.norm import MemCase, print_table, run_bandwidth
from turbo_core.dispatch import call, use_backend
from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    DequantizeFp8Args,
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
    grouped_fp4_shapes,
    grouped_fp8_shapes,
)
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.low_precision import ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.reference.quantization import quantize_fp4, quantize_fp8

__all__ = ["GroupedCase", "cases", "print_table", "run", "skewed_lens"]

#: Model hidden sizes: the activation width.
HIDDEN = {"llama3.1-8b": 4096, "deepseek-v3": 7168, "llama3.1-70b": 8192}
QUICK_HIDDEN = {"tiny": 256}
#: Grouped variants: the hidden size (the routed experts' input width) of the MoE models of the
#: ``grouped_gemm`` suite.
GROUPED_HIDDEN = {"deepseek-v3": 7168, "qwen3-30b-a3b": 2048, "mixtral-8x7b": 4096}
#: ``--quick`` grouped width (narrow: MXFP4 col-wise pads every group to 512 rows).
QUICK_GROUPED_HIDDEN = {"tiny-moe": 32}
#: Group counts of the grouped variants (``--quick``: :data:`QUICK_GROUPS`).
GROUPS = (8, 32)
QUICK_GROUPS = (3,)
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
#: Grouped layouts: id -> (granularity, block size, axis: 1 row-wise, 0 col-wise).
_GROUPED_FP8 = {"blockwise-1x128": (G.BLOCKWISE, 128, 1), "blockwise-1x128-col": (G.BLOCKWISE, 128, 0),
                "blockwise-1x32": (G.BLOCKWISE, 32, 1), "blockwise-1x32-col": (G.BLOCKWISE, 32, 0),
                "mx": (G.MX_BLOCKWISE, 32, 1), "mx-col": (G.MX_BLOCKWISE, 32, 0)}
_GROUPED_FP4 = {"mxfp4": (G.MX_BLOCKWISE, 32, 1), "mxfp4-col": (G.MX_BLOCKWISE, 32, 0)}
#: Grouped op -> (primitive, granularity, block size, axis; None for with_trans: both).
GROUPED_VARIANTS = {
    **{f"quantize/grouped-{k}": ("grouped_quantize_fp8", *v) for k, v in _GROUPED_FP8.items()},
    "with_trans/grouped-blockwise-1x128": ("grouped_quantize_fp8_with_trans", G.BLOCKWISE, 128, None),
    "with_trans/grouped-mx": ("grouped_quantize_fp8_with_trans", G.MX_BLOCKWISE, 32, None),
    **{f"dequantize/grouped-{k}": ("grouped_dequantize_fp8", *v) for k, v in _GROUPED_FP8.items()},
    **{f"quantize/grouped-{k}": ("grouped_quantize_fp4", *v) for k, v in _GROUPED_FP4.items()},
    "with_trans/grouped-mxfp4": ("grouped_quantize_fp4_with_trans", G.MX_BLOCKWISE, 32, None),
    **{f"dequantize/grouped-{k}": ("grouped_dequantize_fp4", *v) for k, v in _GROUPED_FP4.items()},
}


class GroupedCase(MemCase):
    """A grouped case: ``extra["lens"]``, the rows of each group; its label names the group count."""

    @property
    def label(self) -> str:
        return f"{self.op}/{self.pass_} {self.model} G{len(self.extra['lens'])} {self.tokens}x{self.hidden}"


def skewed_lens(rows: int, groups: int) -> tuple[int, ...]:
    """Rows per group summing to ``rows``: shares falling as ``1/(i+1)`` (the first group takes the
    rounding), the second group empty (from 3 groups on, a zero-size group between non-empty ones)."""
    weights = [0.0 if i == 1 else 1.0 / (i + 1) for i in range(groups)]
    lens = [int(rows * w / sum(weights)) for w in weights]
    lens[0] += rows - sum(lens)
    return tuple(lens)


def _scale_bytes(gran: G, bs: int | None, two_d: bool, t: int, h: int) -> int:
    if gran == G.TENSORWISE:
        return 4
    if gran == G.ROWWISE:
        return 4 * t
    if gran == G.MX_BLOCKWISE:
        return t * -(-h // 32)
    return 4 * (-(-t // bs) * -(-h // bs) if two_d else t * -(-h // bs))


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _grouped_layout_bytes(prim: str, gran: G, bs: int | None, axis: int, m: int, n: int, g: int) -> tuple[int, int]:
    """``(bytes of the data and scales, columns of the dequantized output)`` of one grouped layout."""
    if "fp4" in prim:
        data, scale = grouped_fp4_shapes(m, n, g, axis)
        return _numel(data) + _numel(scale), (2 * data[1] if axis == 1 else n)  # E2M1 and E8M0: 1 B
    data, scale = grouped_fp8_shapes(m, n, g, gran, axis, bs)
    scale_size = 4 if gran == G.BLOCKWISE else 1
    return _numel(data) + scale_size * _numel(scale), (data[1] if gran == G.MX_BLOCKWISE and axis == 1 else n)


def grouped_bytes(prim: str, gran: G, bs: int | None, axis: int | None, m: int, n: int, g: int) -> int:
    """The explicit byte count of a grouped case on bf16 ``[m, n]`` in ``g`` groups: quantization
    reads x and the int64 lens ``[g]`` / offs ``[g + 1]`` and writes each layout and its padded
    lens / offs; dequantization reads the layout and both offs and writes bf16 ``[m, n]`` (MX
    row-wise: the padded width)."""
    lens_offs = 8 * (2 * g + 1)
    if "with_trans" in prim:
        return 2 * m * n + lens_offs + sum(_grouped_layout_bytes(prim, gran, bs, ax, m, n, g)[0]
                                           for ax in (1, 0)) + 2 * lens_offs
    layout, cols = _grouped_layout_bytes(prim, gran, bs, axis, m, n, g)
    if "dequantize" in prim:
        return layout + 2 * 8 * (g + 1) + 2 * m * cols
    return 2 * m * n + lens_offs + layout + lens_offs


def _dense_cases(tokens: int, table: dict, models: list[str] | None) -> list[MemCase]:
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


def _grouped_cases(tokens: int, table: dict, group_counts: tuple[int, ...],
                   models: list[str] | None) -> list[MemCase]:
    out = []
    for op, (prim, gran, bs, axis) in GROUPED_VARIANTS.items():
        if "fp4" in prim and FP4 is None:
            continue
        pass_, variant = op.split("/")
        for model, hidden in table.items():
            if models and model not in models:
                continue
            for g in group_counts:
                lens = skewed_lens(tokens, g)
                out.append(GroupedCase("quant", variant, model, pass_, tokens, hidden, torch.bfloat16,
                                       grouped_bytes(prim, gran, bs, axis, tokens, hidden, g),
                                       extra={"lens": lens},
                                       fields={"groups": g, "group_lens": list(lens), "balance": "skewed"}))
    return out


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MemCase]:
    """The dense variants per model of :data:`HIDDEN`, then the grouped ones per model of
    :data:`GROUPED_HIDDEN` and group count (``--quick``: one tiny width each, :data:`QUICK_GROUPS`)."""
    tokens = tokens or (32 if quick else DEFAULT_TOKENS)
    return (_dense_cases(tokens, QUICK_HIDDEN if quick else HIDDEN, models)
            + _grouped_cases(tokens, QUICK_GROUPED_HIDDEN if quick else GROUPED_HIDDEN, QUICK_GROUPS if quick else GROUPS,
                             models))


def _grouped(case: MemCase) -> bool:
    return "lens" in case.extra


def _spec(case: MemCase):
    """Dense: ``(primitive, granularity, block size, 2-D tiles, axis)``; grouped: ``(primitive,
    granularity, block size, axis)``."""
    key = f"{case.pass_}/{case.op}"
    return GROUPED_VARIANTS[key] if _grouped(case) else VARIANTS[key]


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


def _grouped_quant_args(case: MemCase, x: torch.Tensor, lens: torch.Tensor, offs: torch.Tensor):
    prim, gran, bs, axis = _spec(case)
    if prim == "grouped_quantize_fp4":
        return GroupedQuantizeFp4Args(x, FP4, lens, offs, axis)
    if prim == "grouped_quantize_fp4_with_trans":
        return GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    if prim == "grouped_quantize_fp8_with_trans":
        return GroupedQuantizeFp8WithTransArgs(x, FP8, gran, lens, offs, bs)
    return GroupedQuantizeFp8Args(x, FP8, gran, lens, offs, axis, bs)


def _grouped_inputs(case: MemCase, x: torch.Tensor) -> tuple:
    """``(x, lens, offs)`` (int64 lens ``[G]``, offs ``[G + 1]``); to dequantize, ``(q, scale_inv,
    offs, offs_padded)`` of the reference's quantization of the same layout."""
    lens = torch.tensor(case.extra["lens"], dtype=torch.int64, device=x.device)
    offs = torch.zeros(lens.numel() + 1, dtype=torch.int64, device=x.device)
    offs[1:] = torch.cumsum(lens, 0)
    prim, gran, bs, axis = _spec(case)
    if prim == "grouped_dequantize_fp4":
        q, s, _, offs_pad = ref.grouped_quantize_fp4(GroupedQuantizeFp4Args(x, FP4, lens, offs, axis))
        return q, s, offs, offs_pad
    if prim == "grouped_dequantize_fp8":
        q, s, _, offs_pad = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, FP8, gran, lens, offs, axis, bs))
        return q, s, offs, offs_pad
    return x, lens, offs


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    """``(x,)`` for the quantizers; ``(q, scale_inv)`` (the reference's quantization) to dequantize;
    grouped: :func:`_grouped_inputs`."""
    x = torch.randn(case.tokens, case.hidden, device=device, generator=gen).to(case.dtype)
    if _grouped(case):
        return _grouped_inputs(case, x)
    prim, gran, bs, _, axis = _spec(case)
    if prim == "dequantize_fp4":
        return quantize_fp4(QuantizeFp4Args(x, FP4, axis))
    if prim == "dequantize_fp8":
        return quantize_fp8(QuantizeFp8Args(x, FP8, gran, axis, bs))
    return (x,)


def _dequant_args(case: MemCase, inputs: tuple):
    if _grouped(case):
        prim, gran, bs, axis = _spec(case)
        q, s, offs, offs_pad = inputs
        if prim == "grouped_dequantize_fp4":
            if axis == 1:  # tight rows: the groups do not matter
                return GroupedDequantizeFp4Args(q, s, torch.bfloat16, axis)
            return GroupedDequantizeFp4Args(q, s, torch.bfloat16, axis, group_offs=offs, group_offs_padded=offs_pad,
                                            total_m=case.tokens)
        return GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, offs_pad, case.tokens, axis, bs)
    prim, gran, bs, _, axis = _spec(case)
    q, s = inputs
    if prim == "dequantize_fp4":
        return DequantizeFp4Args(q, s, torch.bfloat16, axis)
    return DequantizeFp8Args(q, s, torch.bfloat16, gran, axis, bs)


def turbo_args(case: MemCase, inputs: tuple):
    """``(primitive name, args)`` of the case."""
    prim = _spec(case)[0]
    if "dequantize" in prim:
        return prim, _dequant_args(case, inputs)
    return prim, (_grouped_quant_args(case, *inputs) if _grouped(case) else _quant_args(case, inputs[0]))


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
    """The quantization suite: rows as :func:`turbo_core.bench.suites.norm.run_bandwidth`'s (grouped
    cases: with ``groups``, ``group_lens`` and ``balance``)."""
    return run_bandwidth(sys.modules[__name__], cases(tokens, quick, models), providers=providers,
                         include_reference=include_reference,
                         warmup=warmup, iters=iters, device=device, progress=progress)
