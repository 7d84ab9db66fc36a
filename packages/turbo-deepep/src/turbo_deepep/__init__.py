"""turbo-deepep: turbo backend DEEP_EP. Importing this package is cheap (no kernel library)."""

__version__ = "0.1.0"
