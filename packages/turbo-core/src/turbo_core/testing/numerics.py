"""Tolerances and accuracy metrics: the one place the pass/fail gates live.

Against a float64-accumulated reference: bf16/fp16 ``rtol = atol = 1e-2``, fp32 ``1e-4``.
Quantized paths are judged by SNR: FP8 E4M3 >= 25 dB, E5M2 (and HYBRID) >= 20 dB, FP4 >= 10 dB.
"""

from __future__ import annotations

import math

import torch

__all__ = ["SNR_DB", "TOLERANCES", "assert_close_to_reference", "assert_snr", "snr_db", "tolerance"]

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float64: (1e-10, 1e-10),
}

#: Minimum signal-to-noise ratio in dB, by format.
SNR_DB: dict[str, float] = {"E4M3": 25.0, "E5M2": 20.0, "HYBRID": 20.0, "E2M1": 10.0, "FP4": 10.0}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for results of ``dtype``."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance defined for {dtype}") from None


def snr_db(reference: torch.Tensor, actual: torch.Tensor) -> float:
    """``10 log10(|ref|^2 / |ref - actual|^2)`` in dB, computed in float64 (inf when exact)."""
    ref = reference.detach().to(torch.float64)
    err = (ref - actual.detach().to(torch.float64)).pow(2).sum().item()
    sig = ref.pow(2).sum().item()
    if err == 0.0:
        return math.inf
    if sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(sig / err)


def assert_snr(reference: torch.Tensor, actual: torch.Tensor, fmt: str, *, what: str = "result") -> float:
    """Fail unless ``snr_db(reference, actual) >= SNR_DB[fmt]``; return the SNR."""
    if actual.shape != reference.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != reference {tuple(reference.shape)}")
    got = snr_db(reference, actual)
    floor = SNR_DB[fmt]
    if not got >= floor:
        raise AssertionError(f"{what}: SNR {got:.1f} dB < {floor} dB required for {fmt}")
    return got


def assert_close_to_reference(actual: torch.Tensor, reference: torch.Tensor, *, dtype: torch.dtype | None = None,
                              what: str = "result") -> None:
    """``torch.testing.assert_close`` with the tolerance of ``dtype`` (default: actual's dtype),
    comparing in float64 against a float64 reference."""
    rtol, atol = tolerance(dtype or actual.dtype)
    torch.testing.assert_close(actual.detach().to(torch.float64), reference.detach().to(torch.float64),
                               rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
