"""The conformance suite: every backend, third-party ones included, runs the same cases.

One line in a backend package's tests::

    from turbo_core.testing.conformance import conformance_suite
    TestConformance = conformance_suite("FLYDSL")                   # $TURBO_CONFORMANCE_DEVICE or cpu
    TestConformanceCuda = conformance_suite("FLYDSL", device="cuda")  # on the GPU machine

Each case runs a public op (forward and backward) with those of its primitives that the backend
registers pinned to it (``use_backend(name, primitives=...)``; the others — a quantizer feeding an
FP8 GEMM, say — are selected as usual) and compares with independent float64 math, within the
tolerances of ``turbo_core.testing.numerics``. A case is skipped, with the reason, when the device
or the backend is not available here, the backend has no kernel for any of the case's primitives,
or it declines the call (its capability check's own words): never counted as passed.

Devices. Every case is ``case.run(device=...)`` (``device`` defaults to the CPU, so ``case.run()``
is the CPU run). The inputs are drawn on the CPU from a seeded generator — the same values on every
device — and copied to ``device``, where the op runs (every tensor an op receives is on
``device``); the float64 reference is computed on the CPU from the CPU copies, and results are
copied back to the CPU to be compared. So the oracle never depends on the device's math libraries,
and a CPU run does exactly what it did before devices existed. No case needs the CPU.
"""

from __future__ import annotations

import os

import pytest
import torch

from turbo_core.backend import normalize_backend_name
from turbo_core.dispatch.dispatcher import BackendError
from turbo_core.dispatch.manager import use_backend
from turbo_core.plugins.host import get_host
from turbo_core.testing.case import Case, host_copy
from turbo_core.testing.cases import collect

__all__ = ["DEVICE_ENV", "Case", "all_cases", "conformance_device", "conformance_suite", "host_copy"]

#: Environment variable naming the default device of ``conformance_suite`` (e.g. ``cuda``).
DEVICE_ENV = "TURBO_CONFORMANCE_DEVICE"


def all_cases() -> list[Case]:
    return collect()


def conformance_device(device: torch.device | str | None = None) -> torch.device:
    """The device cases run on: ``device``; when ``None``, ``$TURBO_CONFORMANCE_DEVICE`` if set and
    not empty, else the CPU. ``ValueError`` naming ``device`` for a string torch cannot parse and
    for ``meta`` (a device without values: no result could be checked)."""
    source = "device"
    if device is None:
        env = os.environ.get(DEVICE_ENV, "").strip()
        device, source = (env, f"device (${DEVICE_ENV})") if env else ("cpu", "device")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{source}: {device!r} is not a torch device ({exc})") from None
    if dev.type == "meta":
        raise ValueError(f"{source}: 'meta' tensors hold no values, so no conformance case can check a result")
    return dev


def _device_unavailable(dev: torch.device) -> str | None:
    """Why tensors cannot be made on ``dev`` in this process (``None`` when they can)."""
    if dev.type == "cpu":
        return None
    module = getattr(torch, dev.type, None)
    is_available = getattr(module, "is_available", None)
    if is_available is None or not is_available():
        return f"no {dev.type} device here"
    count = getattr(module, "device_count", None)
    if dev.index is not None and count is not None and dev.index >= count():
        return f"no {dev} here ({count()} {dev.type} device(s))"
    return None


def _served(backend: str, primitives: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """``(the case primitives the backend registers, None)``, or ``((), why the case cannot run)``."""
    registry = get_host().registry
    record = registry.backend(backend)
    if record is None:
        return (), f"backend {backend} is not installed"
    reason = record.unavailable_reason()
    if reason:
        return (), f"{backend} unavailable here: {reason}"
    served = tuple(p for p in primitives if registry.kernel(p, backend) is not None)
    if not served:
        return (), f"{backend} has no kernel for {', '.join(primitives)}"
    return served, None


def conformance_suite(backend: str, device: torch.device | str | None = None) -> type:
    """A pytest test class running every conformance case against ``backend`` on ``device``
    (resolved now, by :func:`conformance_device`: ``$TURBO_CONFORMANCE_DEVICE`` is read when the
    class is built, at collection). The class has ``backend`` and ``device`` attributes."""
    name = normalize_backend_name(backend)
    dev = conformance_device(device)
    cases = all_cases()

    @pytest.mark.parametrize("case", cases, ids=[c.id for c in cases])
    def test_case(self, case: Case) -> None:
        missing = _device_unavailable(dev)
        if missing is not None:
            pytest.skip(missing)
        served, reason = _served(name, case.primitives)
        if reason is not None:
            pytest.skip(reason)
        # Pin only the case primitives the backend serves: the rest, and helpers the op calls, are
        # selected as usual. The backward runs on this thread: on a GPU autograd runs it on a device
        # worker thread, where use_backend's pin (a context variable) is not set.
        with use_backend(name, primitives=served), torch.autograd.set_multithreading_enabled(False):
            try:
                case.run(device=dev)
            except BackendError as exc:
                if "cannot run this call" not in str(exc):
                    raise
                pytest.skip(f"declined: {exc}")

    attrs = {"backend": name, "device": dev, "test_case": test_case}
    return type(f"TestConformance{name.title().replace('_', '')}", (), attrs)
