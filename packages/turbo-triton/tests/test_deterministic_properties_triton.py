"""Run-to-run determinism of every TRITON kernel under the CPU interpreter as a property: each drawn
case (the property tests' strategies, small shapes) runs twice from copies of the same inputs, every
output bit-identical, the first run against float64 math (:mod:`turbo_core.testing.determinism_properties`;
attention with ``deterministic=True``). Few cases: every one runs the interpreted kernels twice, and
grouped_quantize_fp8_with_trans's padded layouts take seconds a call here, so it gets two (the first is
the empty case). The compiled kernels: ``test_deterministic_properties_gpu.py``."""

from turbo_core.dispatch.catalog import primitive_names
from turbo_core.testing.determinism_properties import deterministic_property_tests

_SLOW = ("grouped_quantize_fp8_with_trans",)

TestDeterminismTriton = deterministic_property_tests(
    "TRITON", max_examples={"ci": 3}, max_dim={"ci": 16}, primitives=[p for p in primitive_names() if p not in _SLOW])
TestDeterminismTritonSlow = deterministic_property_tests("TRITON", max_examples={"ci": 2}, max_dim={"ci": 16},
                                                         primitives=_SLOW)
