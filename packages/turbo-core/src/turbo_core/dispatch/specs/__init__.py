"""Typed specs of every primitive, one module per family (importing defines them)."""

from turbo_core.dispatch.specs import gemm  # noqa: F401
