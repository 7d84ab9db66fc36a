"""The property tests and the NaN/Inf policy against TRITON on the GPU with the compiled kernels
(``@pytest.mark.gpu``; run with ``TRITON_INTERPRET=0``, see ``gpu_support``): every primitive TRITON
serves, each example also run on TORCH, both against float64 math, under the ``gpu`` hypothesis
profile (2,000 examples per primitive, dims up to 256)."""

import pytest
from gpu_support import COMPILED

from turbo_core.testing.nan_policy import nan_policy_suite
from turbo_core.testing.properties import property_tests

pytestmark = [pytest.mark.gpu, COMPILED]

TestPropertiesTritonGpu = property_tests("TRITON", device="cuda")
TestNanPolicyTritonGpu = nan_policy_suite("TRITON", device="cuda")
