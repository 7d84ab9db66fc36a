"""turbo-core's conformance suite against CK on the GPU (``@pytest.mark.gpu``; ROCm torch names its
devices ``cuda``): every case of the primitives CK serves, pinned to CK; skipped with the backend's
reason where its extension cannot load."""

import pytest

from turbo_core.testing.conformance import conformance_suite

pytestmark = pytest.mark.gpu

TestConformanceCkGpu = conformance_suite("CK", device="cuda")
