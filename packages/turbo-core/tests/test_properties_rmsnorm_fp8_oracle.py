"""The ``rmsnorm_fwd_fp8`` property's oracle holds a backend to its spec (``RmsNormFwdFp8Args``): ``rstd``
may differ from a separate ``rmsnorm_fwd``'s in its last bit and ``y`` then by one rounding step, while
``q`` / ``scale_inv`` are exactly ``quantize_fp8`` of the ``y`` the call computed. A backend whose
outputs are TORCH's, doctored, passes or fails as the spec says."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from turbo_core.testing.properties import normalization
from turbo_core.testing.properties.harness import Target

FP8 = torch.float8_e4m3fn


def _case(store_y: bool, dtype=torch.float32) -> normalization.NormCase:
    return normalization.NormCase(t=3, h=64, dtype=dtype, gamma=None, zero_centered=False, residual=False, eps=1e-6,
                                  kind="normal", seed=0, granularity="ROWWISE", block_size=None, fp8=FP8,
                                  store_y=store_y)


def _step(t: torch.Tensor, steps: int = 1) -> torch.Tensor:
    for _ in range(steps):
        t = torch.nextafter(t, torch.full_like(t, float("inf")))
    return t


@dataclasses.dataclass(frozen=True)
class _Doctored(Target):
    """TORCH's ``rmsnorm_fwd_fp8``, its outputs changed by ``doctor``."""

    doctor: object = None

    def call(self, args):
        return self.doctor(*Target("TORCH", self.device, self.primitive).call(args))


def _check(store_y: bool, doctor, dtype=torch.float32) -> None:
    normalization._check_fwd_fp8(_case(store_y, dtype), _Doctored("TORCH", torch.device("cpu"), "rmsnorm_fwd_fp8",
                                                                  doctor))


@pytest.mark.parametrize("store_y", [False, True])
def test_torch_itself_passes(store_y):
    _check(store_y, lambda q, s, y, rstd, xpr: (q, s, y, rstd, xpr))


def test_rstd_one_bit_off_without_y_is_within_the_spec():
    _check(False, lambda q, s, y, rstd, xpr: (q, s, y, _step(rstd), xpr))


def test_rstd_and_y_one_step_off_with_the_scales_of_that_y_pass():
    from turbo_core.dispatch.specs.quantization import QuantizeFp8Args

    def doctor(q, s, y, rstd, xpr):
        y2 = _step(y)  # every element one step up: the y of a kernel whose rstd is one bit off
        q2, s2 = Target("TORCH", torch.device("cpu"), "quantize_fp8").call(QuantizeFp8Args(y2, FP8, "ROWWISE", -1, None))
        return q2, s2, y2, _step(rstd), xpr

    _check(True, doctor)


@pytest.mark.parametrize("store_y, doctor, caught", [
    (False, lambda q, s, y, rstd, xpr: (q, s, y, _step(rstd, 2), xpr), "rstd against rmsnorm_fwd's"),
    (False, lambda q, s, y, rstd, xpr: (q, s * 2, y, rstd, xpr), "scale_inv"),
    (True, lambda q, s, y, rstd, xpr: (q, s, _step(y), rstd, xpr), "y against rmsnorm_fwd's"),
    (True, lambda q, s, y, rstd, xpr: (q, s, _step(y, 2), _step(rstd), xpr), "more than one step"),
    (True, lambda q, s, y, rstd, xpr: (q, s, _step(y), _step(rstd), xpr), "quantize_fp8 of its y"),
], ids=["rstd-two-bits", "scale-doubled", "y-off-with-same-rstd", "y-two-steps", "scales-not-of-the-returned-y"])
def test_outside_the_spec_fails(store_y, doctor, caught):
    with pytest.raises(AssertionError, match=caught):
        _check(store_y, doctor)
