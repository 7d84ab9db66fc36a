"""The collectives of the all-to-all backend: one small count exchange, one payload exchange.

Both are ``torch.distributed.all_to_all_single`` on the caller's process group, so they run on
whatever the group's backend is: NCCL (NVIDIA), RCCL (AMD, under the name ``nccl``), gloo (CPU
tensors; also CUDA tensors through host staging).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["exchange_counts", "exchange_rows", "group_reason"]

# Backends that move device (GPU) tensors only: CPU tensors on them fail inside the collective.
_DEVICE_ONLY = {"nccl", "xccl", "hccl"}


def _backend_for(group, device_type: str) -> str | None:
    """The name of ``group``'s backend for ``device_type`` tensors (``None`` when unknown)."""
    try:
        spec = str(dist.get_backend(group)).lower()
    except Exception:  # a group torch.distributed does not know (a test fake, ...): let it try
        return None
    if ":" not in spec:
        return spec
    table = dict(part.split(":", 1) for part in spec.split(",") if ":" in part)
    return table.get(device_type)


def group_reason(group, device: torch.device) -> str | None:
    """Why ``group`` cannot move tensors on ``device`` with ``all_to_all_single`` (None: it can)."""
    name = _backend_for(group, device.type)
    if device.type == "cpu" and name in _DEVICE_ONLY:
        return (f"the process group's backend {name} moves GPU tensors only; these tensors are on the CPU"
                " (use a gloo group, e.g. new_group(backend='gloo'))")
    return None


def exchange_counts(send_counts: torch.Tensor, group) -> torch.Tensor:
    """int64 ``[W]``: how many rows each rank sends here, from this rank's ``send_counts``
    (int64 ``[W]``, rows for each rank). One ``all_to_all_single`` of W integers; stays on the device."""
    recv = torch.empty_like(send_counts)
    dist.all_to_all_single(recv, send_counts.contiguous(), group=group)
    return recv


def exchange_rows(send: torch.Tensor, group, recv_rows: int, send_splits: list[int] | None = None,
                  recv_splits: list[int] | None = None, tail: torch.Tensor | None = None) -> torch.Tensor:
    """Send the packed rows ``send`` (``uint8 [N, B]``; rank ``d``'s rows contiguous, in rank
    order, ``send_splits[d]`` of them) and return the ``recv_rows`` rows received (source ranks in
    order, ``recv_splits[s]`` from rank ``s``), followed by the rows of ``tail`` (``[n, B]``) when
    given (a padding row to gather from, without a second copy). Split lists ``None``: equal splits
    (fixed slots), no host value needed."""
    extra = 0 if tail is None else tail.shape[0]
    out = torch.empty((recv_rows + extra, send.shape[1]), dtype=send.dtype, device=send.device)
    if extra:
        out[recv_rows:] = tail
    if send.shape[1] == 0:  # same on every rank (the row format follows shapes and dtypes)
        return out
    dist.all_to_all_single(out[:recv_rows], send, output_split_sizes=recv_splits, input_split_sizes=send_splits,
                           group=group)
    return out
