"""When an op needs its autograd ``Function``.

``torch.autograd.Function.apply`` costs several microseconds of host time a call even when no graph is
recorded. A call whose inputs need no gradient (``torch.no_grad()``, inference, frozen weights and
inputs) runs the forward launcher directly instead: the result is the same tensor computation, with
no graph node.
"""

from __future__ import annotations

import torch

__all__ = ["grad_needed"]


def grad_needed(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a call on ``tensors``: grad mode is on and one of them (``None``
    skipped) requires grad."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is not None and t.requires_grad:
            return True
    return False
