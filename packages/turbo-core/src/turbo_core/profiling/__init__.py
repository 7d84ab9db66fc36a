"""Profiling turbo calls: op labels (``labels``, imported by dispatch, light), the hot-kernel table
(``table``) and running a suite or a user script under ``torch.profiler`` (``session``).

``turbo profile`` (``turbo_core.cli.profile_cmd``) is the command-line front end.
"""

from turbo_core.profiling.labels import label, parse_label, profiler_active

__all__ = ["label", "parse_label", "profiler_active"]
