"""turbo-core's property tests against this third-party backend: one line. FLYDSL serves gemm, so
test_gemm runs (its accumulate-into-out cases are declined with the kernel's reason and redrawn);
every other primitive's test is skipped because FLYDSL registers no kernel for it."""

from turbo_core.testing.properties import property_tests

TestPropertiesFlydsl = property_tests("FLYDSL")
