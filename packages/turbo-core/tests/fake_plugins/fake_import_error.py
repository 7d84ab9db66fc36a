"""Fake plugin whose import fails."""

raise ImportError("fake_import_error: simulated missing dependency libfoo.so")
