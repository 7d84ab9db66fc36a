"""Test kit shared by turbo-core and every backend package (third-party ones included)."""

from turbo_core.testing.plugin_checks import backend_row, imported_modules_after

__all__ = ["backend_row", "imported_modules_after"]
