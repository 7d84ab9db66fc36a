"""Availability of the MoE dispatch/combine backend (torch.distributed; DeepEP optional)."""

from __future__ import annotations

import torch


def probe() -> str | None:
    if not torch.distributed.is_available():
        return "this torch was built without torch.distributed"
    return None
