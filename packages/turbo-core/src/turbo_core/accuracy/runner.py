"""Run accuracy cases on every backend and score them (rows as documented in :func:`run_cases`)."""

from __future__ import annotations

import math

from turbo_core.accuracy.cases import AccCase
from turbo_core.dispatch.dispatcher import BackendError, KernelError
from turbo_core.plugins.host import get_host
from turbo_core.testing.numerics import error_stats

__all__ = ["backends_for", "run_cases", "score"]

_DECLINE = "cannot run this call: "


def backends_for(primitive: str, include_reference: bool, only: list[str] | None = None) -> list[str]:
    """Available backends with a kernel for ``primitive`` (the reference TORCH only with
    ``include_reference``; ``only``: restrict to these names)."""
    registry = get_host().registry
    names = []
    for kernel in registry.kernels_for(primitive):
        name = kernel.backend
        if only is not None and name not in only:
            continue
        if name == "TORCH" and not include_reference and not (only and "TORCH" in only):
            continue
        if registry.backend(name).unavailable_reason() is None:
            names.append(name)
    return names


def _base(case: AccCase, output: str, backend: str) -> dict:
    return {"family": case.family, "primitive": case.primitive, "precision": case.precision,
            "granularity": case.granularity, "format": case.format, "shape": case.shape, "output": output,
            "backend": backend, "status": "ok", "snr_db": None, "max_abs": None, "max_rel": None,
            "gate": case.gate.describe() + (f" & {case.e2e_gate.describe()} end to end" if case.e2e_gate else ""),
            "passed": None}


def score(case: AccCase, row: dict, reference, actual, ideal=None) -> dict:
    """Fill ``row`` with the error of ``actual`` against the float64 ``reference`` and the gate result
    (FP8 GEMMs: also the SNR against the unquantized ``ideal``, ``snr_e2e_db``)."""
    if tuple(actual.shape) != tuple(reference.shape):
        row.update(status=f"error: shape {tuple(actual.shape)} != reference {tuple(reference.shape)}", passed=False)
        return row
    actual = actual.to(reference.device)
    row.update(error_stats(reference, actual))
    passed = case.gate.check(reference, actual) and not math.isnan(row["max_abs"])
    if case.e2e_gate is not None and ideal is not None:
        row["snr_e2e_db"] = error_stats(ideal, actual)["snr_db"]
        passed = passed and case.e2e_gate.check(ideal, actual)
    row["passed"] = bool(passed)
    return row


def run_cases(cases: list[AccCase], *, device: str, include_reference: bool, backends: list[str] | None = None,
              progress=None) -> list[dict]:
    """One row per (case, output, backend) with ``family, primitive, precision, granularity, format,
    shape, output, backend, status, snr_db, max_abs, max_rel, gate, passed`` (+ ``snr_e2e_db`` for
    FP8 GEMMs). ``status``: ``"ok"``, ``"declined: <reason>"`` (``passed`` None) or ``"error: <msg>"``
    (``passed`` False). Errors are relative to ``max |reference|``; SNR in dB."""
    rows: list[dict] = []
    task = progress.add_task("accuracy", total=len(cases)) if progress is not None else None
    for case in cases:
        names = backends_for(case.primitive, include_reference, backends)
        if names:
            built = case.build(device)
            for backend in names:
                base = [_base(case, out, backend) for out in case.outputs]
                try:
                    outs = built.run(backend)
                except KernelError as exc:  # the backend's kernel raised: an error, not a decline
                    rows += [dict(r, status=f"error: {exc}", passed=False) for r in base]
                    continue
                except BackendError as exc:
                    msg = str(exc)
                    reason = msg.split(_DECLINE, 1)[1] if _DECLINE in msg else msg
                    rows += [dict(r, status=f"declined: {reason}") for r in base]
                    continue
                except Exception as exc:  # a backend that crashes fails its rows; the others still run
                    rows += [dict(r, status=f"error: {type(exc).__name__}: {exc}", passed=False) for r in base]
                    continue
                for i, row in enumerate(base):
                    ideal = built.ideal[i] if built.ideal is not None else None
                    rows.append(score(case, row, built.reference[i], outs[i], ideal))
            del built
        if task is not None:
            progress.advance(task)
    return rows
