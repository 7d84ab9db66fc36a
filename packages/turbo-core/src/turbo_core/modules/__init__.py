"""``torch.nn`` modules built on turbo ops. Each module file defines __all__."""

import sys as _sys

from turbo_core.modules.attention import *  # noqa: F401,F403
from turbo_core.modules.deepep_token_dispatcher import *  # noqa: F401,F403
from turbo_core.modules.float8_convert import *  # noqa: F401,F403
from turbo_core.modules.float8_linear import *  # noqa: F401,F403
from turbo_core.modules.grouped_linear import *  # noqa: F401,F403
from turbo_core.modules.linear import *  # noqa: F401,F403
from turbo_core.modules.loss import *  # noqa: F401,F403
from turbo_core.modules.moe_token_dispatcher import *  # noqa: F401,F403
from turbo_core.modules.normalization import *  # noqa: F401,F403

_FILES = ("attention", "deepep_token_dispatcher", "float8_convert", "float8_linear", "grouped_linear", "linear", "loss", "moe_token_dispatcher", "normalization")
__all__ = [name for f in _FILES for name in _sys.modules[f"{__name__}.{f}"].__all__]
