"""turbo-deepep: turbo backend DEEP_EP. Importing this package is cheap (no kernel library).

``Buffer``, ``Config``, ``EventOverlap`` and ``EventHandle`` (DeepEP's API over turbo's all-to-all,
:mod:`turbo_deepep.deep_ep`) are attributes imported on first access.
"""

__version__ = "0.1.0"

_DEEP_EP_NAMES = ("Buffer", "Config", "EventHandle", "EventOverlap")


def __getattr__(name: str):
    if name in _DEEP_EP_NAMES:
        from turbo_deepep import deep_ep

        return getattr(deep_ep, name)
    raise AttributeError(f"module 'turbo_deepep' has no attribute {name!r}")
