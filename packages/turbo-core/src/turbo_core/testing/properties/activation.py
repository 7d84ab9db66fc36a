"""Properties of ``swiglu_fwd``/``swiglu_bwd``/``geglu_fwd``/``geglu_bwd`` against float64 math.

Drawn: T from 0 and H from 0 up, every dtype, probs with zeros, a ``row_mask`` (or none) whose
inactive rows hold NaN in x, probs and grad_out: the spec says those rows are never read and come
out zero, so a NaN that leaks is a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.testing.properties.harness import Property, Target, close
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, dims, generator, seeds

__all__ = ["PROPERTIES"]


@dataclass(frozen=True)
class GluCase:
    t: int
    h: int
    dtype: torch.dtype
    masked: bool
    seed: int


def _cases(max_dim: int):
    return st.builds(GluCase, dims(0, max_dim), dims(0, 2 * max_dim), st.sampled_from(FLOAT_DTYPES), st.booleans(),
                     seeds())


def _act(a: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(act(a), act'(a)) in float64: SiLU, or the exact (erf) GELU."""
    if gelu:
        cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
        return a * cdf, cdf + a * torch.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
    s = torch.sigmoid(a)
    return a * s, s * (1 + a * (1 - s))


def _inputs(c: GluCase):
    g = generator(c.seed)
    x = (torch.randn(c.t, 2 * c.h, generator=g) * 2).to(c.dtype)
    probs = torch.rand(c.t, generator=g)
    probs[torch.rand(c.t, generator=g) < 0.2] = 0.0
    mask = (torch.rand(c.t, generator=g) < 0.7).to(torch.int64) * torch.randint(1, 4, (c.t,), generator=g) \
        if c.masked else None
    active = torch.ones(c.t, dtype=torch.bool) if mask is None else mask != 0
    x[~active] = float("nan")
    probs[~active] = float("nan")
    return x, probs, mask, active, g


def _check_fwd(gelu: bool):
    def check(c: GluCase, target: Target) -> None:
        x, probs, mask, active, _ = _inputs(c)
        a, b = x.double()[:, :c.h], x.double()[:, c.h:]
        want = _act(a, gelu)[0] * b * probs.double()[:, None]
        want[~active] = 0.0
        put = target.put
        out = target.call(GluFwdArgs(put(x), put(probs), put(mask)))
        close(out, want, c.dtype, f"{target.primitive}: out")
    return check


def _check_bwd(gelu: bool):
    def check(c: GluCase, target: Target) -> None:
        x, probs, mask, active, g = _inputs(c)
        grad = torch.randn(c.t, c.h, generator=g).to(c.dtype)
        grad[~active] = float("nan")
        a, b, p, g64 = x.double()[:, :c.h], x.double()[:, c.h:], probs.double()[:, None], grad.double()
        act, dact = _act(a, gelu)
        want_x = torch.cat([g64 * b * p * dact, g64 * act * p], dim=1)
        want_p = (g64 * act * b).sum(-1)
        want_x[~active] = 0.0
        want_p[~active] = 0.0
        put = target.put
        gx, gp = target.call(GluBwdArgs(put(grad), put(x), put(probs), put(mask)))
        close(gx, want_x, c.dtype, f"{target.primitive}: grad_x")
        if gp.dtype != torch.float32:
            raise AssertionError(f"{target.primitive}: grad_probs dtype {gp.dtype}, expected float32")
        close(gp, want_p, torch.float32, f"{target.primitive}: grad_probs")
    return check


PROPERTIES = [
    Property("swiglu_fwd", _cases, _check_fwd(False)),
    Property("swiglu_bwd", _cases, _check_bwd(False)),
    Property("geglu_fwd", _cases, _check_fwd(True)),
    Property("geglu_bwd", _cases, _check_bwd(True)),
]
