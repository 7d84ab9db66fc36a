"""Properties of ``swiglu_fwd_fp8`` / ``geglu_fwd_fp8`` against float64 math and their definition.

Drawn: T from 0 and H from 1 up (MX rows padded to 128, partial BLOCKWISE blocks), every dtype of x,
probs with zeros, a ``row_mask`` (or none) whose inactive rows hold NaN in x and probs, magnitudes
from 2**-12 to 2**4 times a normal draw; ROWWISE, BLOCKWISE (16, 32, 128) and MX, E4M3/E5M2, OCP and
FNUZ (not MX), with and without ``store_y``.

Oracles: ``y`` (when stored) within the GLU tolerance of ``act(a) * b * probs`` in float64 (zeros on
inactive rows) and bit for bit the backend's own ``<kind>_fwd``; ``q`` / ``scale_inv`` within the
quantizer oracle for that ``y`` and bit for bit the backend's own ``quantize_fp8`` of it (the
spec's definition; TORCH's primitive where the backend has no kernel of its own for one of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.plugins.host import get_host
from turbo_core.testing.properties.activation import _act
from turbo_core.testing.properties.harness import Property, Target, close, same_bits
from turbo_core.testing.properties.quantization import _fp8_check
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, FNUZ_FP8, OCP_FP8, dims, generator, seeds

__all__ = ["PROPERTIES"]


@dataclass(frozen=True)
class GluFp8Case:
    t: int
    h: int
    dtype: torch.dtype
    masked: bool
    scale: float
    granularity: str
    block_size: int | None
    fp8: torch.dtype
    store_y: bool
    seed: int


@st.composite
def _cases(draw, max_dim: int):
    gran = draw(st.sampled_from(("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    return GluFp8Case(
        t=draw(dims(0, max_dim)), h=draw(dims(1, 2 * max_dim)), dtype=draw(st.sampled_from(FLOAT_DTYPES)),
        masked=draw(st.booleans()), scale=draw(st.sampled_from((1.0, 2.0**-12, 16.0))), granularity=gran,
        block_size=draw(st.sampled_from((16, 32, 128))) if gran == "BLOCKWISE" else 32 if mx else None,
        fp8=draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8)), store_y=draw(st.booleans()),
        seed=draw(seeds()))


def _inputs(c: GluFp8Case):
    g = generator(c.seed)
    x = (torch.randn(c.t, 2 * c.h, generator=g) * c.scale).to(c.dtype)
    probs = torch.rand(c.t, generator=g)
    probs[torch.rand(c.t, generator=g) < 0.2] = 0.0
    mask = (torch.rand(c.t, generator=g) < 0.7).to(torch.int64) * torch.randint(1, 4, (c.t,), generator=g) \
        if c.masked else None
    active = torch.ones(c.t, dtype=torch.bool) if mask is None else mask != 0
    x[~active] = float("nan")
    probs[~active] = float("nan")
    return x, probs, mask, active


def _has_kernel(backend: str, primitive: str) -> bool:
    return get_host().registry.kernel(primitive, backend) is not None


def _check(kind: str):
    gelu = kind == "geglu"
    what = f"{kind}_fwd_fp8"

    def check(c: GluFp8Case, target: Target) -> None:
        x, probs, mask, active = _inputs(c)
        put = target.put
        args = GluFwdFp8Args(put(x), put(probs), c.fp8, c.granularity, c.block_size, put(mask), c.store_y)
        q, s, y = target.call(args)
        if not c.store_y and y is not None:
            raise AssertionError(f"{what}: y returned without store_y")

        def own(primitive: str) -> Target:
            name = target.backend if _has_kernel(target.backend, primitive) else "TORCH"
            return Target(name, target.device, primitive)

        y_two = own(f"{kind}_fwd").call(args.glu_args())
        if c.store_y:
            a, b = x.double()[:, :c.h], x.double()[:, c.h:]
            want = _act(a, gelu)[0] * b * probs.double()[:, None]
            want[~active] = 0.0
            if y.dtype != c.dtype:
                raise AssertionError(f"{what}: y dtype {y.dtype}, expected {c.dtype}")
            close(y, want, c.dtype, f"{what}: y")
            same_bits(y, y_two, f"{what}: y against {kind}_fwd's")
        _fp8_check(y_two.cpu(), q, s, c.fp8, c.granularity, -1, c.block_size, False, f"{what}: q of y")
        q_two, s_two = own("quantize_fp8").call(QuantizeFp8Args(y_two, c.fp8, c.granularity, -1, c.block_size))
        same_bits(q, q_two, f"{what}: q against quantize_fp8({kind}_fwd)")
        same_bits(s, s_two, f"{what}: scale_inv against quantize_fp8({kind}_fwd)")

    return check


PROPERTIES = [
    Property("swiglu_fwd_fp8", _cases, _check("swiglu")),
    Property("geglu_fwd_fp8", _cases, _check("geglu")),
]
