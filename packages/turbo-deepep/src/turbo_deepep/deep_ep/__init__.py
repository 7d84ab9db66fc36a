"""DeepEP's ``deep_ep`` API over turbo's own all-to-all: ``Buffer``, ``Config``, ``EventOverlap``,
``EventHandle`` (also in :mod:`turbo_deepep.deep_ep.utils`, as in DeepEP) and ``topk_idx_t``.

Code written for DeepEP's normal mode imports these instead of ``deep_ep``'s and runs unchanged;
see :mod:`turbo_deepep.deep_ep.buffer` for the semantics and the repository's
``docs/deepep-compat.md`` for where it differs from DeepEP. The rows move through turbo's
``moe_dispatch`` / ``moe_combine`` primitives on backend ``DEEP_EP`` (any process group that can
``all_to_all_single``, gloo on the CPU included), never through DeepEP.
"""

from turbo_deepep.deep_ep.buffer import Buffer, DispatchHandle, topk_idx_t
from turbo_deepep.deep_ep.config import Config
from turbo_deepep.deep_ep.utils import EventHandle, EventOverlap

__all__ = ["Buffer", "Config", "DispatchHandle", "EventHandle", "EventOverlap", "topk_idx_t"]
