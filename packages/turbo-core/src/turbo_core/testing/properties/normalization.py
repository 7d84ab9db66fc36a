"""Properties of ``rmsnorm_fwd``, ``rmsnorm_bwd`` and ``rmsnorm_fwd_fp8`` against float64 math.

Drawn: T from 0 and H from 1 up (primes, odd sizes, block edges), every dtype of x and of gamma
(gamma of another dtype, or none), ``zero_centered``, the fused residual, ``dresidual``, ``eps``
from 1e-12 to 0.1, rows of zeros and magnitudes from 2**-20 to 2**20 (``rstd`` from about
``1/sqrt(eps)`` down); FP8 output: ROWWISE, BLOCKWISE (several block sizes) and MX, E4M3/E5M2, OCP
and FNUZ, with and without ``store_y``.

Oracles: ``s = x (+ residual)`` rounded once to x's dtype (``x_plus_r`` must be exactly that),
``rstd = 1/sqrt(mean(s^2) + eps)``, ``y = s * rstd * g``; the backward's spec formulas in float64 on
the ``rstd`` it is given. ``rmsnorm_fwd_fp8``: the same ``y``/``rstd``/``x_plus_r``, and ``q`` /
``scale_inv`` the backend's own ``quantize_fp8`` of the backend's own ``rmsnorm_fwd`` result, bit
for bit (the spec's definition), that result within the quantizer oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.plugins.host import get_host
from turbo_core.testing.properties.harness import Property, Target, close, exact, same_bits
from turbo_core.testing.properties.quantization import _fp8_check, _input
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, FNUZ_FP8, OCP_FP8, dims, generator, seeds

__all__ = ["PROPERTIES"]

_EPS = (1e-6, 1e-5, 1e-12, 0.1)
_KINDS = ("normal", "tiny", "huge", "zero-rows", "mixed")


@dataclass(frozen=True)
class NormCase:
    t: int
    h: int
    dtype: torch.dtype
    gamma: torch.dtype | None
    zero_centered: bool
    residual: bool  # forward: fused residual; backward: dresidual
    eps: float
    kind: str
    seed: int
    granularity: str | None = None  # FP8 output
    block_size: int | None = None
    fp8: torch.dtype | None = None
    store_y: bool = False


def _norm_cases(max_dim: int):
    return st.builds(NormCase, dims(0, max_dim), dims(1, 4 * max_dim), st.sampled_from(FLOAT_DTYPES),
                     st.one_of(st.none(), st.sampled_from(FLOAT_DTYPES)), st.booleans(), st.booleans(),
                     st.sampled_from(_EPS), st.sampled_from(_KINDS), seeds())


@st.composite
def _fp8_cases(draw, max_dim: int):
    base = draw(_norm_cases(max_dim))
    gran = draw(st.sampled_from(("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    return NormCase(**{**base.__dict__, "granularity": gran,
                       "block_size": draw(st.sampled_from((16, 32, 128))) if gran == "BLOCKWISE" else 32 if mx else None,
                       "fp8": draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8)),
                       "store_y": draw(st.booleans())})


def _inputs(c: NormCase):
    g = generator(c.seed)
    x = _input((c.t, c.h), c.kind, c.dtype, "contiguous", c.seed)
    gamma = (torch.randn(c.h, generator=g) * 0.5 + (0.0 if c.zero_centered else 1.0)).to(c.gamma) \
        if c.gamma is not None else None
    residual = torch.randn(c.t, c.h, generator=g).to(c.dtype) if c.residual else None
    return x, gamma, residual, g


def _forward64(c: NormCase, x, gamma, residual):
    """(y, rstd, s) in float64; s is x (+ residual) rounded once to x's dtype."""
    s = (x.double() + residual.double()).to(c.dtype) if residual is not None else x
    s64 = s.double()
    rstd = 1.0 / torch.sqrt(s64.pow(2).mean(-1) + c.eps) if c.h else torch.zeros(c.t, dtype=torch.float64)
    gm = torch.ones(c.h, dtype=torch.float64) if gamma is None else gamma.double() + (1.0 if c.zero_centered else 0.0)
    return s64 * rstd[:, None] * gm, rstd, s


def _check_forward_outputs(c: NormCase, y, rstd, xpr, want, what: str) -> None:
    y64, rstd64, s = want
    close(rstd, rstd64, torch.float32, f"{what}: rstd")
    if y is not None:
        if y.dtype != c.dtype:
            raise AssertionError(f"{what}: y dtype {y.dtype}, expected {c.dtype}")
        close(y, y64, c.dtype, f"{what}: y")
    if c.residual:
        if xpr is None:
            raise AssertionError(f"{what}: no x_plus_r with a residual")
        exact(xpr, s, f"{what}: x_plus_r (x + residual rounded once)")
    elif xpr is not None:
        raise AssertionError(f"{what}: x_plus_r without a residual")


def _check_fwd(c: NormCase, target: Target) -> None:
    x, gamma, residual, _ = _inputs(c)
    put = target.put
    y, rstd, xpr = target.call(RmsNormFwdArgs(put(x), put(gamma), c.eps, c.zero_centered, put(residual)))
    _check_forward_outputs(c, y, rstd, xpr, _forward64(c, x, gamma, residual), "rmsnorm_fwd")


def _check_bwd(c: NormCase, target: Target) -> None:
    x, gamma, _, g = _inputs(c)
    dy = torch.randn(c.t, c.h, generator=g).to(c.dtype)
    dres = torch.randn(c.t, c.h, generator=g).to(c.dtype) if c.residual else None
    rstd = _forward64(c, x, gamma, None)[1].float()
    n = x.double() * rstd.double()[:, None]
    gm = torch.ones(c.h, dtype=torch.float64) if gamma is None else gamma.double() + (1.0 if c.zero_centered else 0.0)
    dn = dy.double() * gm
    dx = rstd.double()[:, None] * (dn - n * (dn * n).mean(-1, keepdim=True))
    if dres is not None:
        dx = dx + dres.double()
    put = target.put
    got_dx, got_dg = target.call(RmsNormBwdArgs(put(dy), put(x), put(gamma), put(rstd), c.zero_centered, put(dres)))
    close(got_dx, dx, c.dtype, "rmsnorm_bwd: dx")
    if gamma is None:
        if got_dg is not None:
            raise AssertionError("rmsnorm_bwd: dgamma without gamma")
        return
    if got_dg.dtype != gamma.dtype:
        raise AssertionError(f"rmsnorm_bwd: dgamma dtype {got_dg.dtype}, expected {gamma.dtype}")
    close(got_dg, (dy.double() * n).sum(0), gamma.dtype, "rmsnorm_bwd: dgamma")


def _has_kernel(backend: str, primitive: str) -> bool:
    return get_host().registry.kernel(primitive, backend) is not None


def _check_fwd_fp8(c: NormCase, target: Target) -> None:
    x, gamma, residual, _ = _inputs(c)
    put = target.put
    args = RmsNormFwdFp8Args(put(x), put(gamma), c.fp8, c.granularity, c.block_size, c.eps, c.zero_centered,
                             put(residual), c.store_y)
    q, s, y, rstd, xpr = target.call(args)
    _check_forward_outputs(c, y if c.store_y else None, rstd, xpr, _forward64(c, x, gamma, residual),
                           "rmsnorm_fwd_fp8")
    if not c.store_y and y is not None:
        raise AssertionError("rmsnorm_fwd_fp8: y returned without store_y")
    # The definition: the backend's rmsnorm_fwd, then its quantize_fp8 of that y (TORCH's where the
    # backend has no kernel of its own for one of them).
    def own(primitive: str) -> Target:
        name = target.backend if _has_kernel(target.backend, primitive) else "TORCH"
        return Target(name, target.device, primitive)

    y_two, rstd_two = own("rmsnorm_fwd").call(args.norm_args())[:2]
    _fp8_check(y_two.cpu(), q, s, c.fp8, c.granularity, -1, c.block_size, False, "rmsnorm_fwd_fp8: q of y")
    # The spec lets the two kernels sum a row in another order: rstd may differ from rmsnorm_fwd's in
    # its last bit, and y then by one rounding step. Equal rstd means rmsnorm_fwd's y; q and scale_inv
    # are always quantize_fp8 of the y the call computed (the returned one with store_y; without it and
    # with another rstd, that y is not seen, and the tolerance check above is what holds).
    same_rstd = torch.equal(rstd.cpu(), rstd_two.cpu())
    if not same_rstd:
        _one_step(rstd, rstd_two, "rmsnorm_fwd_fp8: rstd against rmsnorm_fwd's")
    if c.store_y:
        if same_rstd:
            same_bits(y, y_two, "rmsnorm_fwd_fp8: y against rmsnorm_fwd's")
        else:
            _one_step(y, y_two, "rmsnorm_fwd_fp8: y against rmsnorm_fwd's (rstd differs in its last bit)")
    elif not same_rstd:
        return
    base = y if c.store_y else y_two
    q_two, s_two = own("quantize_fp8").call(QuantizeFp8Args(base, c.fp8, c.granularity, -1, c.block_size))
    same_bits(q, q_two, "rmsnorm_fwd_fp8: q against quantize_fp8 of its y")
    same_bits(s, s_two, "rmsnorm_fwd_fp8: scale_inv against quantize_fp8 of its y")


def _one_step(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Same shape and dtype, each element equal to ``expected``'s or one representable step from it."""
    if actual.dtype != expected.dtype or tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: {actual.dtype} {tuple(actual.shape)} != expected {expected.dtype} "
                             f"{tuple(expected.shape)}")
    a, e = actual.cpu(), expected.cpu()
    up = torch.nextafter(e, torch.full_like(e, float("inf")))
    down = torch.nextafter(e, torch.full_like(e, float("-inf")))
    ok = (a == e) | (a == up) | (a == down) | (torch.isnan(a) & torch.isnan(e))
    if not bool(ok.all()):
        i = int((~ok).flatten().nonzero()[0])
        raise AssertionError(f"{what}: element {i} is {a.flatten()[i].item()!r}, more than one step from "
                             f"{e.flatten()[i].item()!r}")


PROPERTIES = [
    Property("rmsnorm_fwd", _norm_cases, _check_fwd),
    Property("rmsnorm_bwd", _norm_cases, _check_bwd),
    Property("rmsnorm_fwd_fp8", _fp8_cases, _check_fwd_fp8),
]
