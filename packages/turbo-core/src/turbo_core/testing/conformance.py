"""The conformance suite: every backend, third-party ones included, runs the same cases.

One line in a backend package's tests::

    from turbo_core.testing.conformance import conformance_suite
    TestConformance = conformance_suite("FLYDSL")

Each case runs a public op (forward and backward) with those of its primitives that the backend
registers pinned to it (``use_backend(name, primitives=...)``; the others — a quantizer feeding an
FP8 GEMM, say — are selected as usual) and compares with independent float64 math, within the
tolerances of ``turbo_core.testing.numerics``. A case is skipped, with the reason, when the backend
is not available here, has no kernel for any of the case's primitives, or declines the call (its
capability check's own words): never counted as passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

__all__ = ["Case", "all_cases", "conformance_suite"]


@dataclass(frozen=True)
class Case:
    """``run()`` raises ``AssertionError`` on a wrong result. ``primitives``: what it needs."""

    id: str
    primitives: tuple[str, ...]
    run: Callable[[], None]


def all_cases() -> list[Case]:
    from turbo_core.testing.cases import collect

    return collect()


def _served(backend: str, primitives: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """``(the case primitives the backend registers, None)``, or ``((), why the case cannot run)``."""
    from turbo_core.plugins.host import get_host

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


def conformance_suite(backend: str) -> type:
    """A pytest test class running every conformance case against ``backend``."""
    from turbo_core.backend import normalize_backend_name

    name = normalize_backend_name(backend)
    cases = all_cases()

    @pytest.mark.parametrize("case", cases, ids=[c.id for c in cases])
    def test_case(self, case: Case) -> None:
        from turbo_core.dispatch.dispatcher import BackendError
        from turbo_core.dispatch.manager import use_backend

        served, reason = _served(name, case.primitives)
        if reason is not None:
            pytest.skip(reason)
        # Pin only the case primitives the backend serves: the rest, and helpers the op calls, are
        # selected as usual.
        with use_backend(name, primitives=served):
            try:
                case.run()
            except BackendError as exc:
                if "cannot run this call" not in str(exc):
                    raise
                pytest.skip(f"declined: {exc}")

    return type(f"TestConformance{name.title().replace('_', '')}", (), {"backend": name, "test_case": test_case})
