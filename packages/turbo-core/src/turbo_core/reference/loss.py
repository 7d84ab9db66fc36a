"""Reference cross entropy (``cross_entropy_fwd``, ``cross_entropy_bwd``).

Computed in float64, in slices of rows (about 2**24 elements each: a vocabulary-wide ``[N, V]`` on a
GPU needs no ``[N, V]`` float64 temporaries), and rounded once: ``loss``/``lse`` to fp32, ``dlogits``
to logits' dtype. Ignored rows are selected away with ``torch.where``, so whatever they hold (NaN
included) never reaches the result. A target outside ``[0, V)`` that is not ``ignore_index`` (which
the validator lets through only where it cannot read the targets: GPU tensors) gives its
row a NaN loss and a NaN ``dlogits`` row, as the spec says.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.plugins.types import Kernel

_F64 = torch.float64
_SLICE_ELEMENTS = 2**24


def _row_slices(rows: int, classes: int):
    step = max(1, _SLICE_ELEMENTS // classes)
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


def _rows(logits: torch.Tensor, target: torch.Tensor, ignore_index: int):
    """``(x, t, ignored, valid)`` of a slice: x in float64 with ignored rows zeroed (never read)."""
    ignored = target == ignore_index
    valid = (target >= 0) & (target < logits.shape[1])
    x = torch.where(ignored.unsqueeze(1), 0.0, logits.to(_F64))
    return x, target.clamp(0, logits.shape[1] - 1), ignored, valid


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    """Row-wise ``log(sum(exp(x)))`` in the spec's convention: NaN for a row holding a NaN or ``+Inf``,
    ``-Inf`` for a row of only ``-Inf``."""
    lse = torch.logsumexp(x, dim=-1)
    return torch.where(x.isnan().any(-1) | x.isposinf().any(-1), torch.nan, lse)


def cross_entropy_fwd(args: CrossEntropyFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    logits = args.logits
    rows, classes = logits.shape
    eps = float(args.label_smoothing)
    loss = torch.zeros(rows, dtype=torch.float32, device=logits.device)
    lse = torch.zeros(rows, dtype=torch.float32, device=logits.device)
    for s in _row_slices(rows, classes):
        x, t, ignored, valid = _rows(logits[s], args.target[s], args.ignore_index)
        row_lse = logsumexp(x)
        value = torch.zeros_like(row_lse)
        if eps < 1.0:
            value = value + (1.0 - eps) * (row_lse - x.gather(1, t.unsqueeze(1)).squeeze(1))
        if eps > 0.0:
            value = value + eps * (row_lse - x.mean(dim=1))
        value = torch.where(valid, value, torch.nan)
        loss[s] = torch.where(ignored, 0.0, value).to(torch.float32)
        lse[s] = torch.where(ignored, 0.0, row_lse).to(torch.float32)
    return loss, lse


def cross_entropy_bwd(args: CrossEntropyBwdArgs) -> torch.Tensor:
    logits = args.logits
    rows, classes = logits.shape
    eps = float(args.label_smoothing)
    dlogits = torch.empty_like(logits)
    cols = torch.arange(classes, device=logits.device)
    for s in _row_slices(rows, classes):
        x, t, ignored, valid = _rows(logits[s], args.target[s], args.ignore_index)
        grad = torch.exp(x - args.lse[s].to(_F64).unsqueeze(1))
        if eps > 0.0:
            grad = grad - eps / classes
        if eps < 1.0:
            grad = torch.where(cols == t.unsqueeze(1), grad - (1.0 - eps), grad)
        dloss = torch.where(valid, args.dloss[s].to(_F64), torch.nan)
        grad = grad * dloss.unsqueeze(1)
        dlogits[s] = torch.where(ignored.unsqueeze(1), 0.0, grad).to(logits.dtype)
    return dlogits


_VARIANTS = ("fp32", "fp16", "bf16")

KERNELS = [
    Kernel("cross_entropy_fwd", BackendType.TORCH, cross_entropy_fwd, variants=_VARIANTS, priority=-100),
    Kernel("cross_entropy_bwd", BackendType.TORCH, cross_entropy_bwd, variants=_VARIANTS, priority=-100),
]
