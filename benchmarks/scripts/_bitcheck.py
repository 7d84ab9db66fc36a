"""Bit-for-bit comparison of GPU outputs with the reference, shared by the GPU check scripts
(``quant_fp8_gpu_check.py``, ``grouped_quant_gpu_check.py``, ``grouped_quant_fast_gpu.py``): floating outputs must have NaN at
the same positions (payloads aside) and the same bits everywhere else; other dtypes (integers,
packed FP4 bytes) the same bits."""

from __future__ import annotations

import torch

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_FLOATS = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16, torch.float32, torch.float64)


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` (made contiguous) viewed as the unsigned/signed integer of its element size."""
    t = t.contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()])


def isnan(t: torch.Tensor) -> torch.Tensor:
    """NaN positions of a floating tensor (FP8 included, through fp32); all False otherwise."""
    if t.dtype in _FLOATS:
        return torch.isnan(t.float())
    return torch.zeros(t.shape, dtype=torch.bool, device=t.device)


def compare(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None when bit-identical (NaN positions equal), else what differs."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return f"{actual.dtype}{tuple(actual.shape)} vs {expected.dtype}{tuple(expected.shape)}"
    na, ne = isnan(actual), isnan(expected)
    if not torch.equal(na, ne):
        return f"NaN at {int((na != ne).sum())} different positions"
    diff = (bits(actual) != bits(expected)) & ~na
    n = int(diff.sum())
    if n:
        i = tuple(diff.nonzero()[0].tolist())
        where = f"{n} of {diff.numel()} differ, first at {i}"
        if actual.dtype in _FLOATS:  # the two values (packed FP4 has no float conversion)
            where += f": {actual[i].float().item()!r} vs {expected[i].float().item()!r}"
        return where
    return None


def compare_all(actual, expected) -> str | None:
    """``compare`` over tuples of outputs (a single tensor is a 1-tuple): the first difference,
    prefixed with its output index, or None."""
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if err := compare(a, e):
            return f"output {i}: {err}"
    return None
