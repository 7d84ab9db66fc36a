"""turbo-core's property tests (hypothesis, every primitive against float64 math) against TRITON
under the CPU interpreter: a fixed seed, fewer examples and smaller shapes than the TORCH run (every
example runs the interpreted kernels and the TORCH reference): 30 examples per primitive at dims up to
20, and 10 for the fused row + column FP8 quantizers, whose interpreted kernels take seconds a call
(their column copies pad each group to 128 rows)."""

from turbo_core.testing.properties import all_properties, property_tests

SLOW = ("quantize_fp8_with_trans", "grouped_quantize_fp8_with_trans")

TestPropertiesTriton = property_tests("TRITON", max_examples={"ci": 30}, max_dim={"ci": 20},
                                      primitives=[p.primitive for p in all_properties() if p.primitive not in SLOW])
TestPropertiesTritonSlowInterpreted = property_tests("TRITON", max_examples={"ci": 10}, max_dim={"ci": 20},
                                                     primitives=SLOW)
