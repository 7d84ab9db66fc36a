"""The ``turbo`` command."""

from turbo_core.cli.main import main

__all__ = ["main"]
