"""turbo-core's conformance suite against the TRITON backend (CPU interpreter here; GPU on the
GPU machine): every gemm case forward and backward, pinned with use_backend."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceTriton = conformance_suite("TRITON")
