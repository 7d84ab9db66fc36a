"""Cross-entropy primitives over rows of logits: ``cross_entropy_fwd`` and ``cross_entropy_bwd``.

Both belong to the selection family ``cross_entropy`` (``TURBO_CROSS_ENTROPY_BACKEND`` selects the
backend of both; ``TURBO_CROSS_ENTROPY_FWD_BACKEND`` / ``TURBO_CROSS_ENTROPY_BWD_BACKEND`` one of
them). The reductions (``mean`` over the rows that count, ``sum``) are the op's, on the device
(``turbo_core.ops.cross_entropy``); the primitives work per row.

Targets. A row whose target equals ``ignore_index`` is *ignored*. Any other target must lie in
``[0, V)``. Where reading the targets costs no device sync (CPU tensors:
:func:`~turbo_core.dispatch.specs.validate.values_readable`; eagerly, and when a compiled graph runs
the primitive) the validator checks that and raises ``ValueError`` naming the first bad row, before
any kernel runs. On a GPU nothing is checked on the host (that would be a sync a call), and a kernel
meets the bad row: it never reads outside the row, and gives the row a NaN ``loss`` (its ``lse`` is
the row's) and a NaN ``dlogits`` row, so the reduced loss is NaN and the step shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    require_contiguous,
    require_int,
    require_same_device,
    require_shape,
    require_tensor,
    values_readable,
)

__all__ = [
    "CROSS_ENTROPY_BWD",
    "CROSS_ENTROPY_FWD",
    "CrossEntropyBwdArgs",
    "CrossEntropyFwdArgs",
    "check_label_smoothing",
    "check_target_values",
]


@dataclass(frozen=True, eq=False)
class CrossEntropyFwdArgs:
    """Per-row cross entropy of ``logits`` against class indices ``target``, with label smoothing.

    Shapes and dtypes (every tensor contiguous, all on one device):

    * ``logits``: ``[N, V]``, fp16/bf16/fp32, ``V >= 1``, ``N >= 0``.
    * ``target``: ``[N]`` int64: a class in ``[0, V)``, or ``ignore_index``. Another value passes
      the validator only on a GPU (the host does not read GPU targets): a kernel never reads outside
      the row for it and gives the row a NaN ``loss`` (``lse`` is the row's).
    * ``ignore_index``: an int. ``label_smoothing``: ``eps``, a float in ``[0, 1]``.

    Numerics, in fp32 (or wider), row by row with ``x = logits[i]`` and ``t = target[i]``::

        lse[i]  = log(sum_j exp(x[j]))                     (max-shifted: exact for any finite x)
        loss[i] = (1 - eps) * (lse[i] - x[t]) + eps * (lse[i] - mean_j x[j])

    which is ``torch.nn.functional.cross_entropy(..., reduction="none", label_smoothing=eps)`` of
    the row. A term whose weight is 0 is left out (``eps = 0``: no ``mean_j x[j]``; ``eps = 1``: no
    ``x[t]``), so it cannot turn an infinite logit into NaN. Non-finite logits: a NaN or ``+Inf``
    makes ``lse`` NaN (``exp`` of ``Inf - Inf``); ``-Inf`` is a class of probability 0 (a row of
    only ``-Inf`` has ``lse = -Inf``); the rest is IEEE arithmetic of the formula.

    Ignored rows (``t == ignore_index``) are never read (their logits may hold anything, NaN
    included): ``loss`` and ``lse`` are 0 there.

    Result: a 2-tuple ``(loss, lse)``, both ``[N]`` fp32.
    """

    logits: torch.Tensor
    target: torch.Tensor
    ignore_index: int = -100
    label_smoothing: float = 0.0


@dataclass(frozen=True, eq=False)
class CrossEntropyBwdArgs:
    """Gradient of :class:`CrossEntropyFwdArgs`' ``loss`` with respect to ``logits``, given ``dloss``.

    Shapes and dtypes (every tensor contiguous, all on one device): ``dloss`` ``[N]`` fp32;
    ``logits`` ``[N, V]`` fp16/bf16/fp32; ``target`` ``[N]`` int64; ``lse`` ``[N]`` fp32 (the
    forward's); ``ignore_index`` and ``label_smoothing`` (``eps``) as in the forward.

    Numerics, in fp32 (or wider), from the given ``lse``::

        dlogits[i, j] = dloss[i] * (exp(x[j] - lse[i]) - (1 - eps) * [j == t] - eps / V)

    rounded once to logits' dtype. Ignored rows are never read (``logits``, ``dloss`` and ``lse``
    there may hold anything) and get zeros; a row whose target is outside ``[0, V)`` (and not
    ``ignore_index``) gets NaN.

    Result: ``dlogits`` ``[N, V]`` in logits' dtype.
    """

    dloss: torch.Tensor
    logits: torch.Tensor
    target: torch.Tensor
    lse: torch.Tensor
    ignore_index: int = -100
    label_smoothing: float = 0.0


def check_label_smoothing(value: object) -> float:
    """``label_smoothing`` is a real number (not a bool) in ``[0, 1]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"label_smoothing: expected a float in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:  # (also false for NaN; no math.isfinite: traceable by dynamo)
        raise ValueError(f"label_smoothing: expected a float in [0, 1], got {value!r}")
    return float(value)


def check_target_values(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """Every target is a class in ``[0, classes)`` or ``ignore_index``; checked only where the values
    are readable for free (:func:`values_readable`: CPU tensors, eagerly). ``ValueError`` naming the
    first bad row."""
    if target.numel() == 0 or not values_readable(target):
        return
    bad = ((target < 0) | (target >= classes)) & (target != ignore_index)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"target: expected class indices in [0, {classes}) or ignore_index ({ignore_index}), got "
                         f"{int(target[row])} at row {row}")


def _check_logits(logits: object) -> torch.Tensor:
    require_tensor("logits", logits, ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError(f"logits: expected at least one class (a non-empty last dim), got shape {tuple(logits.shape)}")
    require_contiguous("logits", logits)
    return logits


def _check_row_vector(name: str, value: object, dtype: torch.dtype, rows: int) -> None:
    require_tensor(name, value, ndim=1, dtypes=(dtype,))
    require_shape(name, value, (rows,), "one per row of logits")
    require_contiguous(name, value)


def _check_common(logits: torch.Tensor, target: object, ignore_index: object, label_smoothing: object) -> None:
    _check_row_vector("target", target, torch.int64, logits.shape[0])
    require_int("ignore_index", ignore_index)
    check_label_smoothing(label_smoothing)


def _validate_fwd(args: CrossEntropyFwdArgs) -> None:
    logits = _check_logits(args.logits)
    _check_common(logits, args.target, args.ignore_index, args.label_smoothing)
    require_same_device(logits=logits, target=args.target)
    check_target_values(args.target, logits.shape[1], args.ignore_index)


def _validate_bwd(args: CrossEntropyBwdArgs) -> None:
    logits = _check_logits(args.logits)
    _check_common(logits, args.target, args.ignore_index, args.label_smoothing)
    _check_row_vector("dloss", args.dloss, torch.float32, logits.shape[0])
    _check_row_vector("lse", args.lse, torch.float32, logits.shape[0])
    require_same_device(logits=logits, target=args.target, dloss=args.dloss, lse=args.lse)
    check_target_values(args.target, logits.shape[1], args.ignore_index)


CROSS_ENTROPY_FWD = define_primitive(Primitive(
    name="cross_entropy_fwd",
    args_type=CrossEntropyFwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="cross_entropy",
    validate=_validate_fwd,
    doc="Per-row cross entropy of logits [N, V] against int64 targets [N] with ignore_index and label"
        " smoothing (fp32 math); returns (loss fp32 [N], lse fp32 [N]), zeros on ignored rows.",
))

CROSS_ENTROPY_BWD = define_primitive(Primitive(
    name="cross_entropy_bwd",
    args_type=CrossEntropyBwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="cross_entropy",
    validate=_validate_bwd,
    doc="Cross-entropy backward from the forward's lse: dlogits = dloss * (softmax - (1 - eps) onehot - eps / V)"
        " in logits' dtype (fp32 math, one rounding), zeros on ignored rows.",
))
