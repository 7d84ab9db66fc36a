"""Availability of turbo-deepep's backends (cheap: nothing here touches a GPU)."""

from __future__ import annotations

import torch


def probe() -> str | None:
    """DEEP_EP (all-to-all): needs torch.distributed."""
    if not torch.distributed.is_available():
        return "this torch was built without torch.distributed"
    return None


def probe_buffer() -> str | None:
    """DEEP_EP_BUFFER: needs torch.distributed and an importable module with DeepEP's Buffer API."""
    reason = probe()
    if reason is not None:
        return reason
    from turbo_deepep.deepep_adapter import probe as adapter_probe

    return adapter_probe()
