"""Accuracy cases per op family, built from the ``turbo bench`` suites' shape tables and oracles.

Every case draws its inputs on the run's device (seeded), computes the float64 reference from
exactly those inputs (FP8: from the **dequantized** operands every backend receives, so the
comparison isolates the kernel's arithmetic), and runs one backend at a time through
``dispatcher.call`` under ``use_backend(name)``.

Families and precisions:

================  ==================================================================  ==========================
family            cases                                                               gate (``testing.numerics``)
================  ==================================================================  ==========================
gemm              model layers fwd/dgrad/wgrad, bf16, fp16, fp32                      normwise tolerance of the
                                                                                      dtype
gemm_fp8          the same layers x tensorwise/rowwise/blockwise/mx x E4M3/E5M2/      bf16 normwise tolerance vs
                  HYBRID, bf16 out                                                    the dequantized product,
                                                                                      and SNR floor of the format
                                                                                      vs the unquantized product
grouped_gemm      MoE expert layers fwd/dgrad/wgrad, balanced and skewed, bf16        bf16 normwise tolerance
grouped_gemm_fp8  the same x tensorwise/rowwise/blockwise x the three formats         as gemm_fp8
rmsnorm           fwd, fwd with residual, bwd; bf16, fp32                             tolerance of the dtype
activation        swiglu/geglu fwd and bwd (per-token probs); bf16, fp32              tolerance of the dtype
quantize          quantize_fp8 round trip (quantize, then float64 dequantize) of      SNR floor of the format
                  tensorwise/rowwise/blockwise 1x128 and 128x128/mx, E4M3 and E5M2     vs the input
attention         flash attention fwd (out) and bwd (dq, dk, dv) at the ``attention``  normwise tolerance of the
                  suite's model shapes (GQA, MLA head dims, windows, sinks); bf16,    dtype
                  fp16; batch 0, the query heads of key/value head 0
cross_entropy     fwd (loss, lse) and bwd (dlogits) over the ``cross-entropy``        fwd: fp32 tolerance (fp32
                  suite's vocabularies, bf16 logits, every 7th row ignored; at most   math on exact inputs);
                  :data:`CE_TOKENS` rows                                              bwd: bf16 tolerance
================  ==================================================================  ==========================

GEMM outputs are sums of K products: at model shapes (K up to 53248) the fp32 accumulation of any
library (cuBLAS included) and Hopper's reduced-precision FP8 accumulation put absolute errors of
order ``eps * max|ref|`` on elements near zero, which the elementwise tolerance of the small-shape
tests rejects for every backend alike on a GPU. Their gate is the
tests' normwise form (``assert_close_normwise``: ``atol`` times ``max(1, max|ref|)``), the one the
attention tests use for the same reason.

Each family's builder imports its benchmark suite when it runs: the suites import the ops (and
torch.compile's machinery with them), which building the ``turbo accuracy`` parser does not need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.low_precision import ScalingGranularity, ScalingRecipe, as_format, fp8_dtype_for
from turbo_core.testing.numerics import Gate, normwise_gate, snr_gate, tolerance_gate

__all__ = ["DEFAULT_MODELS", "FAMILIES", "FORMATS", "AccCase", "Built", "build_cases"]

FAMILIES = ("gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8", "rmsnorm", "activation", "quantize", "attention",
            "cross_entropy")
FORMATS = ("E4M3", "E5M2", "HYBRID")
#: Full-size runs without ``--models``: one dense and one MoE model (float64 references of every
#: layer of the 405B model take minutes each). ``--models all`` takes every model of the tables.
DEFAULT_MODELS = ("llama3.1-8b", "qwen3-30b-a3b")
DEFAULT_TOKENS = 4096
QUICK_TOKENS = 32
#: Rows of a cross-entropy case at most (its float64 softmax is rows x vocabulary x 8 bytes).
CE_TOKENS = 1024
IGNORE_INDEX = -100
_DT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass
class Built:
    """A case's inputs made: float64 ``reference`` outputs, ``run(backend) -> outputs`` and, for FP8
    GEMMs, the float64 ``ideal`` outputs of the unquantized inputs (for the end-to-end SNR gate)."""

    reference: list[torch.Tensor]
    run: Callable[[str], list[torch.Tensor]]
    ideal: list[torch.Tensor] | None = None


@dataclass
class AccCase:
    family: str
    primitive: str
    precision: str  # "bf16", "fp8 rowwise E4M3", ...
    shape: str
    outputs: tuple[str, ...]
    gate: Gate
    build: Callable[[str], Built]  # device -> Built
    granularity: str | None = None
    format: str | None = None
    e2e_gate: Gate | None = None  # FP8 GEMMs: the SNR floor against ``Built.ideal``


def _gen(device: str, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _pinned(backend: str, primitive: str, args):
    with use_backend(backend):
        return call(primitive, args)


# ---- dense and grouped GEMM -------------------------------------------------------------------------


def _gemm(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import gemm as suite

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for c in suite.cases(tokens, quick, models):
            def build(device, c=c, dtype=dtype):
                a, b, ta, tb = suite.make_inputs(c, device, dtype, _gen(device))
                return Built([suite.reference(a, b, ta, tb)],
                             lambda backend: [_pinned(backend, "gemm", GemmArgs(a, b, ta, tb))])

            yield AccCase("gemm", "gemm", _DT[dtype], c.label, ("out",), normwise_gate(dtype), build)


def _gemm_fp8(tokens, quick, models, formats) -> Iterator[AccCase]:
    from turbo_core.bench.suites import gemm_fp8 as suite

    for fmt in formats:
        for c in suite.cases(tokens, quick, models, suite.default_granularities(), as_format(fmt)):
            def build(device, c=c):
                inputs = suite.make_inputs(c, device, _gen(device))
                args = suite.turbo_args(c.granularity, inputs["q"])
                return Built([suite.reference(c, inputs, "fp8")],
                             lambda backend: [_pinned(backend, "gemm_fp8", args)],
                             ideal=[suite.reference(c, inputs, "bf16")])

            gran = suite.SHORT[c.granularity]
            yield AccCase("gemm_fp8", "gemm_fp8", f"fp8 {gran} {fmt}", c.label, ("out",),
                          normwise_gate(torch.bfloat16), build, granularity=gran, format=fmt,
                          e2e_gate=snr_gate(fmt))


def _grouped_gemm(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import grouped_gemm as suite

    for c in suite.cases(tokens, quick, models):
        prim = suite.primitive_of(c.pass_)

        def build(device, c=c, prim=prim):
            p, q, lens, offs, _ = suite.make_inputs(c, device, torch.bfloat16, _gen(device))
            args = suite.turbo_args(c.pass_, p, q, lens, offs)
            return Built([suite.reference(c, p, q)], lambda backend: [_pinned(backend, prim, args)])

        yield AccCase("grouped_gemm", prim, "bf16", c.label, ("out",), normwise_gate(torch.bfloat16), build)


def _grouped_gemm_fp8(tokens, quick, models, formats) -> Iterator[AccCase]:
    from turbo_core.bench.suites import grouped_gemm_fp8 as suite

    grans = (ScalingGranularity.TENSORWISE, ScalingGranularity.ROWWISE, ScalingGranularity.BLOCKWISE)
    for fmt in formats:
        for c in suite.cases(tokens, quick, models, grans, as_format(fmt)):
            prim = suite.primitive_of(c.grouped.pass_)

            def build(device, c=c, prim=prim):
                inputs = suite.make_inputs(c, device, _gen(device))
                args = suite.turbo_args(c, inputs)
                return Built([suite.reference(c, inputs, "fp8")], lambda backend: [_pinned(backend, prim, args)],
                             ideal=[suite.reference(c, inputs, "bf16")])

            gran = suite.SHORT[c.granularity]
            yield AccCase("grouped_gemm_fp8", prim, f"fp8 {gran} {fmt}", c.label, ("out",),
                          normwise_gate(torch.bfloat16), build, granularity=gran, format=fmt,
                          e2e_gate=snr_gate(fmt))


# ---- memory-bound ops ---------------------------------------------------------------------------------


def _memory_bound(family, suite, cases, prim_of, outputs_of) -> Iterator[AccCase]:
    for dtype in (torch.bfloat16, torch.float32):
        for c in cases:
            c = dataclasses.replace(c, dtype=dtype)

            def build(device, c=c):
                inputs = suite.make_inputs(c, device, _gen(device))
                return Built(suite.reference(c, inputs),
                             lambda backend: list(suite.turbo_provider(c, backend)(inputs)()))

            yield AccCase(family, prim_of(c), _DT[dtype], c.label, outputs_of(c), tolerance_gate(dtype), build)


def _rmsnorm(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import norm as suite

    def outputs(c):
        if c.pass_ == "bwd":
            return ("dx", "dgamma")
        return ("y", "x_plus_r") if c.op == "rmsnorm_residual" else ("y",)

    yield from _memory_bound("rmsnorm", suite, suite.cases(tokens, quick, models),
                             lambda c: f"rmsnorm_{c.pass_}", outputs)


def _activation(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import activation as suite

    yield from _memory_bound("activation", suite, suite.cases(tokens, quick, models),
                             lambda c: f"{c.op}_{c.pass_}",
                             lambda c: ("out",) if c.pass_ == "fwd" else ("grad_x", "grad_probs"))


#: name -> (granularity, block size, axis, 2-D tiles): the quantize_fp8 variants of ``turbo bench quant``.
QUANT_VARIANTS = {
    "tensorwise": ("TENSORWISE", None, None, False),
    "rowwise": ("ROWWISE", None, -1, False),
    "blockwise-1x128": ("BLOCKWISE", 128, -1, False),
    "blockwise-128x128": ("BLOCKWISE", 128, None, True),
    "mx": ("MX_BLOCKWISE", 32, -1, False),
}


def _quantize(tokens, quick, models, formats) -> Iterator[AccCase]:
    from turbo_core.bench.suites import quant as suite
    from turbo_core.bench.suites.gemm_fp8 import dequant64

    table = suite.QUICK_HIDDEN if quick else suite.HIDDEN
    variants = {k: v for k, v in QUANT_VARIANTS.items() if v[0] != "MX_BLOCKWISE" or hasattr(torch, "float8_e8m0fnu")}
    for fmt in (f for f in formats if f != "HYBRID"):  # HYBRID is a pairing of the other two
        for name, (gran, bs, axis, two_d) in variants.items():
            for model, hidden in table.items():
                if models and model not in models:
                    continue

                def build(device, hidden=hidden, gran=gran, bs=bs, axis=axis, two_d=two_d, fmt=fmt):
                    x = torch.randn(tokens, hidden, device=device, generator=_gen(device)).to(torch.bfloat16)
                    args = QuantizeFp8Args(x, fp8_dtype_for(fmt, torch.device(device)), ScalingGranularity(gran),
                                           axis, bs, ScalingRecipe(use_2d_block=two_d))

                    def run(backend):
                        q, s = _pinned(backend, "quantize_fp8", args)
                        return [dequant64(q, s, bs or 1)[:tokens, :hidden]]

                    return Built([x.double()], run)

                yield AccCase("quantize", "quantize_fp8", f"fp8 {name} {fmt}", f"{model} {tokens}x{hidden}",
                              ("round_trip",), snr_gate(fmt), build, granularity=name, format=fmt)


# ---- attention and the loss ---------------------------------------------------------------------------


def _attention(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import attention as suite

    for dtype in (torch.bfloat16, torch.float16):
        for c in suite.cases(tokens, quick, models):
            def build(device, c=c, dtype=dtype):
                inputs = suite.make_inputs(c, device, dtype, _gen(device))
                return Built(suite.reference_slice(c, inputs),
                             lambda backend: suite.turbo_provider(c, backend)(inputs)().checked())

            outputs = ("out",) if c.pass_ == "fwd" else ("dq", "dk", "dv")
            yield AccCase("attention", f"attention_{c.pass_}", _DT[dtype], c.label, outputs, normwise_gate(dtype),
                          build)


def _ce_inputs(rows: int, vocab: int, device: str):
    gen = _gen(device)
    logits = (2.0 * torch.randn(rows, vocab, device=device, generator=gen)).to(torch.bfloat16)
    target = torch.randint(0, vocab, (rows,), device=device, generator=gen)
    target[::7] = IGNORE_INDEX
    dloss = torch.rand(rows, device=device, generator=gen)
    return logits, target, dloss


def _cross_entropy(tokens, quick, models) -> Iterator[AccCase]:
    from turbo_core.bench.suites import cross_entropy as suite

    rows = min(tokens, CE_TOKENS)
    for model, vocab in (suite.QUICK_VOCAB if quick else suite.VOCAB).items():
        if models and model not in models:
            continue
        for pass_ in ("fwd", "bwd"):
            def build(device, vocab=vocab, pass_=pass_):
                logits, target, dloss = _ce_inputs(rows, vocab, device)
                loss, lse, grad = suite.reference(logits, target, dloss, ignore_index=IGNORE_INDEX)
                fwd = CrossEntropyFwdArgs(logits, target, IGNORE_INDEX, 0.0)
                if pass_ == "fwd":
                    return Built([loss, lse], lambda backend: list(_pinned(backend, "cross_entropy_fwd", fwd)))

                def run(backend):
                    _, lse32 = _pinned(backend, "cross_entropy_fwd", fwd)
                    bwd = CrossEntropyBwdArgs(dloss, logits, target, lse32, IGNORE_INDEX, 0.0)
                    return [_pinned(backend, "cross_entropy_bwd", bwd)]

                return Built([grad], run)

            outputs = ("loss", "lse") if pass_ == "fwd" else ("dlogits",)
            gate = tolerance_gate(torch.float32 if pass_ == "fwd" else torch.bfloat16)
            yield AccCase("cross_entropy", f"cross_entropy_{pass_}", "bf16 logits", f"{model} {rows}x{vocab}",
                          outputs, gate, build)


def build_cases(*, quick: bool, families=None, models=None, tokens: int | None = None,
                formats=None) -> list[AccCase]:
    """The cases of ``families`` (default all), in :data:`FAMILIES` order. ``models``: None gives
    :data:`DEFAULT_MODELS` (``quick``: the tiny tables), ``["all"]`` every model of the tables."""
    families = list(families or FAMILIES)
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"families: unknown {', '.join(bad)}; known: {', '.join(FAMILIES)}")
    formats = list(formats or FORMATS)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"formats: unknown {', '.join(bad)}; known: {', '.join(FORMATS)}")
    if quick or (models and "all" in models):
        models = None
    elif not models:
        models = list(DEFAULT_MODELS)
    tokens = tokens or (QUICK_TOKENS if quick else DEFAULT_TOKENS)
    makers = {
        "gemm": lambda: _gemm(tokens, quick, models),
        "gemm_fp8": lambda: _gemm_fp8(tokens, quick, models, formats),
        "grouped_gemm": lambda: _grouped_gemm(tokens, quick, models),
        "grouped_gemm_fp8": lambda: _grouped_gemm_fp8(tokens, quick, models, formats),
        "rmsnorm": lambda: _rmsnorm(tokens, quick, models),
        "activation": lambda: _activation(tokens, quick, models),
        "quantize": lambda: _quantize(tokens, quick, models, formats),
        "attention": lambda: _attention(tokens, quick, models),
        "cross_entropy": lambda: _cross_entropy(tokens, quick, models),
    }
    return [case for fam in FAMILIES if fam in families for case in makers[fam]()]
