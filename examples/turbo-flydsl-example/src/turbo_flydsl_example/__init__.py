"""An example third-party turbo backend named FLYDSL."""

__version__ = "0.1.0"
