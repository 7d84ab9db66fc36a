"""Bit-for-bit comparison of a kernel's outputs with the reference's, shared by the quantization
tests: same dtype, shape and contiguity, NaN at the same positions (payloads free), every other
element the same bits."""

from __future__ import annotations

import torch

#: 1-byte float formats whose NaN ``isnan`` can see (E8M0 scales and packed FP4 compare as bits).
FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                   if hasattr(torch, n))


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as same-width integers (contiguous)."""
    t = t.contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def nan_mask(t: torch.Tensor) -> torch.Tensor:
    if (t.dtype.is_floating_point and t.element_size() > 1) or t.dtype in FP8_DTYPES:
        return torch.isnan(t.float())
    return torch.zeros(t.shape, dtype=torch.bool)


def _value(t: torch.Tensor, i: list[int]) -> str:
    try:
        return repr(t[tuple(i)].float().item())
    except (RuntimeError, TypeError):  # packed FP4 and the like: the bits
        return hex(int(bits(t)[tuple(i)].item()) & 0xFF)


def assert_same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.is_contiguous(), f"{what}: not contiguous"
    na, ne = nan_mask(actual), nan_mask(expected)
    assert torch.equal(na, ne), f"{what}: NaN at {int((na != ne).sum())} different positions"
    diff = (bits(actual) != bits(expected)) & ~na
    if diff.any():
        i = diff.nonzero()[0].tolist()
        raise AssertionError(f"{what}: {int(diff.sum())} of {diff.numel()} differ; first at {i}: "
                             f"{_value(actual, i)} vs {_value(expected, i)}")
