"""Host time per eager call (``turbo bench host``): turbo's public op beside the PyTorch call a user
would write instead, at tiny shapes where the device work is negligible, so the time is what the
host pays per call in an eager training step (Python, argument checks, backend selection, launches).

Clock: the wall clock per call (:func:`turbo_core.timing.measure_batched`, ``clock="wall"``): each of
``--iters`` batches enqueues :data:`CALLS` calls back to back (:data:`QUICK_CALLS` with ``--quick``),
then synchronizes; the batch's time / its calls. Runs on the CPU as well (``--quick``).

Cases (bf16; ``--tokens`` rows, default :data:`TOKENS`; hidden :data:`HIDDEN`):

================  =============================================  ==============================================
op                turbo (``turbo:auto``)                          torch (the baseline)
================  =============================================  ==============================================
gemm              ``ops.gemm(x, w, trans_b=True)``               ``torch.matmul(x, w.t())``
gemm_fp8          ``ops.gemm_fp8(x, w, trans_b=True)``,          tensorwise: amax, scale, cast of each
                  TENSORWISE E4M3, quantization included         operand to E4M3, ``torch._scaled_mm``
flash_attn_func   ``ops.flash_attn_func(q, k, v, causal=True)``  ``F.scaled_dot_product_attention`` on
                                                                 ``[b, h, s, d]`` views, ``is_causal``
grouped_gemm      ``ops.grouped_gemm(x, w, lens, offs)``         ``torch._grouped_mm(x, w, offs=ends)``
rmsnorm           ``ops.rmsnorm(x, gamma)``                      ``F.rms_norm(x, (H,), gamma)``
swiglu            ``ops.swiglu_with_probs(x, probs)``            ``silu(gate) * up * probs`` (eager ops)
linear_fp8        ``Float8Linear`` forward + backward            ``torch.nn.Linear`` forward + backward
================  =============================================  ==============================================

``turbo:auto`` is the dispatcher's own choice for every primitive the op calls (no pin: what a
user's call gets); the row's ``kernels`` names the ``primitive:backend`` pairs that served it.
Rows: the case fields, ``torch_call``, ``us_per_call`` (the median in microseconds), the usual
``median_ms``/``p10_ms``/``p90_ms``, ``ratio`` (torch's time / this time) and ``max_rel_err`` of
turbo's output against torch's on the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.dispatch import stats
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.modules import Float8Linear
from turbo_core.ops import flash_attn_func, gemm, gemm_fp8, grouped_gemm, rmsnorm, swiglu_with_probs

__all__ = ["CALLS", "CASES", "HIDDEN", "TOKENS", "print_table", "run"]

#: Rows (tokens) of every case, unless ``--tokens``.
TOKENS = 16
#: Width of every case (heads x head dim for attention; the GLU half width; the GEMMs' N and K).
HIDDEN = 128
#: Calls per timed batch (``--quick``: :data:`QUICK_CALLS`).
CALLS = 100
QUICK_CALLS = 10
GROUPS = 4
HEAD_DIM = 64
_E4M3_MAX = 448.0


@dataclass(frozen=True)
class HostCase:
    """``prepare(tokens, device, generator) -> (torch_fn, turbo_fn)``: zero-argument calls that
    each return the output compared between them."""

    op: str
    pass_: str
    torch_call: str
    prepare: Callable[[int, str, torch.Generator], tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]]


def _randn(gen: torch.Generator, device: str, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=device, generator=gen).to(torch.bfloat16)


def _gemm(t: int, device: str, gen: torch.Generator):
    x, w = _randn(gen, device, t, HIDDEN), _randn(gen, device, HIDDEN, HIDDEN)
    return (lambda: torch.matmul(x, w.t())), (lambda: gemm(x, w, trans_b=True))


def _to_e4m3(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaling as a PyTorch user writes it: ``(fp8 tensor, fp32 scale_inv)``."""
    scale = _E4M3_MAX / t.abs().amax().float().clamp(min=1e-12)
    return (t.float() * scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn), scale.reciprocal()


def _gemm_fp8(t: int, device: str, gen: torch.Generator):
    x, w = _randn(gen, device, t, HIDDEN), _randn(gen, device, HIDDEN, HIDDEN)

    def torch_fn():
        qx, sx = _to_e4m3(x)
        qw, sw = _to_e4m3(w)
        return torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16)

    return torch_fn, (lambda: gemm_fp8(x, w, trans_b=True, out_dtype=torch.bfloat16))


def _attention(t: int, device: str, gen: torch.Generator):
    heads = HIDDEN // HEAD_DIM
    q, k, v = (_randn(gen, device, 1, t, heads, HEAD_DIM) for _ in range(3))

    def torch_fn():
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return out.transpose(1, 2)

    return torch_fn, (lambda: flash_attn_func(q, k, v, causal=True))


def _grouped(t: int, device: str, gen: torch.Generator):
    rows = GROUPS * max(1, t // GROUPS)
    x, w = _randn(gen, device, rows, HIDDEN), _randn(gen, device, GROUPS, HIDDEN, HIDDEN)
    lens = torch.full((GROUPS,), rows // GROUPS, dtype=torch.int64, device=device)
    offs = torch.arange(GROUPS + 1, device=device, dtype=torch.int64) * (rows // GROUPS)
    ends = offs[1:].to(torch.int32)
    return (lambda: torch._grouped_mm(x, w, offs=ends)), (lambda: grouped_gemm(x, w, lens, offs))


def _rmsnorm(t: int, device: str, gen: torch.Generator):
    x, g = _randn(gen, device, t, HIDDEN), _randn(gen, device, HIDDEN)
    return (lambda: F.rms_norm(x, (HIDDEN,), g, 1e-6)), (lambda: rmsnorm(x, g, 1e-6))


def _swiglu(t: int, device: str, gen: torch.Generator):
    x = _randn(gen, device, t, 2 * HIDDEN)
    probs = torch.rand(t, device=device, generator=gen)

    def torch_fn():
        gate, up = x.chunk(2, dim=-1)
        return (F.silu(gate.float()) * up.float() * probs[:, None]).to(x.dtype)

    return torch_fn, (lambda: swiglu_with_probs(x, probs))


def _linear_step(t: int, device: str, gen: torch.Generator):
    ref = torch.nn.Linear(HIDDEN, HIDDEN, device=device, dtype=torch.bfloat16)
    with torch.no_grad():  # seeded weights (nn.Linear's own init draws from the global generator)
        ref.weight.copy_(_randn(gen, device, HIDDEN, HIDDEN) * HIDDEN**-0.5)
        ref.bias.copy_(_randn(gen, device, HIDDEN) * 0.1)
    fp8 = Float8Linear.from_float(ref, Float8QuantConfig(), inplace=False)
    x = _randn(gen, device, t, HIDDEN).requires_grad_(True)
    dy = _randn(gen, device, t, HIDDEN)

    def step(mod: torch.nn.Module) -> Callable[[], torch.Tensor]:
        def once():
            y = mod(x)
            y.backward(dy)
            mod.weight.grad = mod.bias.grad = x.grad = None  # as zero_grad(set_to_none=True) between steps
            return y.detach()

        return once

    return step(ref), step(fp8)


#: Every case, in table order.
CASES = (
    HostCase("gemm", "call", "torch.matmul", _gemm),
    HostCase("gemm_fp8", "call", "tensorwise quantization + torch._scaled_mm", _gemm_fp8),
    HostCase("flash_attn_func", "call", "F.scaled_dot_product_attention", _attention),
    HostCase("grouped_gemm", "call", "torch._grouped_mm", _grouped),
    HostCase("rmsnorm", "call", "F.rms_norm", _rmsnorm),
    HostCase("swiglu", "call", "silu(gate) * up * probs", _swiglu),
    HostCase("linear_fp8", "fwd+bwd", "torch.nn.Linear fwd+bwd", _linear_step),
)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.double().abs().max().item() or 1.0
    return (out.double() - ref.double()).abs().max().item() / scale


def _kernels(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, str]:
    """One call of ``fn``: its output and the ``primitive:backend`` pairs the dispatcher served."""
    before = stats()
    out = fn()
    after = stats()
    served = sorted({f"{prim}:{backend}" for (prim, backend, how), n in after.items()
                     if n > before.get((prim, backend, how), 0)})
    return out, ", ".join(served)


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every case (``models`` and ``include_reference`` are unused: the cases have no model, and
    ``turbo:auto`` is whatever the dispatcher selects)."""
    tokens = tokens or TOKENS
    calls = QUICK_CALLS if quick else CALLS
    gen = torch.Generator(device=device).manual_seed(0)
    task = progress.add_task("host", total=len(CASES)) if progress else None
    rows: list[dict] = []
    for case in CASES:
        base = {"suite": "host", "case": f"{case.op} {case.pass_} T{tokens}", "op": case.op, "pass": case.pass_,
                "tokens": tokens, "hidden": HIDDEN, "dtype": "bfloat16", "torch_call": case.torch_call,
                "baseline": "torch", "calls": calls}
        try:
            torch_fn, turbo_fn = case.prepare(tokens, device, gen)
        except Exception as exc:  # noqa: BLE001 - the rows say why
            rows += [{**base, "provider": p, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}
                     for p in ("torch", "turbo:auto")]
            continue
        ref = None
        base_ms = None
        for name, fn in (("torch", torch_fn), ("turbo:auto", turbo_fn)):
            if providers and name not in providers:
                continue
            row = {**base, "provider": name, "role": "baseline" if name == "torch" else "turbo"}
            try:
                out, served = _kernels(fn)
                t = timing.measure_batched(fn, device=device, warmup=warmup, iters=iters, calls=calls, clock="wall")
            except Exception as exc:  # noqa: BLE001 - one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                continue
            if name == "torch":
                ref, base_ms = out, t.median_ms
            else:
                row["kernels"] = served
            rows.append({**row, "status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "us_per_call": t.median_ms * 1e3, "ratio": base_ms / t.median_ms if base_ms else None,
                         "max_rel_err": _rel_err(out, ref) if ref is not None else None})
        if progress:
            progress.advance(task)
    return rows


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    return f"{r['us_per_call']:.1f} us{ratio}"


def print_table(rows: list[dict], console) -> None:
    """Per case: microseconds per call, the ratio to torch (above 1: turbo costs the host less)."""
    print_tables(rows, console, title="turbo bench host: us per eager call (ratio to torch)", cell=_cell)
