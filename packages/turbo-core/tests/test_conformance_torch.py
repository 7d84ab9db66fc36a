"""The shared conformance suite (every family's cases, forward and backward against float64 math)
run against the reference backend TORCH, exactly as a backend package runs it against itself."""

from turbo_core.testing.conformance import conformance_suite

TestConformanceTorch = conformance_suite("TORCH")
