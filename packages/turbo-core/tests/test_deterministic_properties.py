"""Run-to-run determinism of every primitive on the reference backend TORCH (CPU) as a property: each
drawn case (the property tests' strategies) runs twice from copies of the same inputs and the same
random-number state, and every output and written argument must be bit-identical; the first run is
checked against float64 math (:mod:`turbo_core.testing.determinism_properties`). Attention runs with
``deterministic=True``. Select it with ``pytest --turbo-only=deterministic``; the hand-written cases are
``test_deterministic.py``, the GPU run ``test_deterministic_gpu.py``."""

from turbo_core.testing.determinism_properties import deterministic_property_tests

TestDeterminismTorch = deterministic_property_tests("TORCH", max_examples={"ci": 10})
