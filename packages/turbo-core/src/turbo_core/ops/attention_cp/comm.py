"""The two exchanges of context-parallel attention over torch.distributed.

- :class:`Ulysses`: one ``all_to_all_single`` over the Ulysses group turns sequence-sharded tensors
  (``[b, s, h, d]``, every head) into head-sharded ones (``[b, U s, h / U, d]``, the Ulysses group's
  whole sequence in rank order) and back. Several tensors of one dtype travel in one call.
- :class:`Ring`: a shift around the ring group (send to the next rank, receive from the previous),
  started with ``batch_isend_irecv`` so that it runs while the caller computes.

Both work over NCCL/RCCL and over gloo on the CPU (gloo implements ``all_to_all_single`` and
point-to-point ``isend``/``irecv``). ``None`` stands for a group of one rank: no communication.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["Ring", "Ulysses", "group_size"]


def group_size(name: str, group) -> int:
    """The size of ``group`` (``None``: 1), after checking that it is a process group."""
    if group is None:
        return 1
    if not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"{name}: expected a torch.distributed ProcessGroup or None, got {type(group).__name__}")
    if not dist.is_initialized():
        raise ValueError(f"{name}: torch.distributed is not initialized (call init_process_group first)")
    return dist.get_world_size(group)


def _as4d(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 4 else x.unsqueeze(0)


class Ulysses:
    """Sequence <-> head resharding over ``group`` of ``U`` ranks (``U == 1``: identity)."""

    def __init__(self, group) -> None:
        self.group = group
        self.size = group_size("ulysses_group", group)

    def _exchange(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """``chunks[i]`` ``[U, ...]`` (row ``u`` goes to rank ``u``) -> what every rank sent here,
        row ``u`` from rank ``u``; one all-to-all for all of them."""
        sizes = [c[0].numel() for c in chunks]
        send = torch.cat([c.reshape(self.size, -1) for c in chunks], dim=1)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return [part.reshape(c.shape) for part, c in zip(recv.split(sizes, dim=1), chunks, strict=True)]

    def seq_to_head(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``[b, s, h, d]`` (or THD ``[t, h, d]``) with every head -> ``[b, U s, h / U, d]`` (``[U t, h / U, d]``)
        holding head group ``rank`` for the Ulysses group's whole sequence."""
        if self.size == 1:
            return xs
        u = self.size
        chunks = []
        for x in xs:
            b, s, h, d = _as4d(x).shape
            chunks.append(_as4d(x).reshape(b, s, u, h // u, d).permute(2, 0, 1, 3, 4))
        out = []
        for x, y in zip(xs, self._exchange(chunks), strict=True):
            _, b, s, hl, d = y.shape
            y = y.permute(1, 0, 2, 3, 4).reshape(b, u * s, hl, d)
            out.append(y if x.dim() == 4 else y[0])
        return tuple(out)

    def head_to_seq(self, *ys: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The inverse of :meth:`seq_to_head`: ``[b, U s, h / U, d]`` -> ``[b, s, h, d]``."""
        if self.size == 1:
            return ys
        u = self.size
        chunks = []
        for y in ys:
            b, big_s, hl, d = _as4d(y).shape
            chunks.append(_as4d(y).reshape(b, u, big_s // u, hl, d).permute(1, 0, 2, 3, 4))
        out = []
        for y, x in zip(ys, self._exchange(chunks), strict=True):
            _, b, s, hl, d = x.shape
            x = x.permute(1, 2, 0, 3, 4).reshape(b, s, u * hl, d)
            out.append(x if y.dim() == 4 else x[0])
        return tuple(out)

    def lse_head_to_seq(self, lse: torch.Tensor) -> torch.Tensor:
        """The log-sum-exp of the head-sharded result, ``[b, h / U, U s]`` (varlen ``[h / U, U t]``),
        -> the caller's rows and every head, ``[b, h, s]`` (``[h, t]``)."""
        if self.size == 1:
            return lse
        rows = lse.transpose(-1, -2).unsqueeze(-1)  # [b, U s, h / U, 1] or [U t, h / U, 1]
        (back,) = self.head_to_seq(rows)
        return back.squeeze(-1).transpose(-1, -2).contiguous()


class _Shift:
    def __init__(self, reqs, recv: torch.Tensor) -> None:
        self._reqs, self._recv = reqs, recv

    def wait(self) -> torch.Tensor:
        for req in self._reqs:
            req.wait()
        return self._recv


class Ring:
    """Ring shifts over ``group`` of ``R`` ranks: rank ``r`` sends to ``r + 1`` and receives from
    ``r - 1`` (mod ``R``)."""

    def __init__(self, group) -> None:
        self.group = group
        self.size = group_size("ring_group", group)
        self.rank = dist.get_rank(group) if self.size > 1 else 0
        if self.size > 1:
            self._next = dist.get_global_rank(group, (self.rank + 1) % self.size)
            self._prev = dist.get_global_rank(group, (self.rank - 1) % self.size)

    def start(self, send: torch.Tensor, tag: int) -> _Shift:
        """Send ``send`` (contiguous) to the next rank and receive the previous rank's tensor of the same
        shape and dtype; ``.wait()`` returns it. ``tag`` keeps concurrent shifts apart."""
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, self._next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self._prev, self.group, tag)]
        return _Shift(dist.batch_isend_irecv(ops), recv)
