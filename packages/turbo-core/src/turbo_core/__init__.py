"""turbo-core: op signatures, autograd, modules, backend selection and the plugin host.

Importing turbo_core is cheap: no plugin is loaded, nothing is compiled and no GPU is touched
until the first op call (or ``turbo backends``, or the first read of ``float8_e4m3``,
``float8_e5m2`` or ``float4_e2m1fn_x2``, Primus-Turbo's dtypes of the current GPU).

The subpackages ``ops``, ``modules`` and ``testing`` are attributes too (``turbo_core.ops.gemm``), each
imported on its first access.
"""

import importlib

from turbo_core import low_precision as _low_precision
from turbo_core._version import __version__
from turbo_core.backend import AUTOTUNE, BackendChoice, BackendType, PrecisionType
from turbo_core.dispatch.dispatcher import BackendError
from turbo_core.dispatch.manager import GlobalBackendManager, use_backend
from turbo_core.low_precision import (
    Float4QuantConfig,
    Float8QuantConfig,
    Format,
    ScaleDtype,
    ScalingGranularity,
    ScalingRecipe,
    ScalingStrategy,
)
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair
from turbo_core.stream import TurboStream

__all__ = [
    "AUTOTUNE",
    "BackendChoice",
    "BackendError",
    "BackendType",
    "Float4QuantConfig",
    "Float8QuantConfig",
    "Format",
    "GlobalBackendManager",
    "PrecisionType",
    "QuantizedTensor",
    "QuantizedTensorPair",
    "ScaleDtype",
    "ScalingGranularity",
    "ScalingRecipe",
    "ScalingStrategy",
    "TurboStream",
    "__version__",
    "use_backend",
]

#: Primus-Turbo's platform dtypes (``turbo_core.low_precision`` resolves them on first access, so
#: importing turbo_core touches no GPU); left out of ``__all__`` so a star import stays GPU-free.
_PLATFORM_DTYPES = ("float8_e4m3", "float8_e5m2", "float4_e2m1fn_x2")
#: Subpackages reachable as attributes, imported on first access (``import turbo_core`` stays cheap).
_LAZY_SUBMODULES = ("ops", "modules", "testing")


def __getattr__(name: str) -> object:
    if name in _PLATFORM_DTYPES:
        return getattr(_low_precision, name)
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PLATFORM_DTYPES) | set(_LAZY_SUBMODULES))
