"""turbo-core's conformance suite against CUDNN on an NVIDIA GPU (``@pytest.mark.gpu``): every case
of the attention primitives CUDNN serves, pinned to CUDNN, on PyTorch's real cuDNN operators;
skipped with the backend's reason where it cannot run."""

import pytest

from turbo_core.testing.conformance import conformance_suite

pytestmark = pytest.mark.gpu

TestConformanceCudnnGpu = conformance_suite("CUDNN", device="cuda")
