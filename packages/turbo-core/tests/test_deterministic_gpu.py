"""Run-to-run determinism of every primitive on the reference backend TORCH on a GPU, as a property
(:mod:`turbo_core.testing.determinism_properties`): each drawn case twice, every output bit-identical,
the first run against float64 math. On a GPU torch's own kernels may use atomics, so this is where a
reference that claims determinism (``Kernel.deterministic``) could fail to keep it."""

import pytest
import torch

from turbo_core.testing.determinism_properties import deterministic_property_tests

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

TestDeterminismTorchCuda = deterministic_property_tests("TORCH", device="cuda", max_examples={"gpu": 25})
