"""Hypothesis settings profiles of the property tests, and which one a run uses.

=========  ==============  ==========  ===============================================================
profile    examples        largest     use
           per primitive   dim drawn
=========  ==============  ==========  ===============================================================
``ci``     200             40          the CPU CI: a fixed seed (``derandomize``), no example database
``gpu``    2000            256         ``nox -s gpu``: a fixed seed, larger shapes
``dev``    200             64          local fuzzing: a new seed every run, failures kept in the
                                       ``.hypothesis`` example database and replayed first
=========  ==============  ==========  ===============================================================

The profile is ``$TURBO_HYPOTHESIS_PROFILE`` when set, else ``gpu`` for tests that run on a GPU
(``property_tests(..., device="cuda")``, where torch sees one), else ``ci``. A backend may lower the
example count or the largest dim for itself (``property_tests(..., max_examples=..., max_dim=...)``),
e.g. for Triton under its CPU interpreter.

Every profile prints the ``@reproduce_failure`` blob of a failing example (``print_blob``), and the
falsifying case itself (its shapes, flags and the seed its tensors are drawn from) is printed by
hypothesis: pasting either into the test reproduces the failure. Deadlines are off (a shared CPU
times noisily).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "PROFILE_ENV", "Profile", "active_profile", "hypothesis_settings", "pick"]

#: Environment variable naming the profile (``ci``, ``gpu`` or ``dev``).
PROFILE_ENV = "TURBO_HYPOTHESIS_PROFILE"


@dataclass(frozen=True)
class Profile:
    """``max_examples`` per primitive, ``max_dim``: the largest size drawn for a free dimension
    (rows, columns, sequence lengths; a "huge" group is up to four times that)."""

    name: str
    max_examples: int
    max_dim: int
    derandomize: bool


PROFILES: dict[str, Profile] = {
    "ci": Profile("ci", max_examples=200, max_dim=40, derandomize=True),
    "gpu": Profile("gpu", max_examples=2000, max_dim=256, derandomize=True),
    "dev": Profile("dev", max_examples=200, max_dim=64, derandomize=False),
}

_SUPPRESSED = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example)

for _p in PROFILES.values():
    settings.register_profile(
        f"turbo-{_p.name}",
        max_examples=_p.max_examples,
        derandomize=_p.derandomize,
        database=None if _p.derandomize else settings.default.database,
        deadline=None,
        print_blob=True,
        suppress_health_check=_SUPPRESSED,
    )


def active_profile(name: str | None = None, device: torch.device | str | None = None) -> Profile:
    """The profile named ``name``; when ``None``, ``$TURBO_HYPOTHESIS_PROFILE`` if set and not
    empty, else ``gpu`` when ``device`` is a GPU that torch sees, else ``ci``. ``ValueError``
    naming the source for an unknown name."""
    source = "profile"
    if name is None:
        env = os.environ.get(PROFILE_ENV, "").strip()
        if env:
            name, source = env, f"profile (${PROFILE_ENV})"
        else:
            on_gpu = device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available()
            name = "gpu" if on_gpu else "ci"
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"{source}: unknown hypothesis profile {name!r}; known: {', '.join(PROFILES)}") from None


def pick(value: int | Mapping[str, int] | None, profile: Profile, default: int, what: str) -> int:
    """A per-backend override: an int (any profile), a ``{profile name: int}`` mapping (profiles
    not named keep ``default``) or ``None`` (``default``)."""
    if value is None:
        return default
    if isinstance(value, Mapping):
        unknown = set(value) - set(PROFILES)
        if unknown:
            raise ValueError(f"{what}: unknown profile(s) {sorted(unknown)}; known: {', '.join(PROFILES)}")
        value = value.get(profile.name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what}: expected a positive int, got {value!r}")
    return value


def hypothesis_settings(profile: Profile, max_examples: int) -> settings:
    """The hypothesis settings of ``profile`` with ``max_examples`` examples."""
    return settings(settings.get_profile(f"turbo-{profile.name}"), max_examples=max_examples)
