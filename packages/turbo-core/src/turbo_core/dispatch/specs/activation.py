"""Gated-linear-unit primitives with per-token probabilities: ``swiglu_fwd``/``swiglu_bwd`` and
``geglu_fwd``/``geglu_bwd``.

Four primitives over two argument types (the activation is the primitive, not a field, so a backend
may serve one activation only). All four belong to the selection family ``glu``
(``TURBO_GLU_BACKEND``; ``TURBO_SWIGLU_FWD_BACKEND`` etc. for one of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    require_contiguous,
    require_even_last_dim,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tensor,
)

__all__ = [
    "ACTIVATIONS",
    "GEGLU_BWD",
    "GEGLU_FWD",
    "SWIGLU_BWD",
    "SWIGLU_FWD",
    "GluBwdArgs",
    "GluFwdArgs",
    "glu_primitive",
]

#: op kind -> the activation applied to the gate half.
ACTIVATIONS = {"swiglu": "SiLU: a * sigmoid(a)", "geglu": "exact GELU: 0.5 * a * (1 + erf(a / sqrt(2)))"}


@dataclass(frozen=True, eq=False)
class GluFwdArgs:
    """``out[t] = act(x[t, :H]) * x[t, H:] * probs[t]`` where ``row_mask[t] != 0`` (else zeros).

    The FIRST half of each row is the gate (the activation is applied to it), the second the "up"
    projection. ``act`` is SiLU for ``swiglu_fwd`` and the exact (erf) GELU for ``geglu_fwd``.

    Shapes and dtypes (every tensor contiguous, all on one device):

    * ``x``: ``[T, 2H]``, fp16/bf16/fp32, ``T >= 0``, ``H >= 0``.
    * ``probs``: ``[T]`` fp32 (the routing weight of each token).
    * ``row_mask``: ``None`` (every row active) or ``[T]`` int64; a row is active where it is
      non-zero.

    Numerics: the activation and both products in fp32 (or wider), rounded once to x's dtype.
    Rows of an inactive token are never read (x, probs there may hold anything, NaN included) and
    hold zeros in the output (backends write into a zero-initialised output or write the zeros).

    Result: ``out`` ``[T, H]`` in x's dtype (2-D, as Primus-Turbo's).
    """

    x: torch.Tensor
    probs: torch.Tensor
    row_mask: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class GluBwdArgs:
    """Gradients of :class:`GluFwdArgs`' ``out`` given ``grad_out``.

    Shapes and dtypes: ``grad_out`` ``[T, H]`` in x's dtype; ``x``, ``probs``, ``row_mask`` as in
    the forward (every tensor contiguous, one device).

    Numerics, in fp32 (or wider), with ``a = x[:, :H]``, ``b = x[:, H:]``, ``g = grad_out``::

        grad_x[:, :H] = g * b * probs * act'(a)
        grad_x[:, H:] = g * act(a) * probs
        grad_probs    = sum over H of g * act(a) * b      (accumulated in fp32 or wider)

    with ``silu'(a) = s * (1 + a * (1 - s))``, ``s = sigmoid(a)``, and
    ``gelu'(a) = Phi(a) + a * phi(a)`` (standard normal cdf and pdf). ``grad_x`` is rounded once to
    x's dtype. Inactive rows are never read (``grad_out`` there may hold anything) and get zeros in
    both ``grad_x`` and ``grad_probs``.

    Result: a 2-tuple ``(grad_x [T, 2H] in x's dtype, grad_probs [T] fp32)``.
    """

    grad_out: torch.Tensor
    x: torch.Tensor
    probs: torch.Tensor
    row_mask: torch.Tensor | None = None


def _check_x(x: object) -> torch.Tensor:
    require_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    require_even_last_dim("x", x)
    require_contiguous("x", x)
    return x


def _check_row_vector(name: str, value: object, dtype: torch.dtype, tokens: int) -> None:
    require_tensor(name, value, ndim=1, dtypes=(dtype,))
    require_shape(name, value, (tokens,), "one per row of x")
    require_contiguous(name, value)


def _check_rows(x: torch.Tensor, probs: object, row_mask: object) -> None:
    _check_row_vector("probs", probs, torch.float32, x.shape[0])
    if row_mask is not None:
        _check_row_vector("row_mask", row_mask, torch.int64, x.shape[0])


def _validate_fwd(args: GluFwdArgs) -> None:
    x = _check_x(args.x)
    _check_rows(x, args.probs, args.row_mask)
    require_same_device(x=x, probs=args.probs, row_mask=args.row_mask)


def _validate_bwd(args: GluBwdArgs) -> None:
    x = _check_x(args.x)
    require_tensor("grad_out", args.grad_out, ndim=2, dtypes=FLOAT_DTYPES)
    require_same_dtype("grad_out", args.grad_out, "x", x)
    require_shape("grad_out", args.grad_out, (x.shape[0], x.shape[1] // 2), "[T, H] for x [T, 2H]")
    require_contiguous("grad_out", args.grad_out)
    _check_rows(x, args.probs, args.row_mask)
    require_same_device(x=x, grad_out=args.grad_out, probs=args.probs, row_mask=args.row_mask)


def _define(kind: str, direction: str) -> Primitive:
    fwd = direction == "fwd"
    return define_primitive(Primitive(
        name=f"{kind}_{direction}",
        args_type=GluFwdArgs if fwd else GluBwdArgs,
        precision=PrecisionType.BF16_FP16_FP32,
        family="glu",
        validate=_validate_fwd if fwd else _validate_bwd,
        doc=(f"{kind} {'forward' if fwd else 'backward'} with per-token probs and optional row_mask;"
             f" act = {ACTIVATIONS[kind]}; the first half of x's last dim is the gate; fp32 math."),
    ))


SWIGLU_FWD = _define("swiglu", "fwd")
SWIGLU_BWD = _define("swiglu", "bwd")
GEGLU_FWD = _define("geglu", "fwd")
GEGLU_BWD = _define("geglu", "bwd")


_BY_KEY = {("swiglu", "fwd"): SWIGLU_FWD, ("swiglu", "bwd"): SWIGLU_BWD,
           ("geglu", "fwd"): GEGLU_FWD, ("geglu", "bwd"): GEGLU_BWD}


def glu_primitive(kind: str, direction: str) -> Primitive:
    """The primitive of ``kind`` (``"swiglu"``/``"geglu"``) and ``direction`` (``"fwd"``/``"bwd"``)."""
    try:
        return _BY_KEY[(kind, direction)]
    except KeyError:
        raise ValueError(
            f"kind: expected one of {sorted(ACTIVATIONS)} with direction 'fwd' or 'bwd', got {kind!r}, {direction!r}"
        ) from None
