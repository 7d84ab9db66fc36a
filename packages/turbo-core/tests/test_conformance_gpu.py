"""The shared conformance suite on the GPU: the reference backend TORCH with every case's inputs on
``cuda`` (the reference runs on GPUs too), against the same float64 math as the CPU run. Other
backends run it the same way (``conformance_suite("TRITON", device="cuda")``, in their packages' GPU
tests)."""

import pytest
import torch

from turbo_core.testing.conformance import conformance_suite

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

TestConformanceTorchCuda = conformance_suite("TORCH", device="cuda")
