"""Runs a suite: every provider on every case, side by side, and returns JSON-ready rows.

:func:`run_cases` is the loop every TFLOP/s suite shares (``gemm``, ``gemm_fp8``,
``grouped_gemm_fp8``): a suite supplies its cases, how to make one set of inputs, its providers
per case (each a ``prepare(inputs) -> zero-argument callable``, or a status saying why it does not
run) and the float64 oracle; the runner times every provider over input sets rotated beyond L2,
checks its first output against the oracle and fills in the ratios.

Row keys: the suite's own case fields (``gemm``: suite, case, model, layer, pass, layout, m, n, k,
dtype), then provider, role (``"baseline"``: the denominator of ``ratio``; ``"bf16"``: the
denominator of ``bf16_ratio``; ``"turbo"``), baseline (the name of the ratio's provider), status
(``"ok"``, ``"declined: <reason>"``, ``"skipped: <reason>"``, ``"error: <message>"``), median_ms,
p10_ms, p90_ms, tflops, ratio (baseline time / this time, on the same case), bf16_ratio (the same
against the ``bf16`` provider, when the suite has one), peak_fraction (of the datasheet dense peak
of the provider's precision), max_rel_err (``max|out - ref| / max|ref|`` against float64 math),
rounds.

Rounds (``turbo bench --rounds N``, :data:`ROUNDS`): a GPU's clocks drift with its power and
temperature over a run (the same GEMM timed twice a few seconds apart can differ by more than the
providers being compared), so a provider timed after another may be measured at other clocks. With ``N > 1`` every
case's providers are timed ``N`` times in turn (A B C, A B C, ...); a row reports the median of its
rounds' medians (p10/p90: the lowest p10 and highest p90 of its rounds).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from turbo_core import timing
from turbo_core.bench import dataset
from turbo_core.plugins.host import get_host

#: Interleaved timing rounds per case (``turbo bench --rounds``; see the module docstring).
ROUNDS = 1

#: Datasheet dense bf16 TFLOP/s by device-name substring.
PEAK_BF16 = {"H200": 989.0, "H100": 989.0, "MI300X": 1307.0, "MI325X": 1307.0, "MI355X": 2500.0, "MI350X": 2300.0}
#: Datasheet dense FP8 TFLOP/s (E4M3/E5M2, no sparsity) by device-name substring.
PEAK_FP8 = {"H200": 1979.0, "H100": 1979.0, "MI300X": 2615.0, "MI325X": 2615.0, "MI355X": 5000.0, "MI350X": 4600.0}


def peak_tflops(device_name: str, precision: str = "bf16") -> float | None:
    """The datasheet dense peak of ``precision`` (``"bf16"`` or ``"fp8"``), or None when unknown."""
    table = PEAK_FP8 if precision == "fp8" else PEAK_BF16
    for key, value in table.items():
        if key in device_name:
            return value
    return None


def environment(device: str) -> dict:
    """The versions in use (:func:`turbo_core.bench.dataset.versions`), ``device`` and, on a GPU, its name."""
    info = {**dataset.versions(), "device": device}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def available_backends(primitive: str, *, include_reference: bool = True, also: Sequence[str] = ()) -> list[str]:
    """Available backends with a kernel for ``primitive`` or for one of ``also`` (sibling
    primitives: a backend with a bf16 GEMM but no FP8 one is listed, and then declines with its
    reason). The reference backend TORCH only with ``include_reference``."""
    registry = get_host().registry
    names: list[str] = []
    for prim in (primitive, *also):
        for kernel in registry.kernels_for(prim):
            name = kernel.backend
            if name in names or (name == "TORCH" and not include_reference):
                continue
            if registry.backend(name).unavailable_reason() is None:
                names.append(name)
    return names


@dataclass
class Provider:
    """One provider on one case.

    Fields:
        name: the column (``"torch"``, ``"turbo:TRITON"``, ``"torch._scaled_mm"``...).
        prepare: ``prepare(inputs) -> fn`` where ``fn()`` runs the timed work once and returns the
            output; ``prepare`` runs outside the timed region (layout conversions belong there).
        status: instead of ``prepare``: why it does not run (``"declined: ..."``, ``"skipped: ..."``).
        role: ``"turbo"``, ``"baseline"`` (the denominator of ``ratio``) or ``"bf16"`` (of
            ``bf16_ratio``). Baselines must come before the providers compared with them.
        oracle: the name of the float64 reference its output is checked against.
        precision: the peak ``peak_fraction`` is taken against (``"bf16"`` or ``"fp8"``).
        memo: providers with the same key are measured once per run and the row is reused (e.g.
            the bf16 reference of one shape, repeated for every FP8 granularity).
        fields: extra row fields.
    """

    name: str
    prepare: Callable[[Any], Callable[[], torch.Tensor]] | None = None
    status: str | None = None
    role: str = "turbo"
    oracle: str = "main"
    precision: str = "bf16"
    memo: Hashable | None = None
    fields: dict = field(default_factory=dict)


def tensor_bytes(obj: Any) -> int:
    """Bytes of every tensor in ``obj`` (a tensor, or nested tuples/lists/dict values)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (tuple, list)) else ()
    for v in values:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|`` (``max|ref|`` of 0 counts as 1)."""
    scale = ref.abs().max().item() or 1.0
    return (out.double() - ref).abs().max().item() / scale


def run_cases(suite: str, cases: Sequence, *, row: Callable[[Any], dict], flops: Callable[[Any], int],
              make_inputs: Callable[[Any, torch.Generator], Any], timed_bytes: Callable[[Any], int],
              providers: Callable[[Any, Any], list[Provider]], reference: Callable[[Any, Any, str], torch.Tensor],
              keep: Sequence[str] | None, warmup: int, iters: int, device: str, progress=None,
              bf16_ratio: bool = False) -> list[dict]:
    """Every provider on every case; JSON-ready rows (keys in the module docstring).

    Args:
        suite: the ``suite`` field and the progress bar's label.
        cases: the suite's cases; ``row(case)`` gives each case's fields, ``flops(case)`` its FLOPs.
        make_inputs: ``make_inputs(case, generator)`` -> one input set (any object; the providers'
            ``prepare`` reads it). On a GPU, more sets are made until the sets' ``timed_bytes``
            exceed :data:`turbo_core.timing.ROTATE_BYTES`; on the CPU one set is used.
        providers: ``providers(case, first_set)`` -> the case's :class:`Provider` list, baselines first.
        reference: ``reference(case, first_set, oracle)`` -> the float64 result a provider with
            that ``oracle`` is checked against (computed once per case and oracle).
        keep: only these provider names (None: all).
        bf16_ratio: measured rows carry ``bf16_ratio`` (None when the bf16 provider did not run).
    """
    gen = torch.Generator(device=device).manual_seed(0)
    device_name = torch.cuda.get_device_name() if device == "cuda" else ""
    task = progress.add_task(suite, total=len(cases)) if progress else None
    memo: dict[Hashable, dict] = {}
    rows: list[dict] = []
    for case in cases:
        first = make_inputs(case, gen)
        n_sets = timing.copies_needed(timed_bytes(first)) if device == "cuda" else 1
        sets = [first] + [make_inputs(case, gen) for _ in range(n_sets - 1)]
        anchor = _first_tensor(first)
        table = [p for p in providers(case, first) if keep is None or p.name in keep]
        base = {"suite": suite, **row(case)}
        refs: dict[str, torch.Tensor] = {}
        times: dict[str, float] = {}
        baseline = next((p.name for p in table if p.role == "baseline"), None)
        results: dict[int, dict] = {}
        again: list[int] = []  # measured here (not memoized) and ok: timed again in later rounds
        for i, p in enumerate(table):
            if p.memo is not None and p.memo in memo:
                results[i] = memo[p.memo]
                continue
            results[i] = _measure(case, p, sets, first, anchor, refs, reference, warmup, iters)
            if p.memo is not None:
                memo[p.memo] = results[i]  # the same dict: later rounds update what the memo holds
            if results[i]["status"] == "ok":
                again.append(i)
        medians = {i: [results[i]["median_ms"]] for i in again}
        for _ in range(max(1, int(ROUNDS)) - 1):
            for i in again:
                t = _time_only(table[i], sets, anchor, warmup, iters)
                medians[i].append(t.median_ms)
                results[i]["p10_ms"] = min(results[i]["p10_ms"], t.p10_ms)
                results[i]["p90_ms"] = max(results[i]["p90_ms"], t.p90_ms)
        for i in again:
            results[i]["median_ms"] = statistics.median(medians[i])
            results[i]["rounds"] = len(medians[i])
        for i, p in enumerate(table):
            out_row = {**base, **p.fields, "provider": p.name, "role": p.role, "baseline": baseline}
            result = results[i]
            out_row.update(result)
            if result["status"] == "ok":
                ms = result["median_ms"]
                if p.role in ("baseline", "bf16"):
                    times.setdefault(p.role, ms)
                tflops = flops(case) / ms / 1e9
                peak = peak_tflops(device_name, p.precision) if device_name else None
                out_row["tflops"] = tflops
                out_row["ratio"] = times["baseline"] / ms if "baseline" in times and p.role != "bf16" else None
                if bf16_ratio:
                    out_row["bf16_ratio"] = times["bf16"] / ms if "bf16" in times else None
                out_row["peak_fraction"] = tflops / peak if peak else None
            rows.append(out_row)
        if progress:
            progress.advance(task)
        del sets, refs
    return rows


def _time_only(p: Provider, sets: list, anchor, warmup: int, iters: int) -> timing.Timing:
    """One more timing of a provider that already ran ok (a later round)."""
    calls = [(p.prepare(s), anchor) for s in sets]
    return timing.measure(lambda fn, _anchor: fn(), calls, warmup=warmup, iters=iters)


def _measure(case, p: Provider, sets: list, first, anchor, refs: dict, reference, warmup: int, iters: int) -> dict:
    """Status, timings and error of one provider on one case (exceptions become an error status)."""
    if p.prepare is None:
        return {"status": p.status or "skipped: no implementation"}
    try:
        calls = [(p.prepare(s), anchor) for s in sets]
        out = calls[0][0]()
        if p.oracle not in refs:
            refs[p.oracle] = reference(case, first, p.oracle)
        err = max_rel_err(out, refs[p.oracle])
        del out
        t = timing.measure(lambda fn, _anchor: fn(), calls, warmup=warmup, iters=iters)
        del calls
    except Exception as exc:  # one failing provider is reported, the suite goes on
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}
    return {"status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "max_rel_err": err}
