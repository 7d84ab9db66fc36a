"""turbo-core's conformance suite against the DEEP_EP backend. Every case is skipped here with the
backend's own reason (unavailable on this machine, or no kernel for the case's primitive yet)
and runs where the backend can."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceDeepEp = conformance_suite("DEEP_EP")
