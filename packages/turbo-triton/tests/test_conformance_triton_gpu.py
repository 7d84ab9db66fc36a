"""turbo-core's conformance suite against TRITON on the GPU with the compiled kernels
(``@pytest.mark.gpu``; run with ``TRITON_INTERPRET=0``, see ``gpu_support``): every case of the
primitives TRITON serves, forward and backward through the public ops, pinned to TRITON."""

import pytest
from gpu_support import COMPILED

from turbo_core.testing.conformance import conformance_suite

pytestmark = [pytest.mark.gpu, COMPILED]

TestConformanceTritonGpu = conformance_suite("TRITON", device="cuda")
