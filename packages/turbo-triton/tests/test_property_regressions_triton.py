"""The shrunk GPU property examples (``test_property_regressions_gpu.CASES``) under Triton's CPU
interpreter, on poisoned outputs: the launchers' tile and path choices and the kernels' masks and
padding, which the interpreter runs as the GPU does (it does not run the GPU compiler)."""

from __future__ import annotations

import pytest
from gpu_support import poisoned_empty
from test_property_regressions_gpu import CASES

from turbo_core.testing.properties.harness import Target


@pytest.mark.parametrize("name", list(CASES))
def test_shrunk_property_example_in_the_interpreter(name):
    primitive, check, case = CASES[name]
    with poisoned_empty():
        check(case, Target("TRITON", "cpu", primitive))
