"""``turbo accuracy``: every available backend against float64 math, per op family and precision.

:mod:`.cases` builds the cases from the benchmark suites' model-shape tables (the same inputs and
float64 oracles as ``turbo bench``), :mod:`.runner` runs each case on each backend through
``dispatcher.call`` under ``use_backend`` and scores it with the gates of
:mod:`turbo_core.testing.numerics` (the ones the tests use), :mod:`.report` prints and writes rows.
"""

from __future__ import annotations

from turbo_core.accuracy.cases import FAMILIES, AccCase, build_cases
from turbo_core.accuracy.runner import run_cases

__all__ = ["FAMILIES", "AccCase", "build_cases", "run_cases"]
