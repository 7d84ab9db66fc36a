"""Run-to-run determinism of every primitive as a property test (hypothesis), for any backend.

One line in a backend package's tests::

    from turbo_core.testing.determinism_properties import deterministic_property_tests
    TestDeterminism = deterministic_property_tests("FLYDSL", max_examples={"ci": 5})

The class has one test per primitive, marked ``deterministic``. Each draws the cases of the property
tests (:mod:`turbo_core.testing.properties`: shapes with 0, 1, odd sizes and primes, strided views,
every dtype and flag), and runs each case twice on the backend: on the arguments and on a copy of them
made before the first run. A call that asks for random numbers (stochastic rounding, dropout) runs the
second time from the random-number state the first started from; any other use of the global
random-number generator shows up as a difference. Every output, and every argument the
primitive writes (``Primitive.mutates``), must be bit-identical between the two runs
(:func:`~turbo_core.testing.determinism.assert_same_outputs`: raw bytes, so ``-0.0`` differs from
``+0.0``); the property itself checks the first run against float64 math, so a constant output cannot
pass. Primitives with a ``deterministic`` flag (attention) run with it set: the mode they offer.

Covered: every primitive whose kernel on the backend says it is deterministic
(``turbo_core.plugins.Kernel.deterministic``, true unless the plugin says otherwise); the others are
skipped with that reason. A case the backend declines is rejected (hypothesis draws another).

Budgets come from the property tests' profiles (``ci``, ``gpu``, ``dev``: ``$TURBO_HYPOTHESIS_PROFILE``,
else ``gpu`` on a GPU and ``ci`` on the CPU), scaled down by default: two runs of a case cost as much
as a property example and its reference (``DEFAULT_EXAMPLES``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import pytest
import torch
from hypothesis import event, given, reject

from turbo_core.backend import normalize_backend_name
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.plugins.host import get_host
from turbo_core.testing.conformance import _device_unavailable, _served, conformance_device
from turbo_core.testing.determinism import assert_same_outputs, clone_inputs
from turbo_core.testing.properties import all_properties
from turbo_core.testing.properties.harness import Declined, Property, Target
from turbo_core.testing.properties.profiles import active_profile, hypothesis_settings, pick

__all__ = ["DEFAULT_EXAMPLES", "deterministic_property_tests"]

#: Examples per primitive by profile unless the backend gives its own.
DEFAULT_EXAMPLES = {"ci": 20, "gpu": 100, "dev": 50}


def _rng_state(device: torch.device) -> tuple:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(device: torch.device, state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _draws_random(args) -> bool:
    """Whether the call asks for random numbers (stochastic rounding: a recipe's ``use_sr``; attention's
    ``dropout_p`` > 0): its second run then starts from the first one's random-number state."""
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        if f.name == "dropout_p" and value:
            return True
        if getattr(value, "use_sr", False) is True:
            return True
    return False


@dataclasses.dataclass(frozen=True)
class _Twice(Target):
    """A :class:`Target` whose every call runs the primitive twice and compares the two runs' bits;
    the first run's result goes back to the property."""

    def call(self, args):
        if any(f.name == "deterministic" for f in dataclasses.fields(args)):
            args = dataclasses.replace(args, deterministic=True)
        twin = clone_inputs(args)
        state = _rng_state(self.device) if _draws_random(args) else None
        first = Target.call(self, args)
        if state is not None:
            _set_rng_state(self.device, state)
        second = Target.call(self, twin)
        try:
            assert_same_outputs(first, second)
            for name in get_primitive(self.primitive).mutates:
                assert_same_outputs(getattr(args, name), getattr(twin, name))
        except AssertionError as exc:
            raise AssertionError(f"{self.primitive} on {self.backend} is not deterministic: {exc}") from None
        return first


def _kernel_reason(backend: str, primitive: str) -> str | None:
    kernel = get_host().registry.kernel(primitive, backend)
    if kernel is not None and not kernel.deterministic:
        return f"{backend}'s {primitive} kernel is not deterministic (Kernel.deterministic=False)"
    return None


def _make_test(prop: Property, backend: str, device: torch.device, profile, max_examples: int, max_dim: int):
    target = _Twice(backend, device, prop.primitive)

    def run(case) -> None:
        try:
            prop.check(case, target)
        except Declined as exc:
            event(f"declined: {str(exc).split('cannot run this call: ', 1)[-1]}")
            reject()

    run.__name__ = run.__qualname__ = f"{prop.primitive}_twice_on_{backend.lower()}"
    inner = hypothesis_settings(profile, max_examples)(given(case=prop.cases(max_dim))(run))

    @pytest.mark.deterministic
    def test(self) -> None:
        missing = _device_unavailable(device)
        if missing is not None:
            pytest.skip(missing)
        _, reason = _served(backend, (prop.primitive,))
        if reason is None:
            reason = _kernel_reason(backend, prop.primitive)
        if reason is not None:
            pytest.skip(reason)
        with torch.autograd.set_multithreading_enabled(False):
            inner()

    test.__name__ = f"test_{prop.primitive}"
    test.__doc__ = (f"{prop.primitive} on {backend}, twice per case: {max_examples} cases, dims up to {max_dim} "
                    f"({profile.name}).")
    return test


def deterministic_property_tests(backend: str, *, device: torch.device | str | None = None,
                                 profile: str | None = None, max_examples: int | Mapping[str, int] | None = None,
                                 max_dim: int | Mapping[str, int] | None = None,
                                 primitives: Iterable[str] | None = None) -> type:
    """A pytest test class with one determinism property test per primitive, against ``backend`` on
    ``device`` (``$TURBO_CONFORMANCE_DEVICE`` or the CPU). ``profile``, ``max_dim`` and ``primitives``
    as :func:`turbo_core.testing.properties.property_tests`; ``max_examples``: cases per primitive (each
    run twice), an int or ``{profile: int}``, default :data:`DEFAULT_EXAMPLES`."""
    name = normalize_backend_name(backend)
    dev = conformance_device(device)
    prof = active_profile(profile, dev)
    examples = pick(max_examples, prof, DEFAULT_EXAMPLES.get(prof.name, prof.max_examples), "max_examples")
    size = pick(max_dim, prof, prof.max_dim, "max_dim")
    props = all_properties()
    if primitives is not None:
        wanted = list(primitives)
        unknown = sorted(set(wanted) - {p.primitive for p in props})
        if unknown:
            raise ValueError(f"primitives: no property for {', '.join(unknown)}")
        props = [p for p in props if p.primitive in wanted]
    attrs = {f"test_{p.primitive}": _make_test(p, name, dev, prof, examples, size) for p in props}
    attrs.update(backend=name, device=dev, profile=prof.name, max_examples=examples, max_dim=size)
    return type(f"TestDeterminism{name.title().replace('_', '')}", (), attrs)
