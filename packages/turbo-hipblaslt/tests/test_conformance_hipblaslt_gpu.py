"""turbo-core's conformance suite against HIPBLASLT on the GPU (``@pytest.mark.gpu``): every case of
the primitives it serves, forward and backward through the public ops, pinned to HIPBLASLT (a declined
call is skipped with the backend's reason, never passed by another backend). On the GPU machine run
``TURBO_HIPBLASLT_JIT=1 pytest --turbo-only=gpu packages/turbo-hipblaslt/tests`` unless the wheel
was built with a toolkit."""

import pytest

from turbo_core.testing.conformance import conformance_suite

pytestmark = pytest.mark.gpu

TestConformanceHipblasltGpu = conformance_suite("HIPBLASLT", device="cuda")
