"""The private part of a DEEP_EP all-to-all handle (``MoeDispatchHandle.state``)."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["AllToAllState", "SymmTables", "compute_dtype", "offsets"]


class SymmTables(NamedTuple):
    """Where rows go on the symmetric transport, int64 on the device (exact mode from the count
    matrix ``C``; worst mode from the slots).

    ``row0``: ``[W]``, the first row of this rank's rows in each rank's buffer for a dispatch;
    ``back_row0``: ``[W]``, the same for a combine (the rows going back to each source);
    ``recv_offs``: exact mode ``[W + 1]``, the first received row from each source (None in worst
    mode); ``counts``: exact mode, ``C`` as host tuples (``C[s][d]``: rows ``s`` sends ``d``)."""

    row0: torch.Tensor
    back_row0: torch.Tensor
    recv_offs: torch.Tensor | None = None
    counts: tuple[tuple[int, ...], ...] | None = None


class AllToAllState(NamedTuple):
    """How a dispatch moved rows, so combine and cached dispatch retrace it.

    Attributes:
        mode: ``"local"`` (one rank: no communication), ``"exact"`` (counts exchanged, exact split
            sizes on the host) or ``"worst"`` (fixed slots, no host value, ``num_worst_tokens`` rows).
        rank, world: this rank and the group's size.
        send_token: int64. local: ``[R]``, the token in each received row (-1: padding);
            exact: ``[N_send]``, the token of each sent row in send order;
            worst: ``[W * slot]``, the token in each slot row (-1: an empty slot row).
        send_splits, recv_splits: exact mode: rows sent to / received from each rank (host ints).
        recv_from: worst mode: int64 ``[R]``, the slot row of each received row (``W * slot``: padding).
        to_recv: worst mode: int64 ``[W * slot]``, the received row of each slot row (``R``: none).
        slot: worst mode: rows per destination rank in the fixed slots.
        pos: the fused path's layout (:mod:`turbo_deepep.all_to_all.fused`), None on the torch
            path: int32 ``[T, W]``, the row of token ``t`` within the rows sent to rank ``d``
            (-1: not sent); a fused combine needs it.
        send_offs: exact mode on the fused path: int64 ``[W + 1]`` on the device, the first sent
            row of each rank (the prefix sums of ``send_splits``).
        transport: ``"collective"`` (``all_to_all_single``) or ``"symm"`` (the fused path's
            symmetric-memory transport, :mod:`turbo_deepep.all_to_all.symm`).
        tables: the symmetric transport's device tables (:class:`SymmTables`), else None.
    """

    mode: str
    rank: int
    world: int
    send_token: torch.Tensor
    send_splits: tuple[int, ...] | None = None
    recv_splits: tuple[int, ...] | None = None
    recv_from: torch.Tensor | None = None
    to_recv: torch.Tensor | None = None
    slot: int = 0
    pos: torch.Tensor | None = None
    send_offs: torch.Tensor | None = None
    transport: str = "collective"
    tables: SymmTables | None = None


def offsets(counts) -> list[int]:
    """``[0, c0, c0 + c1, ...]``: where each of consecutive runs of ``counts`` rows starts, then the
    total (host ints: split sizes, count-matrix rows or columns)."""
    out = [0]
    for n in counts:
        out.append(out[-1] + int(n))
    return out


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """Accumulation dtype of combine: float64 on the CPU, float32 on a GPU (the reference's rule)."""
    return torch.float64 if t.device.type == "cpu" else torch.float32
