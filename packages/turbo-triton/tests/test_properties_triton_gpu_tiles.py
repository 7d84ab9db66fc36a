"""turbo-core's property tests against TRITON under the CPU interpreter with the tiles the launchers
pick on a GPU (``turbo_triton._runtime.gpu_tiles``; ``test_properties_triton.py`` runs the
interpreter's own, larger tiles): the GPU's tile shapes, masks and padding on the same kind of drawn
cases, 10 examples per primitive at dims up to 20."""

import pytest

from turbo_core.testing.properties import property_tests
from turbo_triton import _runtime


@pytest.fixture(autouse=True)
def _gpu_tiles():
    with _runtime.gpu_tiles():
        yield


TestPropertiesTritonGpuTiles = property_tests("TRITON", max_examples={"ci": 10}, max_dim={"ci": 20})
