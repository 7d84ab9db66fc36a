"""``CrossEntropyLoss``: an ``nn.Module`` over turbo's fused ``cross_entropy`` (``torch.nn.CrossEntropyLoss``'s
constructor, without class weights)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.loss import check_label_smoothing
from turbo_core.dispatch.specs.validate import require_choice, require_int
from turbo_core.ops.loss import REDUCTIONS, cross_entropy

__all__ = ["CrossEntropyLoss"]


class CrossEntropyLoss(torch.nn.Module):
    """``loss = cross_entropy(input, target)`` (see :func:`turbo_core.ops.cross_entropy`): the classes in
    the LAST dim of ``input [..., V]``, ``target [...]`` int64, an fp32 result.

    Args:
        ignore_index: rows with this target count for nothing (default -100, as torch's).
        reduction: ``"mean"`` (over the rows that count), ``"sum"`` or ``"none"``.
        label_smoothing: a float in ``[0, 1]``.

    The arguments are keyword-only: ``torch.nn.CrossEntropyLoss``'s first positional argument is
    ``weight`` (per-class weights), which is not supported, nor is its class-in-dim-1 layout for
    inputs of more than two dims.
    """

    __constants__ = ["ignore_index", "reduction", "label_smoothing"]

    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        require_int("ignore_index", ignore_index)
        require_choice("reduction", reduction, REDUCTIONS)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = check_label_smoothing(label_smoothing)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return cross_entropy(input, target, ignore_index=self.ignore_index, reduction=self.reduction,
                             label_smoothing=self.label_smoothing)

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"
