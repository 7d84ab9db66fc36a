"""Bit-for-bit comparison of a kernel's outputs with the reference's.

The gate of kernels that promise the reference's exact bits (quantizers, dequantizers, data
movement): same dtype and shape, NaN at the same positions (NaN payloads are free: kernels and the
reference may produce different ones), every other element the same bits. Floating dtypes wider
than a byte and the FP8 formats are compared this way; every other dtype (integers, bool, E8M0
scales, packed FP4 bytes) compares its raw bits, NaN encodings included.

:func:`assert_same_bits` raises with the first differing element and both values;
:func:`bit_mismatch` returns that text (``None`` when the bits agree) for callers that collect.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["FP8_DTYPES", "assert_same_bits", "bit_mismatch", "bits", "nan_mask"]

#: 1-byte float formats whose NaN ``torch.isnan`` sees (E8M0 scales and packed FP4 compare as bits).
FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                   if hasattr(torch, n))

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements (made contiguous) viewed as the integer type of their size."""
    t = t.contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()])


def nan_mask(t: torch.Tensor) -> torch.Tensor:
    """Where ``t`` holds NaN, for the floating dtypes compared NaN-aware (see the module docstring);
    all False for the others."""
    if (t.dtype.is_floating_point and t.element_size() > 1) or t.dtype in FP8_DTYPES:
        return torch.isnan(t.float())
    return torch.zeros(t.shape, dtype=torch.bool, device=t.device)


def _value(t: torch.Tensor, index: tuple[int, ...]) -> str:
    if (t.dtype.is_floating_point and t.element_size() > 1) or t.dtype in FP8_DTYPES:
        return repr(t[index].float().item())
    return hex(int(bits(t)[index].item()) & (1 << 8 * t.element_size()) - 1)


def _one(actual: torch.Tensor, expected: torch.Tensor, require_contiguous: bool) -> str | None:
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return f"{actual.dtype}{tuple(actual.shape)} vs expected {expected.dtype}{tuple(expected.shape)}"
    if require_contiguous and not actual.is_contiguous():
        return f"not contiguous (strides {actual.stride()})"
    expected = expected.to(actual.device)
    na, ne = nan_mask(actual), nan_mask(expected)
    if not torch.equal(na, ne):
        return f"NaN at {int((na != ne).sum())} different positions (first at {tuple((na != ne).nonzero()[0].tolist())})"
    diff = (bits(actual) != bits(expected)) & ~na
    n = int(diff.sum())
    if not n:
        return None
    index = tuple(diff.nonzero()[0].tolist())
    return f"{n} of {diff.numel()} elements differ; first at {index}: {_value(actual, index)} vs {_value(expected, index)}"


def bit_mismatch(actual, expected, *, require_contiguous: bool = False) -> str | None:
    """``None`` when ``actual`` and ``expected`` agree bit for bit (NaN positions, not payloads), else
    what differs. Both are tensors, or sequences of tensors (and ``None`` where an output is absent),
    compared element by element; the text then names the output's index. ``require_contiguous``:
    ``actual`` must also be contiguous (a kernel's freshly allocated output)."""
    if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
        if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
            return f"{type(actual).__name__} vs expected {type(expected).__name__}"
        return _one(actual, expected, require_contiguous)
    actual, expected = list(actual), list(expected)
    if len(actual) != len(expected):
        return f"{len(actual)} outputs vs {len(expected)} expected"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a is None or e is None:
            if a is not e:
                return f"output {i}: {type(a).__name__} vs expected {type(e).__name__}"
            continue
        if err := _one(a, e, require_contiguous):
            return f"output {i}: {err}"
    return None


def assert_same_bits(actual: torch.Tensor | Sequence[torch.Tensor | None],
                     expected: torch.Tensor | Sequence[torch.Tensor | None], *, what: str = "result",
                     require_contiguous: bool = False) -> None:
    """Raise ``AssertionError`` (prefixed with ``what``) unless :func:`bit_mismatch` finds nothing."""
    err = bit_mismatch(actual, expected, require_contiguous=require_contiguous)
    if err is not None:
        raise AssertionError(f"{what}: {err}")
