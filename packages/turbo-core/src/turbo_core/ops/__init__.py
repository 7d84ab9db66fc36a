"""The public functional API (Primus-Turbo's names and arguments). Each module defines __all__."""

import sys as _sys

from turbo_core.ops.activation import *  # noqa: F401,F403
from turbo_core.ops.activation_fp8 import *  # noqa: F401,F403
from turbo_core.ops.async_tp import *  # noqa: F401,F403
from turbo_core.ops.attention import *  # noqa: F401,F403
from turbo_core.ops.attention_cp import *  # noqa: F401,F403
from turbo_core.ops.fp8_all_to_all import *  # noqa: F401,F403
from turbo_core.ops.fused_mega_moe import *  # noqa: F401,F403
from turbo_core.ops.gemm import *  # noqa: F401,F403
from turbo_core.ops.gemm_fp4 import *  # noqa: F401,F403  (before gemm_fp8: the name gemm_fp4 ends as the function)
from turbo_core.ops.gemm_fp8 import *  # noqa: F401,F403
from turbo_core.ops.grouped_gemm import *  # noqa: F401,F403
from turbo_core.ops.grouped_gemm_fp8 import *  # noqa: F401,F403
from turbo_core.ops.loss import *  # noqa: F401,F403
from turbo_core.ops.moe import *  # noqa: F401,F403
from turbo_core.ops.normalization import *  # noqa: F401,F403
from turbo_core.ops.normalization_fp8 import *  # noqa: F401,F403
from turbo_core.ops.quantization import *  # noqa: F401,F403
from turbo_core.ops.sparse_mla import *  # noqa: F401,F403
from turbo_core.ops.weight_cache import *  # noqa: F401,F403

_FAMILIES = ("activation", "activation_fp8", "async_tp", "attention", "attention_cp", "fp8_all_to_all", "fused_mega_moe", "gemm", "gemm_fp4", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8", "loss", "moe", "normalization",
             "normalization_fp8", "quantization", "sparse_mla", "weight_cache")
__all__ = list(dict.fromkeys(name for fam in _FAMILIES for name in _sys.modules[f"{__name__}.{fam}"].__all__))
