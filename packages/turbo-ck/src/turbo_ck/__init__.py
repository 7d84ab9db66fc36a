"""turbo-ck: turbo backend CK. Importing this package is cheap (no kernel library)."""

__version__ = "0.1.0"
