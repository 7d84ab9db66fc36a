"""Dispatch and combine on the fused path over the symmetric-memory transport
(:mod:`turbo_deepep.all_to_all.symm`): the packing kernel stores each row straight into its
destination rank's buffer, at the place an ``all_to_all_single`` would have put it, so the rows a
rank reads afterwards (and everything computed from them) are bit-identical to the collective
path's.

Exact mode: every rank's per-destination counts travel in the buffers' headers (the routing kernel
stores them), so each rank learns the whole count matrix ``C`` (one host read, the one sync of
exact mode); rank ``s``'s rows for ``d`` land after those of ranks ``< s``; a combine sends each
source its rows back in its own send order. Worst mode, fresh dispatch: the counts travel in the
headers as in exact mode, but stay on the device; the packing kernel stores each row at its final
(compacted) result row and a rank's own rows straight into its results (:func:`dispatch`). Worst
mode, cached dispatch and combine: fixed slots of ``slot`` rows per source (``d``'s rows from ``s``
at ``[s * slot, (s + 1) * slot)``), read through the layout's ``recv_from`` / ``to_recv``: no host
value either way.

Every exchange is bracketed by two barriers (:class:`~turbo_deepep.all_to_all.symm.Buffers`): the
first lets a rank write only once every rank is done reading its buffer, the second lets it read
only once every row has landed.
"""

from __future__ import annotations

import torch

from turbo_deepep.all_to_all import fused, symm
from turbo_deepep.all_to_all.payload import RowFormat
from turbo_deepep.all_to_all.state import AllToAllState, SymmTables, offsets

__all__ = ["combine", "dispatch", "resend"]


def _i64(values, dev: torch.device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64, device=dev)


def _rows(buf: symm.Buffers, world: int, n: int, fmt: RowFormat) -> torch.Tensor:
    """``uint8 [n, B]``: the first ``n`` rows of this rank's buffer."""
    hdr = symm.header_bytes(world)
    return buf.local[hdr: hdr + n * fmt.row_bytes].view(n, fmt.row_bytes)


def _put(buf: symm.Buffers, world: int, row0: torch.Tensor, *, offs=None, slot: int = 0,
         ids_only_pad: bool = False) -> fused.Put:
    return fused.Put(buf.peers, row0, symm.header_bytes(world) // 4, offs=offs, slot=slot,
                     ids_only_pad=ids_only_pad)


_WORST: dict[tuple, SymmTables] = {}


def _worst_tables(rank: int, world: int, slot: int, dev: torch.device) -> SymmTables:
    """Worst mode: this rank's rows start at ``rank * slot`` in every buffer (kept per layout: the
    tables never change, and one fewer allocation per call)."""
    key = (rank, world, slot, dev)
    if key not in _WORST:
        mine = torch.full((world,), rank * slot, dtype=torch.int64, device=dev)
        _WORST[key] = SymmTables(mine, mine)
    return _WORST[key]


def _most_rows(counts, back: bool) -> int:
    """Exact mode: the rows the busiest rank's buffer holds, the same on every rank (``counts`` is
    the count matrix ``C[s][d]``): received in a dispatch (a column's sum), or got back in a
    combine (``back``: a row's sum)."""
    world = len(counts)
    if back:
        return max(sum(row) for row in counts)
    return max(sum(counts[s][d] for s in range(world)) for d in range(world))


def _exact_tables(counts: list[list[int]], rank: int, dev: torch.device) -> SymmTables:
    world = len(counts)
    row0 = [sum(counts[s][d] for s in range(rank)) for d in range(world)]  # after the rows of ranks < rank
    back_row0 = [sum(counts[s][:rank]) for s in range(world)]  # source s's send order: rows for ranks < rank first
    recv_offs = offsets(counts[s][rank] for s in range(world))
    return SymmTables(_i64(row0, dev), _i64(back_row0, dev), _i64(recv_offs, dev),
                      tuple(tuple(row) for row in counts))


def dispatch(args, fmt: RowFormat, tensors: dict, world: int):
    """Fresh dispatch: ``(recv_x, recv_scales, local ids, probs, tokens_per_expert, state)`` (the
    collective path's ``_fused_layout`` followed by :func:`fused.unpack`).

    Worst mode compacts on the way: the routing kernel stores this rank's counts into every rank's
    header (as exact mode does), and after the first barrier the packing kernel reads the count
    matrix from its own header to store each row at its final place (after the rows of lower
    ranks), this rank's own rows straight into the results. The receiver then needs no compaction
    kernel, and its unpacking copies only the rows of other ranks. No host value: every count stays
    on the device. A rank reads its header only before its second barrier, and a rank writes the
    others' headers only before its first barrier of a later exchange, so no header is written
    while it is read."""
    x, group, e = args.x, args.group, args.num_experts
    t, rank, dev, b = x.shape[0], group.rank(), x.device, fmt.row_bytes
    hdr = symm.header_bytes(world)
    idx_dtype, e_l = args.token_indices.dtype, e // world
    if args.num_worst_tokens > 0:
        slot, nw = min(t, args.num_worst_tokens), args.num_worst_tokens
        buf = symm.buffers(group, dev, hdr + world * slot * b)
        tables = _worst_tables(rank, world, slot, dev)
        slot_tok, pos, _ = fused.route(args.token_indices, e, world, slot, put_counts=(buf.peers, rank))
        buf.barrier()
        got = fused.pack_compacted(fmt, tensors, slot_tok, t, e, _put(buf, world, tables.row0), rank, nw, e_l)
        buf.barrier()
        rx, rs, local, probs, tpe = fused.unpack(_rows(buf, world, world * slot, fmt), fmt, nw, None,
                                                 idx_dtype=idx_dtype, rank=rank, num_local=e_l, into=got)
        st = AllToAllState("worst", rank, world, slot_tok.view(-1), recv_from=got.recv_from, to_recv=got.to_recv,
                           slot=slot, pos=pos, transport="symm", tables=tables)
        return rx, rs, local, probs, tpe, st
    buf = symm.buffers(group, dev, hdr)
    buf.barrier()
    slot_tok, pos, _ = fused.route(args.token_indices, e, world, t, put_counts=(buf.peers, rank))
    buf.barrier()
    counts = buf.local[: world * world * 8].view(torch.int64).view(world, world).tolist()  # the one host sync
    send, recv = counts[rank], [counts[s][rank] for s in range(world)]
    buf = symm.buffers(group, dev, hdr + _most_rows(counts, back=False) * b)
    tables = _exact_tables(counts, rank, dev)
    offs = _i64(offsets(send), dev)
    _, order = fused.pack(fmt, tensors, sum(send), t, slots=slot_tok, offs=offs, num_experts=e,
                          put=_put(buf, world, tables.row0))
    buf.barrier()
    st = AllToAllState("exact", rank, world, order, tuple(send), tuple(recv), pos=pos, send_offs=offs,
                       transport="symm", tables=tables)
    n = sum(recv)
    rx, rs, local, probs, tpe = fused.unpack(_rows(buf, world, n, fmt), fmt, n, None, idx_dtype=idx_dtype, rank=rank,
                                             num_local=e_l)
    return rx, rs, local, probs, tpe, st


def _exchange_bytes(st: AllToAllState, fmt: RowFormat, back: bool) -> int:
    """Buffer bytes every rank needs for one exchange along ``st`` (dispatch, or combine if ``back``)."""
    rows = st.world * st.slot if st.mode == "worst" else _most_rows(st.tables.counts, back)
    return symm.header_bytes(st.world) + rows * fmt.row_bytes


def resend(args, fmt: RowFormat, tensors: dict, st: AllToAllState) -> torch.Tensor:
    """Cached dispatch along ``st``: the received rows ``uint8 [N, B]`` (worst mode: read them
    through ``st.recv_from``)."""
    buf = symm.buffers(args.group, args.x.device, _exchange_bytes(st, fmt, back=False))
    t = args.x.shape[0]
    buf.barrier()
    if st.mode == "worst":
        fused.pack(fmt, tensors, st.world * st.slot, t, rows=st.send_token,
                   put=_put(buf, st.world, st.tables.row0, slot=st.slot, ids_only_pad=True))
        n = st.world * st.slot
    else:
        fused.pack(fmt, tensors, st.send_token.shape[0], t, rows=st.send_token,
                   put=_put(buf, st.world, st.tables.row0, offs=st.send_offs))
        n = sum(st.recv_splits)
    buf.barrier()
    return _rows(buf, st.world, n, fmt)


def combine(group, fmt: RowFormat, tensors: dict, st: AllToAllState, r: int, t: int, acc: torch.dtype):
    """``(combined [T, H], probs [T, K] or None)``: each of the ``r`` rows goes back into its
    source's buffer, where the source sums its tokens' rows (:func:`fused.reduce`, rank order)."""
    buf = symm.buffers(group, tensors["x"].device, _exchange_bytes(st, fmt, back=True))
    buf.barrier()
    if st.mode == "worst":
        fused.pack(fmt, tensors, st.world * st.slot, r, rows=st.to_recv,
                   put=_put(buf, st.world, st.tables.back_row0, slot=st.slot))
        buf.barrier()
        back = _rows(buf, st.world, st.world * st.slot, fmt)
        return fused.reduce(back, fmt, st.pos, t, acc, slot=st.slot)
    fused.pack(fmt, tensors, r, r, put=_put(buf, st.world, st.tables.back_row0, offs=st.tables.recv_offs))
    buf.barrier()
    back = _rows(buf, st.world, sum(st.send_splits), fmt)
    return fused.reduce(back, fmt, st.pos, t, acc, bases=st.send_offs)
