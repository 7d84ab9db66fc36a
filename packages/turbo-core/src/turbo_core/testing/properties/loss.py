"""Properties of ``cross_entropy_fwd`` / ``cross_entropy_bwd`` against float64 math.

Drawn: N from 0 and V from 1 up to ``32 * max_dim`` (vocabularies that span several chunks of a
row-walking kernel), every dtype, ``ignore_index`` -100, -1 or 0 (a class: its rows are then
ignored), a share of ignored rows whose logits (and, backward, ``dloss`` and ``lse``) hold NaN —
the spec says those rows are never read and come out zero — ``label_smoothing`` 0, 0.1, 0.5 or 1,
and values: normal, ``2**-20`` and ``2**20`` times it (``2**12`` in fp16) (``lse`` far from the logits' scale; the loss
a small difference of large numbers), rows scaled by ``2**[-8, 8]``, and classes masked with
``-Inf`` (never the target: a class of probability 0).

Oracles, on the inputs rounded to their dtype: ``lse = logsumexp(x)``, ``loss = (1 - eps)(lse - x[t])
+ eps (lse - mean x)`` (the ``eps`` term left out at 0, the other at 1), zeros on ignored rows; the
backward's formula on the ``lse`` it is given, with ``dloss`` of order V so that ``dlogits`` is of
order 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.testing.properties.harness import Property, Target, close
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, dims, draw_values, generator, seeds

__all__ = ["PROPERTIES"]

_KINDS = ("normal", "tiny", "huge", "mixed", "masked")
_IGNORE = (-100, -1, 0)
_SMOOTHING = (0.0, 0.1, 0.5, 1.0)


@dataclass(frozen=True)
class CrossEntropyCase:
    n: int
    v: int
    dtype: torch.dtype
    ignore_index: int
    ignored: bool  # a share of the rows is ignored
    label_smoothing: float
    kind: str
    seed: int


def _cases(max_dim: int):
    return st.builds(CrossEntropyCase, dims(0, max_dim), dims(1, 32 * max_dim), st.sampled_from(FLOAT_DTYPES),
                     st.sampled_from(_IGNORE), st.booleans(), st.sampled_from(_SMOOTHING), st.sampled_from(_KINDS),
                     seeds())


def _inputs(c: CrossEntropyCase):
    """``(logits in c.dtype, target, ignored rows, generator)``; ignored rows' logits are NaN."""
    g = generator(c.seed)
    x = draw_values((c.n, c.v), "normal" if c.kind == "masked" else c.kind, g)
    if c.kind == "huge" and c.dtype == torch.float16:
        x = x * 2.0**-8  # about 3 * 2**12: far from 1, and finite in fp16 (largest 65504)
    target = torch.randint(0, c.v, (c.n,), generator=g)
    if c.kind == "masked":
        hide = torch.rand(c.n, c.v, generator=g) < 0.2
        hide[torch.arange(c.n), target] = False
        x = x.masked_fill(hide, float("-inf"))
    ignored = (torch.rand(c.n, generator=g) < 0.3) if c.ignored else torch.zeros(c.n, dtype=torch.bool)
    ignored |= target == c.ignore_index  # ignore_index 0 is a class: its rows are ignored too
    target = torch.where(ignored, c.ignore_index, target)
    x[ignored] = float("nan")
    return x.to(c.dtype), target, ignored, g


def _forward64(c: CrossEntropyCase, x: torch.Tensor, target: torch.Tensor, ignored: torch.Tensor):
    """float64 ``(loss, lse)`` of the spec, zeros on ignored rows."""
    x64 = torch.where(ignored.unsqueeze(1), 0.0, x.double())
    lse = torch.logsumexp(x64, dim=1) if c.v else torch.zeros(c.n, dtype=torch.float64)
    loss = torch.zeros(c.n, dtype=torch.float64)
    eps = c.label_smoothing
    if eps < 1.0:
        loss += (1.0 - eps) * (lse - x64.gather(1, target.clamp(min=0).unsqueeze(1)).squeeze(1))
    if eps > 0.0:
        loss += eps * (lse - x64.mean(dim=1))
    return torch.where(ignored, 0.0, loss), torch.where(ignored, 0.0, lse)


def _check_fwd(c: CrossEntropyCase, on: Target) -> None:
    x, target, ignored, _ = _inputs(c)
    want_loss, want_lse = _forward64(c, x, target, ignored)
    put = on.put
    loss, lse = on.call(CrossEntropyFwdArgs(put(x), put(target), c.ignore_index, c.label_smoothing))
    for name, got in (("loss", loss), ("lse", lse)):
        if got.dtype != torch.float32:
            raise AssertionError(f"cross_entropy_fwd: {name} dtype {got.dtype}, expected float32")
    close(lse, want_lse, torch.float32, "cross_entropy_fwd: lse")
    close(loss, want_loss, torch.float32, "cross_entropy_fwd: loss")


def _check_bwd(c: CrossEntropyCase, on: Target) -> None:
    x, target, ignored, g = _inputs(c)
    lse = _forward64(c, x, target, ignored)[1].float()
    dloss = torch.randn(c.n, generator=g) * c.v
    lse[ignored] = float("nan")
    dloss[ignored] = float("nan")
    x64 = x.double()
    want = torch.exp(x64 - lse.double().unsqueeze(1))
    eps = c.label_smoothing
    if eps > 0.0:
        want = want - eps / c.v
    onehot = torch.arange(c.v) == target.unsqueeze(1)
    if eps < 1.0:
        want = torch.where(onehot, want - (1.0 - eps), want)
    want = torch.where(ignored.unsqueeze(1), 0.0, want * dloss.double().unsqueeze(1))
    put = on.put
    got = on.call(CrossEntropyBwdArgs(put(dloss), put(x), put(target), put(lse), c.ignore_index,
                                           c.label_smoothing))
    if got.dtype != c.dtype:
        raise AssertionError(f"cross_entropy_bwd: dlogits dtype {got.dtype}, expected {c.dtype}")
    close(got, want, c.dtype, "cross_entropy_bwd: dlogits")


PROPERTIES = [
    Property("cross_entropy_fwd", _cases, _check_fwd),
    Property("cross_entropy_bwd", _cases, _check_bwd),
]
