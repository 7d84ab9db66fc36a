"""turbo-core's conformance suite against turbo-deepep's backends on the GPU (``@pytest.mark.gpu``):
DEEP_EP's one-process moe_dispatch/combine cases on ``cuda`` (its multi-GPU runs are
``test_all_to_all_distributed.py::test_nccl`` and ``test_all_to_all_gpu.py``); DEEP_EP_BUFFER's cases
are skipped with its own reason where no DeepEP-like module is installed."""

import pytest

from turbo_core.testing.conformance import conformance_suite

pytestmark = pytest.mark.gpu

TestConformanceDeepEpGpu = conformance_suite("DEEP_EP", device="cuda")
TestConformanceDeepEpBufferGpu = conformance_suite("DEEP_EP_BUFFER", device="cuda")
