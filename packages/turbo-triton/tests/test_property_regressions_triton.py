"""The shrunk GPU property examples (``test_property_regressions_gpu.CASES``) under Triton's CPU
interpreter, on poisoned outputs, with the interpreter's tiles and with the tiles the launchers pick
on a GPU (``turbo_triton._runtime.gpu_tiles``): the launchers' path choices and the kernels' masks
and padding at both tile shapes, which the interpreter runs as the GPU does (it does not run the GPU
compiler, nor the inline-assembly paths)."""

from __future__ import annotations

import contextlib

import pytest
from gpu_support import poisoned_empty
from test_property_regressions_gpu import CASES

from turbo_core.testing.properties.harness import Target
from turbo_triton import _runtime


@pytest.mark.parametrize("tiles", ["interpreter", "gpu"])
@pytest.mark.parametrize("name", list(CASES))
def test_shrunk_property_example_in_the_interpreter(name, tiles):
    primitive, check, case = CASES[name]
    with _runtime.gpu_tiles() if tiles == "gpu" else contextlib.nullcontext(), poisoned_empty():
        check(case, Target("TRITON", "cpu", primitive))
