"""Primitives, the registry, and backend selection (see ``dispatcher`` for the order)."""

from turbo_core.dispatch.dispatcher import BackendError, Selection, call, decline_reason, select, stats
from turbo_core.dispatch.manager import FAMILIES, GlobalBackendManager, use_backend
from turbo_core.dispatch.primitives import Primitive, args_key, get_primitive, primitive_names, primitives

__all__ = [
    "FAMILIES",
    "BackendError",
    "GlobalBackendManager",
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
