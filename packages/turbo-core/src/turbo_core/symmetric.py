"""Whether PyTorch's symmetric memory (``torch.distributed._symmetric_memory``) can serve a process
group: the one check that every symmetric-memory transport in turbo makes first (async tensor
parallelism here, turbo-deepep's expert-parallel all-to-all).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

import torch

__all__ = ["symmetric_reason"]

W = TypeVar("W")


def symmetric_reason(group, device: torch.device, open_workspace: Callable[[], W]) -> tuple[str | None, W | None]:
    """``(reason, workspace)``: why symmetric memory cannot serve ``group`` on ``device`` (``None``:
    it can), and, when it can, the trial workspace ``open_workspace()`` opened (its ``barrier()``
    already passed), for the caller to keep.

    A collective call: every rank of ``group`` makes it at the same point and gets the same answer.
    It declines when ``torch.distributed._symmetric_memory`` does not import on some rank, the group
    spans more than one host, two of its ranks share a GPU, or opening the workspace (a rendezvous)
    or its first barrier fails on some rank; the reason names which.
    """
    import torch.distributed as dist

    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means no such transport
        local = f"torch.distributed._symmetric_memory does not import ({type(exc).__name__}: {exc})"
    else:
        local = None
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", device.index))
    seen: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(seen, (socket.gethostname(), uuid, local), group=group)
    bad = next((r for _, _, r in seen if r is not None), None)
    if bad is not None:
        return bad, None
    if len({h for h, _, _ in seen}) > 1:
        return "the group spans more than one host", None
    if len({u for _, u, _ in seen}) < len(seen):
        return "two ranks of the group share a GPU", None
    trial = None
    try:
        trial = open_workspace()
        trial.barrier()
        outcome = None
    except Exception as exc:  # noqa: BLE001 - reported; every rank learns of it below
        outcome = f"a symmetric-memory rendezvous failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    outcomes: list = [None] * len(seen)
    dist.all_gather_object(outcomes, outcome, group=group)
    failed = next((o for o in outcomes if o is not None), None)
    return (failed, None) if failed is not None else (None, trial)
