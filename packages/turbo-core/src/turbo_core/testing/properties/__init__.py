"""Property-based tests (hypothesis) of every primitive, for every backend, third-party ones included.

One line in a backend package's tests::

    from turbo_core.testing.properties import property_tests
    TestProperties = property_tests("FLYDSL")              # $TURBO_CONFORMANCE_DEVICE or the CPU

``property_tests`` returns a pytest class with one test per primitive (``test_gemm``,
``test_quantize_fp8``, ...). Each test draws cases — shapes including 0, 1, odd sizes and primes,
non-contiguous and strided views, every dtype, every flag (transposes, causal, windows, GQA ratios,
group lengths with zeros and one huge group, top-k, pad multiples, every FP8/FP4 granularity and
format) — calls the primitive pinned to the backend through the dispatcher, and compares its result
with float64 math written from the spec, within the conformance kit's tolerances
(``turbo_core.testing.numerics``). For a backend other than TORCH, the reference backend TORCH runs
every example too and is held to the same float64 math. Every call also checks that the primitive
leaves its inputs unchanged (except the fields it declares it writes).

A test is skipped, with the reason, when the device or the backend is unavailable here or the
backend has no kernel for the primitive. An example the backend's capability check declines is
rejected (hypothesis draws another; the statistics, ``--hypothesis-show-statistics``, list the
reasons); a test whose examples are mostly or all declined fails (hypothesis's ``filter_too_much``
health check, or ``Unsatisfiable``), never passes.

Budgets and seeds come from a hypothesis profile (:mod:`~turbo_core.testing.properties.profiles`):
``ci`` (200 examples per primitive, fixed seed, small shapes), ``gpu`` (2,000, larger shapes) or
``dev`` (random seeds), chosen by ``$TURBO_HYPOTHESIS_PROFILE``, else ``gpu`` for tests on a GPU
and ``ci`` for tests on the CPU. A failure prints the falsifying case (shapes, flags, the seed of its
tensors) and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
import torch
from hypothesis import event, given, reject

from turbo_core.backend import BackendType, normalize_backend_name
from turbo_core.testing.conformance import _device_unavailable, _served, conformance_device
from turbo_core.testing.properties import (
    activation,
    activation_fp8,
    attention,
    gemm,
    grouped_gemm,
    loss,
    moe,
    normalization,
    quantization,
    sparse_mla,
)
from turbo_core.testing.properties.harness import Declined, Property, Target
from turbo_core.testing.properties.profiles import PROFILE_ENV, PROFILES, active_profile, hypothesis_settings, pick

__all__ = ["PROFILES", "PROFILE_ENV", "Property", "all_properties", "property_tests"]

_MODULES = (gemm, grouped_gemm, quantization, attention, normalization, activation, activation_fp8, moe,
            sparse_mla, loss)


def all_properties() -> list[Property]:
    """One property per primitive, in family order."""
    return [p for m in _MODULES for p in m.PROPERTIES]


def _example_runner(prop: Property, backend: str, device: torch.device):
    """The body of one example: the backend, then (for another backend) TORCH, each against float64."""
    names = [backend] if backend == BackendType.TORCH else [backend, BackendType.TORCH]

    def run(case) -> None:
        for name in names:
            try:
                prop.check(case, Target(name, device, prop.primitive))
            except Declined as exc:
                if name != backend:
                    raise AssertionError(f"the reference backend declined a case: {exc}") from None
                event(f"declined: {str(exc).split('cannot run this call: ', 1)[-1]}")
                reject()
            except AssertionError as exc:
                raise AssertionError(f"{prop.primitive} on {name} ({device}): {exc}") from None

    return run


def _make_test(prop: Property, backend: str, device: torch.device, profile, max_examples: int, max_dim: int):
    run = _example_runner(prop, backend, device)
    run.__name__ = run.__qualname__ = f"{prop.primitive}_on_{backend.lower()}"
    inner = hypothesis_settings(profile, max_examples)(given(case=prop.cases(max_dim))(run))

    def test(self) -> None:
        missing = _device_unavailable(device)
        if missing is not None:
            pytest.skip(missing)
        _, reason = _served(backend, (prop.primitive,))
        if reason is not None:
            pytest.skip(reason)
        inner()

    test.__name__ = f"test_{prop.primitive}"
    test.__doc__ = f"{prop.primitive} on {backend}: {max_examples} examples, dims up to {max_dim} ({profile.name})."
    return test


def property_tests(backend: str, *, device: torch.device | str | None = None, profile: str | None = None,
                   max_examples: int | Mapping[str, int] | None = None,
                   max_dim: int | Mapping[str, int] | None = None,
                   primitives: Iterable[str] | None = None) -> type:
    """A pytest test class with one property test per primitive, against ``backend`` on ``device``
    (``turbo_core.testing.conformance.conformance_device``: ``$TURBO_CONFORMANCE_DEVICE`` or the CPU).

    ``profile``: ``ci``, ``gpu`` or ``dev`` (default: :func:`~.profiles.active_profile` of the device).
    ``max_examples`` / ``max_dim``: this backend's budget, an int or ``{profile: int}`` (profiles not
    named keep theirs). ``primitives``: only these (default: every primitive). The class has
    ``backend``, ``device``, ``profile``, ``max_examples`` and ``max_dim`` attributes.
    """
    name = normalize_backend_name(backend)
    dev = conformance_device(device)
    prof = active_profile(profile, dev)
    examples = pick(max_examples, prof, prof.max_examples, "max_examples")
    size = pick(max_dim, prof, prof.max_dim, "max_dim")
    props = all_properties()
    if primitives is not None:
        wanted = list(primitives)
        known = {p.primitive for p in props}
        unknown = [p for p in wanted if p not in known]
        if unknown:
            raise ValueError(f"primitives: no property for {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        props = [p for p in props if p.primitive in wanted]
    attrs = {f"test_{p.primitive}": _make_test(p, name, dev, prof, examples, size) for p in props}
    attrs.update(backend=name, device=dev, profile=prof.name, max_examples=examples, max_dim=size)
    return type(f"TestProperties{name.title().replace('_', '')}", (), attrs)
