"""turbo-core's conformance suite against the HIPBLASLT backend. Every case is skipped here with the
backend's own reason (unavailable on this machine, or no kernel for the case's primitive yet)
and runs where the backend can."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceHipblaslt = conformance_suite("HIPBLASLT")
