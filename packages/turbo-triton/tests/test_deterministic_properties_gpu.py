"""Run-to-run determinism of every TRITON kernel compiled on a GPU, as a property
(:mod:`turbo_core.testing.determinism_properties`): each drawn case twice from copies of the same
inputs, every output and written argument bit-identical, the first run against float64 math; attention
with ``deterministic=True`` (its backward's ``dq`` without atomics). Where a kernel accumulates with
atomics in an order the hardware picks, the bits of two runs differ and this fails. Run with
``TRITON_INTERPRET=0 pytest --turbo-only=gpu``."""

import pytest
from gpu_support import COMPILED

from turbo_core.testing.determinism_properties import deterministic_property_tests

pytestmark = [pytest.mark.gpu, COMPILED]

# 25 cases a primitive, dims up to 64: each new shape may compile a kernel variant (seconds, once)
TestDeterminismTritonGpu = deterministic_property_tests("TRITON", device="cuda", max_examples={"gpu": 25},
                                                         max_dim={"gpu": 64})
