"""The property tests on the GPU (``@pytest.mark.gpu``, run by ``nox -s gpu``): the reference backend
TORCH with every example's inputs on ``cuda``, against the same float64 math, under the ``gpu``
hypothesis profile (2,000 examples per primitive, dims up to 256; ``$TURBO_HYPOTHESIS_PROFILE``
overrides it)."""

import pytest
import torch

from turbo_core.testing.nan_policy import nan_policy_suite
from turbo_core.testing.properties import property_tests

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

TestPropertiesTorchCuda = property_tests("TORCH", device="cuda")
TestNanPolicyTorchCuda = nan_policy_suite("TORCH", device="cuda")
