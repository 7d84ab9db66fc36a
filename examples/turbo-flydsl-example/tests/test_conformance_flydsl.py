"""The shared conformance suite against this third-party backend: one line of configuration.
The gemm cases run (the fused-wgrad ones are declined with the kernel's reason); other families'
cases are skipped because FLYDSL registers no kernel for them."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceFlydsl = conformance_suite("FLYDSL")
