"""The single version of every turbo package (kept in step by `nox -s lint`)."""

__version__ = "0.1.0"
