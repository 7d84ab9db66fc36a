"""The fused MoE layer cases of ``turbo bench moe``: ``fused_mega_moe`` (one process, bf16) beside the
plain PyTorch loop over experts a user would write, and ``torch.compile`` of that loop.

Cases: one per model (:data:`MODELS`: hidden ``H``, expert inner size ``I``, experts ``E`` on the
GPU, top-``K``) at :data:`TOKENS` tokens (``--tokens``: that count); routing: softmax top-K of random
logits (K distinct experts per token, balanced on average), fp32 weights. Two passes: ``fwd`` (the
forward with autograd recording, as in training) and ``fwd+bwd`` (the forward, then the gradients
of x, topk_weights, w1 and w2 for a fixed ``dy``).

Providers: ``torch``, the eager loop (:func:`turbo_core.testing.mega_moe_reference.mega_moe_reference`
in bf16: per expert a ``nonzero`` (a host sync), ``index_select``, two matmuls, SwiGLU and
``index_add``, as Hugging Face's Mixtral and Qwen MoE blocks); ``torch.compile`` of the same function
(default options, GPUs only: on the CPU its build would dominate a ``--quick`` run; it breaks the
graph at each expert's ``nonzero``); ``turbo:<B>`` for every available backend with a
``grouped_gemm`` kernel: ``fused_mega_moe`` with ``grouped_gemm`` / ``grouped_gemm_variable_k``
pinned to ``B``, its other primitives as selection picks them (the reference TORCH only with
``--include-reference``).

Timing: the wall clock per call (:func:`turbo_core.timing.measure_batched`, one call per batch,
``clock="wall"``): host cost and the loop's syncs included, the time an eager training step pays.
Scored in TFLOP/s: ``fwd`` ``6 P H I`` with ``P = T K`` routed (token, expert) pairs (the L1 GEMM
``4 P H I``, the L2 ``2 P H I``), ``fwd+bwd`` three times that. Accuracy: ``max_rel_err`` against
the float64 loop on the same device (``fwd``: the output; ``fwd+bwd``: the largest over the output
and the four gradients). Rows: the suite's keys plus ``op = "fused_mega_moe"``, ``experts``,
``topk``, ``inter``, ``mode = "fused layer"`` and ``timing = "wall clock"`` (their own tables in the
report), ``calls``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from turbo_core import timing
from turbo_core.bench.runner import available_backends, max_rel_err, peak_tflops
from turbo_core.bench.suites.norm import compile_skip_reason
from turbo_core.dispatch import decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs
from turbo_core.ops import fused_mega_moe, grouped_gemm_compute_offs
from turbo_core.platform import platform_of
from turbo_core.testing.mega_moe_reference import mega_moe_reference

__all__ = ["MODELS", "MegaCase", "cases", "flops", "run"]


@dataclass(frozen=True)
class MegaModel:
    """A MoE layer: hidden ``H``, expert inner size ``I``, experts ``E`` on the device, top-``K``."""

    hidden: int
    inter: int
    experts: int
    topk: int


#: Hugging Face configs: Mixtral-8x7B; DeepSeek-V2-Lite's routed experts; one expert-parallel rank
#: of DeepSeek-V3 (32 of its 256 experts, every routed slot local).
MODELS = {
    "mixtral-8x7b": MegaModel(4096, 14336, 8, 2),
    "deepseek-v2-lite": MegaModel(2048, 1408, 64, 6),
    "deepseek-v3-ep8-rank": MegaModel(7168, 2048, 32, 8),
}
QUICK_MODELS = {"tiny-layer": MegaModel(64, 32, 4, 2)}
TOKENS = (4096,)
QUICK_TOKENS = (24,)
PASSES = ("fwd", "fwd+bwd")
MODE = "fused layer"
WALL = "wall clock"
DTYPE = torch.bfloat16


@dataclass(frozen=True)
class MegaCase:
    model: str
    m: MegaModel
    tokens: int
    pass_: str

    @property
    def label(self) -> str:
        return f"fused_mega_moe/{self.pass_} {self.model} {self.tokens}x{self.m.hidden}"


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MegaCase]:
    table = QUICK_MODELS if quick else MODELS
    counts = (tokens,) if tokens else (QUICK_TOKENS if quick else TOKENS)
    return [MegaCase(name, m, t, p) for t in counts for name, m in table.items() if not models or name in models
            for p in PASSES]


def flops(case: MegaCase) -> int:
    """``6 P H I`` forward (``P = T K``), three times that forward and backward."""
    m = case.m
    fwd = 6 * case.tokens * m.topk * m.hidden * m.inter
    return fwd if case.pass_ == "fwd" else 3 * fwd


def make_inputs(case: MegaCase, device: str, gen: torch.Generator) -> tuple:
    """float64 ``(x, topk_idx, topk_weights, w1, w2, dy)`` on ``device``."""
    m, t = case.m, case.tokens
    logits = torch.randn((t, m.experts), generator=gen, device=device)
    w, idx = torch.topk(logits.softmax(-1), m.topk, dim=-1)
    f64 = torch.float64

    def rand(*shape, scale=1.0):
        return torch.randn(shape, generator=gen, device=device, dtype=f64) * scale

    return (rand(t, m.hidden), idx, w.double(), rand(m.experts, 2 * m.inter, m.hidden, scale=m.hidden ** -0.5),
            rand(m.experts, m.hidden, m.inter, scale=m.inter ** -0.5), rand(t, m.hidden))


def _step(fn: Callable, inputs: tuple, dtype: torch.dtype, backward: bool) -> Callable[[], list[torch.Tensor]]:
    """A zero-argument call of ``fn(x, idx, w, w1, w2)`` on leaves of ``dtype`` (weights fp32 in
    float64's place): the output, and with ``backward`` the four gradients for ``dy``."""
    x, idx, w, w1, w2, dy = inputs
    leaves = [x.to(dtype), w.to(torch.float64 if dtype == torch.float64 else torch.float32), w1.to(dtype),
              w2.to(dtype)]
    for t in leaves:
        t.requires_grad_()
    dy = dy.to(dtype)

    def call() -> list[torch.Tensor]:
        y = fn(leaves[0], idx, leaves[1], leaves[2], leaves[3])
        if not backward:
            return [y.detach()]
        return [y.detach(), *torch.autograd.grad(y, leaves, dy)]

    return call


def _turbo(backend: str) -> Callable:
    def fn(*args):
        with use_backend(backend, primitives=("grouped_gemm", "grouped_gemm_variable_k")):
            return fused_mega_moe(None, *args)

    return fn


def _declined(backend: str, inputs: tuple) -> str | None:
    """Why ``backend``'s grouped GEMM declines the case's L1 GEMM (None: it takes it)."""
    x, idx, _, w1, _, _ = inputs
    a = torch.empty((idx.numel(), x.shape[1]), dtype=DTYPE, device=x.device)
    lens = torch.zeros((w1.shape[0],), dtype=torch.int64, device=x.device)
    args = GroupedGemmArgs(a, torch.empty(w1.shape, dtype=DTYPE, device=x.device), lens,
                           grouped_gemm_compute_offs(lens), True, None, "static")
    return decline_reason(get_primitive("grouped_gemm"), backend, args, platform_of(x.device))


def _row(case: MegaCase, name: str, role: str) -> dict:
    m = case.m
    return {"suite": "moe", "case": case.label, "op": "fused_mega_moe", "model": case.model, "pass": case.pass_,
            "tokens": case.tokens, "hidden": m.hidden, "dtype": "bfloat16", "experts": m.experts, "topk": m.topk,
            "inter": m.inter, "mode": MODE, "timing": WALL, "provider": name, "role": role, "baseline": "torch",
            "calls": 1}


def run(all_cases: list[MegaCase], *, providers: list[str] | None, include_reference: bool, warmup: int, iters: int,
        device: str, progress=None) -> list[dict]:
    """Every provider on every case (module docstring): rows with ``status``, and when ok
    ``median_ms`` / ``p10_ms`` / ``p90_ms`` (wall clock per call), ``tflops``, ``ratio`` (torch's
    time / this one), ``peak_fraction`` (of the bf16 datasheet peak, on a known GPU) and
    ``max_rel_err``."""
    no_compile = compile_skip_reason(device)
    backends = available_backends("grouped_gemm", include_reference=include_reference)
    peak = peak_tflops(torch.cuda.get_device_name()) if device == "cuda" else None
    gen = torch.Generator(device=device).manual_seed(0)
    task = progress.add_task("moe fused layer", total=len(all_cases)) if progress and all_cases else None
    rows: list[dict] = []
    for case in all_cases:
        inputs = make_inputs(case, device, gen)
        backward = case.pass_ != "fwd"
        table: list[tuple[str, str, Callable | None, str | None]] = [
            ("torch", "baseline", mega_moe_reference, None),
            ("torch.compile", "reference", None, f"skipped: {no_compile}" if no_compile else None)]
        table += [(f"turbo:{b}", "turbo", _turbo(b), None) for b in backends]
        if providers:
            table = [p for p in table if p[0] in providers]
        refs = _step(mega_moe_reference, inputs, torch.float64, backward)()
        base_ms = None
        for name, role, fn, status in table:
            row = _row(case, name, role)
            if status is None and name.startswith("turbo:"):
                reason = _declined(name.split(":", 1)[1], inputs)
                status = f"declined: {reason}" if reason else None
            if status is not None:
                rows.append({**row, "status": status})
                continue
            try:
                if name == "torch.compile":
                    torch._dynamo.reset()
                    fn = torch.compile(mega_moe_reference)
                call = _step(fn, inputs, DTYPE, backward)
                outs = call()
                err = max(max_rel_err(o, r) for o, r in zip(outs, refs, strict=True))
                t = timing.measure_batched(call, device=device, warmup=warmup, iters=iters, calls=1, clock="wall")
            except Exception as exc:  # one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                continue
            if name == "torch":
                base_ms = t.median_ms
            tflops = flops(case) / t.median_ms / 1e9
            rows.append({**row, "status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "tflops": tflops, "ratio": base_ms / t.median_ms if base_ms else None,
                         "peak_fraction": tflops / peak if peak else None, "max_rel_err": err})
        del inputs, refs
        if progress:
            progress.advance(task)
    return rows
