"""turbo-core's conformance suite against AITER on the GPU (``@pytest.mark.gpu``; ROCm torch names
its devices ``cuda``): every case of the primitives AITER serves, pinned to AITER, on the real
``aiter`` library; skipped with the backend's reason where it is not installed."""

import pytest

from turbo_core.testing.conformance import conformance_suite

pytestmark = pytest.mark.gpu

TestConformanceAiterGpu = conformance_suite("AITER", device="cuda")
