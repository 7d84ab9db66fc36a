"""Host time per eager call (``turbo bench host``): turbo's public op beside the PyTorch call a user
would write instead, at tiny shapes where the device work is negligible, so the time is what the
host pays per call in an eager training step (Python, argument checks, backend selection, launches).

Clock: the wall clock per call (:func:`turbo_core.timing.measure_interleaved`, ``clock="wall"``): each
of ``--iters`` batches enqueues :data:`CALLS` calls back to back (:data:`QUICK_CALLS` with ``--quick``),
then synchronizes; the batch's time / its calls. Every timed call of a case (torch's, turbo's, the
forward-only and replay calls below) takes its batches in turn, round after round, so a slow spell of
the host falls on them alike and the ratios compare like with like. Runs on the CPU as well
(``--quick``).

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
rmsnorm_residual  ``ops.rmsnorm_residual(x, r, gamma)``          ``s = x + r; F.rms_norm(s, (H,), gamma)``
swiglu            ``ops.swiglu_with_probs(x, probs)``            ``silu(gate) * up * probs`` (eager ops)
quantize_fp8      ``ops.quantize_fp8(x, e4m3, ROWWISE)``         amax per row, scale, cast (eager ops)
moe_routing       ``fused_group_topk_routing_with_aux_score``    softmax, ``topk``, scatter into a map
                  (softmax, top-2 of 8)
moe_permute       ``moe_permute`` + ``moe_unpermute`` (top-2     ``argsort`` of the expert ids, gather,
                  of 8 experts)                                  ``index_add_`` back
linear            turbo ``Linear`` forward + backward            ``torch.nn.Linear`` forward + backward
linear_fp8        ``Float8Linear`` forward + backward            ``torch.nn.Linear`` forward + backward
================  =============================================  ==============================================

Each ``linear`` step first writes the weight in place (``mul_(1.0)`` under ``no_grad``, one small kernel
on both sides), as an optimizer step does: a changed weight is quantized again, so the FP8 step pays
the weight's quantization once a step, as in training. Both sides of a step case are also timed as
the same weight write and forward alone (``us_forward``; the output and its graph dropped unused),
so ``us_per_call - us_forward`` is what the backward costs the host.

``turbo:auto`` is the dispatcher's own choice for every primitive the op calls (no pin: what a
user's call gets); the row's ``kernels`` names the ``primitive:backend`` pairs that served it.
Rows: the case fields, ``torch_call``, ``us_per_call`` (the median in microseconds), the usual
``median_ms``/``p10_ms``/``p90_ms``, ``ratio`` (torch's time / this time) and ``max_rel_err`` of
turbo's output against torch's on the same inputs.

Where a turbo call's microseconds go: one call is recorded (``turbo_core.dispatch.recording``), and
its primitive calls are replayed in two more timed loops with the same arguments:

* ``us_dispatch``: each ``dispatch.call(primitive, args)``: validation, the selection cache and the
  backend's launcher;
* ``us_kernels``: each selected ``kernel.run(args)`` alone: the backend's launcher (its output
  allocations and kernel launches).

So ``us_per_call - us_dispatch`` is the op layer (argument checks, reshapes, autograd), ``us_dispatch
- us_kernels`` the dispatcher, and ``us_kernels`` the backends; ``primitive_calls`` counts the
primitive calls of one op call.

``--profile-top N`` goes one level further: :data:`CALLS` more turbo calls run under ``cProfile``, and
the row's ``host_profile`` lists the N functions with the most own time (``[function, us per call]``,
``function`` as ``file:line(name)`` relative to its package), and ``host_profile_cumulative`` the N
with the most time including their callees (the call's own entry point left out), which says which
layer of the call holds the time. The profiler adds its own cost to every Python call, so these
figures rank the functions; they do not add up to ``us_per_call``.
"""

from __future__ import annotations

import cProfile
import os
import pstats
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from rich.table import Table

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.dispatch import call, stats
from turbo_core.dispatch.dispatcher import recording
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.modules import Float8Linear, Linear
from turbo_core.ops import (
    flash_attn_func,
    fused_group_topk_routing_with_aux_score,
    gemm,
    gemm_fp8,
    grouped_gemm,
    moe_permute,
    moe_unpermute,
    quantize_fp8,
    rmsnorm,
    rmsnorm_residual,
    swiglu_with_probs,
)

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
#: Experts and top-k of the MoE cases.
EXPERTS = 8
TOPK = 2
_E4M3_MAX = 448.0


@dataclass(frozen=True)
class HostCase:
    """``prepare(tokens, device, generator) -> (torch_fn, turbo_fn)``: zero-argument calls that
    each return the output compared between them; a step case returns ``(torch_fn, turbo_fn,
    (torch_forward, turbo_forward))``, its forward-only calls."""

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


def _rmsnorm_residual(t: int, device: str, gen: torch.Generator):
    x, r, g = _randn(gen, device, t, HIDDEN), _randn(gen, device, t, HIDDEN), _randn(gen, device, HIDDEN)
    return (lambda: F.rms_norm(x + r, (HIDDEN,), g, 1e-6)), (lambda: rmsnorm_residual(x, r, g, 1e-6)[0])


def _quantize(t: int, device: str, gen: torch.Generator):
    x = _randn(gen, device, t, HIDDEN)

    def torch_fn():
        scale = _E4M3_MAX / x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
        q = (x.float() * scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn)
        return q.float() / scale

    def turbo_fn():
        q, scale_inv = quantize_fp8(x, torch.float8_e4m3fn, ScalingGranularity.ROWWISE, axis=-1)
        return q.float() * scale_inv.reshape(-1, 1)

    return torch_fn, turbo_fn


def _routing(t: int, device: str, gen: torch.Generator):
    logits = torch.randn(t, EXPERTS, device=device, generator=gen)

    def torch_fn():
        scores = torch.softmax(logits, dim=-1)
        top, idx = torch.topk(scores, TOPK, dim=-1)
        return torch.zeros_like(scores).scatter(1, idx, top)

    def turbo_fn():
        return fused_group_topk_routing_with_aux_score(logits, TOPK, score_function="softmax")[1]

    return torch_fn, turbo_fn


def _permute(t: int, device: str, gen: torch.Generator):
    x = _randn(gen, device, t, HIDDEN)
    idx = torch.stack([torch.randperm(EXPERTS, device="cpu", generator=torch.Generator().manual_seed(i))[:TOPK]
                       for i in range(t)]).to(device=device, dtype=torch.int32)

    def torch_fn():
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        rows = x.index_select(0, order // TOPK)
        return torch.zeros_like(x).index_add_(0, order // TOPK, rows)

    def turbo_fn():
        res = moe_permute(x, idx, num_local_experts=EXPERTS, num_topk=TOPK)
        out = moe_unpermute(res.permuted_tokens, res.row_id_map, res.num_dispatched_tokens,
                            restore_shape=(t, HIDDEN), num_local_experts=EXPERTS)
        return out[0] if isinstance(out, tuple) else out

    return torch_fn, turbo_fn


def _swiglu(t: int, device: str, gen: torch.Generator):
    x = _randn(gen, device, t, 2 * HIDDEN)
    probs = torch.rand(t, device=device, generator=gen)

    def torch_fn():
        gate, up = x.chunk(2, dim=-1)
        return (F.silu(gate.float()) * up.float() * probs[:, None]).to(x.dtype)

    return torch_fn, (lambda: swiglu_with_probs(x, probs))


def _linear_step(t: int, device: str, gen: torch.Generator, fp8: bool = True):
    ref = torch.nn.Linear(HIDDEN, HIDDEN, device=device, dtype=torch.bfloat16)
    with torch.no_grad():  # seeded weights (nn.Linear's own init draws from the global generator)
        ref.weight.copy_(_randn(gen, device, HIDDEN, HIDDEN) * HIDDEN**-0.5)
        ref.bias.copy_(_randn(gen, device, HIDDEN) * 0.1)
    if fp8:
        mod = Float8Linear.from_float(ref, Float8QuantConfig(), inplace=False)
    else:
        mod = Linear(HIDDEN, HIDDEN, device=device, dtype=torch.bfloat16)
        mod.load_state_dict(ref.state_dict())
    x = _randn(gen, device, t, HIDDEN).requires_grad_(True)
    dy = _randn(gen, device, t, HIDDEN)

    def step(mod: torch.nn.Module, backward: bool = True) -> Callable[[], torch.Tensor]:
        def once():
            with torch.no_grad():  # the weight changes every step, as under an optimizer (an in-place write:
                mod.weight.mul_(1.0)  # it invalidates Float8Linear's cached weight quantization)
            y = mod(x)
            if backward:
                y.backward(dy)
                mod.weight.grad = mod.bias.grad = x.grad = None  # as zero_grad(set_to_none=True) between steps
            return y.detach()

        return once

    return step(ref), step(mod), (step(ref, backward=False), step(mod, backward=False))


#: Every case, in table order.
CASES = (
    HostCase("gemm", "call", "torch.matmul", _gemm),
    HostCase("gemm_fp8", "call", "tensorwise quantization + torch._scaled_mm", _gemm_fp8),
    HostCase("flash_attn_func", "call", "F.scaled_dot_product_attention", _attention),
    HostCase("grouped_gemm", "call", "torch._grouped_mm", _grouped),
    HostCase("rmsnorm", "call", "F.rms_norm", _rmsnorm),
    HostCase("rmsnorm_residual", "call", "x + r, F.rms_norm", _rmsnorm_residual),
    HostCase("swiglu", "call", "silu(gate) * up * probs", _swiglu),
    HostCase("quantize_fp8", "call", "rowwise amax, scale, cast", _quantize),
    HostCase("moe_routing", "call", "softmax, topk, scatter", _routing),
    HostCase("moe_permute", "call", "argsort, index_select, index_add_", _permute),
    HostCase("linear", "fwd+bwd", "torch.nn.Linear fwd+bwd", lambda t, d, g: _linear_step(t, d, g, fp8=False)),
    HostCase("linear_fp8", "fwd+bwd", "torch.nn.Linear fwd+bwd", _linear_step),
)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.double().abs().max().item() or 1.0
    return (out.double() - ref.double()).abs().max().item() / scale


def _kernels(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, str, list]:
    """One call of ``fn``: its output, the ``primitive:backend`` pairs the dispatcher served, and
    the recorded primitive calls ``(primitive, backend, kernel, args)``."""
    before = stats()
    with recording() as calls:
        out = fn()
    after = stats()
    served = sorted({f"{prim}:{backend}" for (prim, backend, how), n in after.items()
                     if n > before.get((prim, backend, how), 0)})
    return out, ", ".join(served), calls


def _layer_fns(calls: list) -> dict[str, Callable[[], None]]:
    """The replays of the recorded primitive calls behind ``us_dispatch`` and ``us_kernels`` (see
    the module doc)."""
    def dispatch():
        for prim, _backend, _kernel, args in calls:
            call(prim, args)

    def kernels():
        for _prim, _backend, kernel, args in calls:
            kernel.run(args)

    return {"us_dispatch": dispatch, "us_kernels": kernels}


def _where(filename: str) -> str:
    """``filename`` from its top-level package on (``turbo_core/ops/gemm.py``, ``torch/...``)."""
    parts = filename.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "src", "dist-packages"):
            return "/".join(parts[i + 1:])
    return "/".join(parts[-2:])


def _profile(fn: Callable[[], torch.Tensor], *, device: str, calls: int, top: int) -> dict[str, list[list]]:
    """Over ``calls`` calls of ``fn`` under ``cProfile``: ``{"host_profile": the top functions by own
    time, "host_profile_cumulative": by time with their callees}``, each ``[[function, us per call],
    ...]``, most first. The cumulative ranking leaves out the functions every call passes through
    whole (``fn`` and the profiler's own entries: as much time as the call)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    if device == "cuda":
        torch.cuda.synchronize()
    own, cumulative = [], []
    for (filename, line, name), (_cc, _nc, tottime, cumtime, _callers) in pstats.Stats(profiler).stats.items():
        label = f"{name}" if filename == "~" else f"{_where(filename)}:{line}({name})"
        own.append([label, tottime / calls * 1e6])
        if not (filename == "~" and name.startswith("<method 'disable'")) and "suites/host.py" not in label:
            cumulative.append([label, cumtime / calls * 1e6])
    out = {}
    for key, entries in (("host_profile", own), ("host_profile_cumulative", cumulative)):
        entries.sort(key=lambda e: -e[1])
        out[key] = [[label, round(us, 2)] for label, us in entries[:top]]
    return out


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        profile_top: int | None = None) -> list[dict]:
    """Every case (``models`` and ``include_reference`` are unused: the cases have no model, and
    ``turbo:auto`` is whatever the dispatcher selects); ``profile_top``: see the module doc."""
    if profile_top is not None and profile_top < 1:
        raise ValueError(f"--profile-top: expected a count >= 1, got {profile_top}")
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
            torch_fn, turbo_fn, *forward = case.prepare(tokens, device, gen)
        except Exception as exc:  # noqa: BLE001 - the rows say why
            rows += [{**base, "provider": p, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}
                     for p in ("torch", "turbo:auto")]
            continue
        forward_fns = dict(zip(("torch", "turbo:auto"), forward[0], strict=True)) if forward else {}
        rows += _measure_case(base, {"torch": torch_fn, "turbo:auto": turbo_fn}, forward_fns, providers=providers,
                              device=device, warmup=warmup, iters=iters, calls=calls, profile_top=profile_top)
        if progress:
            progress.advance(task)
    return rows


def _measure_case(base: dict, fns: dict, forward_fns: dict, *, providers: list[str] | None, device: str,
                  warmup: int, iters: int, calls: int, profile_top: int | None) -> list[dict]:
    """The rows of one case: every provider's first call (its output, the kernels it reached),
    then all the timed calls of the case interleaved (``timing.measure_interleaved``): each
    provider's call, its forward alone (step cases), and turbo's dispatcher and kernel replays."""
    rows, outs, timed = {}, {}, {}
    for name, fn in fns.items():
        if providers and name not in providers:
            continue
        row = rows[name] = {**base, "provider": name, "role": "baseline" if name == "torch" else "turbo"}
        try:
            outs[name], served, recorded = _kernels(fn)
        except Exception as exc:  # noqa: BLE001 - one failing provider is reported, the suite goes on
            row["status"] = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        timed[(name, "us_per_call")] = fn
        if name in forward_fns:
            timed[(name, "us_forward")] = forward_fns[name]
        if name != "torch":
            row["kernels"] = served
            row["primitive_calls"] = len(recorded)
            if recorded:
                timed.update({(name, k): f for k, f in _layer_fns(recorded).items()})
    try:
        times = timing.measure_interleaved(timed, device=device, warmup=warmup, iters=iters, calls=calls,
                                           clock="wall")
    except Exception as exc:  # noqa: BLE001 - the case's rows say why
        for row in rows.values():
            row.setdefault("status", f"error: {type(exc).__name__}: {str(exc)[:300]}")
        return list(rows.values())
    ref = outs.get("torch")
    base_t = times.get(("torch", "us_per_call"))
    for name, row in rows.items():
        if "status" in row:
            continue
        t = times[(name, "us_per_call")]
        for (who, field), other in times.items():
            if who == name and field != "us_per_call":
                row[field] = other.median_ms * 1e3
        if name != "torch" and profile_top:
            row.update(_profile(fns[name], device=device, calls=calls, top=profile_top))
        row.update(status="ok", median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms, us_per_call=t.median_ms * 1e3,
                   ratio=base_t.median_ms / t.median_ms if base_t else None,
                   max_rel_err=_rel_err(outs[name], ref) if ref is not None else None)
    return list(rows.values())


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    return f"{r['us_per_call']:.1f} us{ratio}"


def split(r: dict) -> dict[str, float] | None:
    """A turbo row's microseconds per layer: ``op`` (checks, reshapes, autograd), ``dispatcher``
    (validation and selection) and ``backend`` (the launchers), or ``None`` without the figures."""
    if r.get("us_kernels") is None or r.get("us_dispatch") is None:
        return None
    return {"op": r["us_per_call"] - r["us_dispatch"], "dispatcher": r["us_dispatch"] - r["us_kernels"],
            "backend": r["us_kernels"]}


def print_table(rows: list[dict], console) -> None:
    """Per case: microseconds per call, the ratio to torch (above 1: turbo costs the host less);
    then where each turbo call's microseconds go."""
    print_tables(rows, console, title="turbo bench host: us per eager call (ratio to torch)", cell=_cell)
    table = Table(title="turbo bench host: where a turbo call's us go (op layer / dispatcher / backends)")
    for col in ("case", "provider", "us/call", "op", "dispatcher", "backend", "primitive calls", "kernels"):
        table.add_column(col, overflow="fold")
    for r in rows:
        parts = split(r) if r.get("status") == "ok" else None
        if parts is None:
            continue
        table.add_row(r["case"], r["provider"], f"{r['us_per_call']:.1f}", *(f"{v:.1f}" for v in parts.values()),
                      str(r["primitive_calls"]), r.get("kernels", ""))
    if table.row_count:
        console.print(table)
    steps = [r for r in rows if r.get("status") == "ok" and r.get("us_forward") is not None]
    if steps:
        table = Table(title="turbo bench host: a step's us, its forward and its backward (step - forward)")
        for col in ("case", "provider", "step", "forward", "backward"):
            table.add_column(col)
        for r in steps:
            table.add_row(r["case"], r["provider"], f"{r['us_per_call']:.1f}", f"{r['us_forward']:.1f}",
                          f"{r['us_per_call'] - r['us_forward']:.1f}")
        console.print(table)
    for r in rows:
        for key, what in (("host_profile", "own time"), ("host_profile_cumulative", "time with callees")):
            if not r.get(key):
                continue
            prof = Table(title=f"turbo bench host: {r['case']} under cProfile, functions of most {what} "
                               "(us per call, profiler-inflated)")
            prof.add_column("function", overflow="fold")
            prof.add_column("us/call", justify="right")
            for label, us in r[key]:
                prof.add_row(label, f"{us:.1f}")
            console.print(prof)
