"""turbo-core's conformance suite against turbo-deepep's backends. DEEP_EP runs the one-process
moe_dispatch/combine cases here (its multi-rank runs are in test_all_to_all_distributed.py);
DEEP_EP_BUFFER's cases are skipped with its own reason where no DeepEP-like module is installed.
Cases of primitives these backends do not register are skipped with that reason."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceDeepEp = conformance_suite("DEEP_EP")
TestConformanceDeepEpBuffer = conformance_suite("DEEP_EP_BUFFER")
