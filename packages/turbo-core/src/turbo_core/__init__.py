"""turbo-core: op signatures, autograd, modules, backend selection and the plugin host.

Importing turbo_core is cheap: no plugin is loaded, nothing is compiled and no GPU is touched
until the first op call (or ``turbo backends``).
"""

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
    "__version__",
    "use_backend",
]
