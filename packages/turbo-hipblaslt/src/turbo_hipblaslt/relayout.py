"""Row-major copies of 1-byte (FP8) GEMM operands, made by the library.

On sm89/sm90 cuBLASLt's FP8 kernels take only the "TN" layout (both operands contiguous along K),
so ``gemm_fp8`` re-lays an operand that is not before the call. torch's ``x.contiguous()`` of a
transposed 1-byte tensor goes through its generic strided copy, several times slower than the
bandwidth allows (and the copy is part of every FP8 dgrad/wgrad on this path); cuBLASLt's own
``cublasLtMatrixTransform`` moves the bytes as ``CUDA_R_8I`` with alpha 1 and beta 0, which
reproduces every bit pattern (``_C.transpose_bytes``).

Where the extension has no ``transpose_bytes`` (built from an older source) or the library refuses
with ``NOT_SUPPORTED`` (ROCm builds, whose FP8 GEMMs need no copy), the copy falls back to torch and
the reason is kept per device (:func:`fallback_reasons`). Another library error is raised.
"""

from __future__ import annotations

import torch

from turbo_hipblaslt import runtime

__all__ = ["contiguous", "fallback_reasons"]

_fallback: dict[int, str] = {}


def fallback_reasons() -> dict[int, str]:
    """Device index -> why its copies are made by torch instead of the library (empty when none are)."""
    return dict(_fallback)


def _library_copy(x: torch.Tensor, index: int) -> torch.Tensor | None:
    """``x.contiguous()`` through ``_C.transpose_bytes``, or ``None`` when the library cannot make it."""
    if index in _fallback:
        return None
    rows, cols = x.shape
    s0, s1 = x.stride()
    if s0 == 1 and cols > 1:  # x is column-major rows x cols with ld s1: the result is its transpose
        trans, ld_src = 1, s1
    elif s1 == 1:  # row-major with padded rows (ld s0): a plain copy
        trans, ld_src = 0, s0
    else:
        return None
    ext = runtime.ext()
    fn = getattr(ext, "transpose_bytes", None)
    if fn is None:
        _fallback[index] = "the loaded extension has no transpose_bytes (built from an older source)"
        return None
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    # The result, row-major rows x cols, is column-major cols x rows with ld cols.
    try:
        runtime.run_on(index, fn, index, cols, rows, x.data_ptr(), max(ld_src, 1), trans, out.data_ptr(),
                       max(cols, 1), runtime.stream_handle(index))
    except ext.BlasLtError as exc:
        if getattr(exc, "status", "").endswith("NOT_SUPPORTED"):
            _fallback[index] = str(exc)
            return None
        raise
    return out


def contiguous(x: torch.Tensor) -> torch.Tensor:
    """``x.contiguous()`` for a 2-D tensor of 1-byte elements, the bytes copied by the library when
    ``x`` has a unit stride on one dim (else, or where the library cannot, by torch)."""
    if x.is_contiguous() or x.numel() == 0:
        return x.contiguous()
    if x.dim() == 2 and x.element_size() == 1:  # called by gemm_fp8, which serves GPU tensors only
        out = _library_copy(x, runtime.device_index(x))
        if out is not None:
            return out
    return x.contiguous()
