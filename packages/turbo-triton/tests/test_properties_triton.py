"""turbo-core's property tests (hypothesis, every primitive against float64 math) against TRITON
under the CPU interpreter: a fixed seed, fewer examples and smaller shapes than the TORCH run (every
example runs the interpreted kernels and the TORCH reference): 30 examples per primitive at dims up to
20."""

from turbo_core.testing.properties import property_tests

TestPropertiesTriton = property_tests("TRITON", max_examples={"ci": 30}, max_dim={"ci": 20})
