"""``turbo demo``: a small Llama-style decoder (dense + MoE blocks) built from ``turbo_core.modules``
and ``turbo_core.ops``, trained on synthetic Markov-chain text (see :mod:`.model`, :mod:`.data`,
:mod:`.train`; :mod:`.plain` holds the same model in plain PyTorch, the parity tests' oracle and
``turbo bench train``'s PyTorch baseline)."""

from turbo_core.demo.data import MarkovData
from turbo_core.demo.model import DemoConfig, TurboDecoder, fp8_recipe
from turbo_core.demo.plain import PlainDecoder
from turbo_core.demo.train import DemoResult, op_table, train

__all__ = ["DemoConfig", "DemoResult", "MarkovData", "PlainDecoder", "TurboDecoder", "fp8_recipe", "op_table", "train"]
