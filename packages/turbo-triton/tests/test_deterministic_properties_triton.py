"""Run-to-run determinism of every TRITON kernel under the CPU interpreter as a property: each drawn
case (the property tests' strategies, small shapes) runs twice from copies of the same inputs, every
output bit-identical, the first run against float64 math (:mod:`turbo_core.testing.determinism_properties`;
attention with ``deterministic=True``). Few cases (3 a primitive): every one runs the interpreted
kernels twice. The compiled kernels: ``test_deterministic_properties_gpu.py``."""

from turbo_core.testing.determinism_properties import deterministic_property_tests

TestDeterminismTriton = deterministic_property_tests("TRITON", max_examples={"ci": 3}, max_dim={"ci": 16})
