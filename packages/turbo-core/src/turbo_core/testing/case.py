"""A conformance case, and the host copy every case compares on (``turbo_core.testing.conformance``
runs them; ``turbo_core.testing.cases`` defines them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Case", "host_copy"]


@dataclass(frozen=True)
class Case:
    """``run(device=torch.device("cpu"))`` raises ``AssertionError`` on a wrong result.
    ``primitives``: what it needs."""

    id: str
    primitives: tuple[str, ...]
    run: Callable[..., None]


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the CPU (itself when it is there). Low-precision 1-byte formats (FP8, E8M0, packed
    FP4) travel as raw bytes, which every torch copies whatever the dtype and the layout."""
    if t.device.type == "cpu":
        return t
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
        return t.view(torch.uint8).cpu().view(t.dtype)
    return t.cpu()
