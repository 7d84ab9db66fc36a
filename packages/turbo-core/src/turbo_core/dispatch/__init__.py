"""Primitives, the registry, and backend selection (see ``dispatcher`` for the order).

Inside, from the bottom up: ``env``, ``defaults`` and ``primitives`` (the spec registry); ``specs``
(one module per op family); ``catalog`` (every spec, looked up by name); ``manager`` (code and
environment settings); ``selection_cache``; ``autotune``; ``dispatcher`` (selection and ``call``);
``tuning_keys`` (the tuning-database keys of gemm and gemm_fp8); ``launch`` (the launchers and
their ``torch.library`` custom ops). Importing this package registers the tuning keys.
"""

from turbo_core.dispatch import tuning_keys  # noqa: F401  (registers the gemm and gemm_fp8 keys)
from turbo_core.dispatch.catalog import get_primitive, primitive_names, primitives
from turbo_core.dispatch.dispatcher import (
    BackendError,
    BackendOutOfMemoryError,
    KernelError,
    Selection,
    call,
    decline_reason,
    select,
    stats,
)
from turbo_core.dispatch.manager import FAMILIES, GlobalBackendManager, use_backend
from turbo_core.dispatch.primitives import Primitive, args_key

__all__ = [
    "FAMILIES",
    "BackendError",
    "BackendOutOfMemoryError",
    "GlobalBackendManager",
    "KernelError",
    "Primitive",
    "Selection",
    "args_key",
    "call",
    "decline_reason",
    "get_primitive",
    "primitive_names",
    "primitives",
    "select",
    "stats",
    "use_backend",
]
