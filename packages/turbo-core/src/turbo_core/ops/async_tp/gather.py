"""The all-gather side of async tensor parallelism: every rank's shard reaches every rank chunk by
chunk, and each chunk is handed to a consumer (the GEMMs) as soon as its rows have arrived.

``all_gather_chunks(shard, scales, ...)`` takes this rank's shard with the gathered dim first,
``[rows, *rest, K]`` (contiguous), and optionally its row scales ``[rows, *rest, 1]`` (fp32, gathered
with their rows). It calls ``consume(r0, r1, lo, hi, rows, row_scales)`` on the caller's stream,
once per unit of work, in the plan's chunk order (``turbo_core.ops.async_tp.layout``): ``rows`` are
rows ``[lo, hi)`` of the blocks of ranks ``[r0, r1)``, flattened to ``[(r1 - r0) * (hi - lo) *
prod(rest), K]`` (rank, then row, then ``rest``); ``row_scales`` the same rows' scales ``[.., 1]`` or
None. When ``a_blocks`` (``[world, rows, *rest, K]``) is given, the gathered rows land there (and
the scales in ``s_blocks``).

``nccl``: one all-gather per split, all queued at once; a unit of remote rows waits for its split's
collective only. Remote chunks of one split that are next to each other in the order and in rank
order form one unit (one GEMM). The local rows need no wait: ``order="split"`` multiplies split
``s``'s local rows while its collective is in flight.

``symm``: this rank copies its shard into its symmetric buffer and, after a barrier on the copy
lane (every shard is in place), queues a copy of each remote chunk from its owner's buffer on the
copy lane (a copy-engine transfer over NVLink), each followed by an event; the consumer of a chunk
waits for that chunk's event only. The local chunks go first and overlap the first transfers. A closing barrier on the copy
lane (every rank has read every buffer) precedes the caller's next work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.distributed as dist

from turbo_core.low_precision import is_fp8_dtype
from turbo_core.ops.async_tp import transport
from turbo_core.ops.async_tp.layout import Chunk, chunk_order, split_ranges
from turbo_core.ops.async_tp.streams import Lane

__all__ = ["all_gather_chunks"]

Consumer = Callable[[int, int, int, int, torch.Tensor, "torch.Tensor | None"], None]


class _Unit(NamedTuple):
    r0: int
    r1: int
    split: int
    lo: int
    hi: int


def _units(chunks: list[Chunk], rank: int) -> list[_Unit]:
    """Consecutive remote chunks of one split and consecutive ranks, merged; the local ones alone."""
    out: list[_Unit] = []
    for c in chunks:
        prev = out[-1] if out else None
        if (prev is not None and c.rank != rank and prev.r0 != rank and prev.split == c.split
                and prev.r1 == c.rank):
            out[-1] = prev._replace(r1=c.rank + 1)
        else:
            out.append(_Unit(c.rank, c.rank + 1, c.split, c.lo, c.hi))
    return out


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group):
    """Async all-gather of ``inp`` into ``out`` along dim 0 (FP8 travels as its bytes)."""
    if is_fp8_dtype(inp.dtype):
        out, inp = out.view(torch.uint8), inp.view(torch.uint8)
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=True)


def _flat(t: torch.Tensor | None, last: int) -> torch.Tensor | None:
    return None if t is None else t.reshape(-1, last)


def _nccl(shard, scales, ranges, chunks, group, rank, world, consume: Consumer, a_blocks, s_blocks) -> None:
    k = shard.shape[-1]
    rest = shard.shape[1:-1]
    direct = a_blocks is not None and len(ranges) == 1 and a_blocks.is_contiguous() and \
        (scales is None or (s_blocks is not None and s_blocks.is_contiguous()))
    pending = []  # per split: (buffers, works, sources kept alive until the collectives are done)
    for lo, hi in ranges:
        h = hi - lo
        buf = a_blocks if direct else torch.empty((world, h, *rest, k), dtype=shard.dtype, device=shard.device)
        works = [_all_gather(buf.flatten(0, 1), shard[lo:hi], group)]
        sbuf = None
        if scales is not None:
            sbuf = s_blocks if direct else torch.empty((world, h, *rest, 1), dtype=scales.dtype, device=scales.device)
            works.append(_all_gather(sbuf.flatten(0, 1), scales[lo:hi], group))
        pending.append([buf, sbuf, works])

    def arrived(s: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        buf, sbuf, works = pending[s]
        if works:
            for work in works:
                work.wait()
            pending[s][2] = []
            if a_blocks is not None and not direct:
                lo, hi = ranges[s]
                a_blocks[:, lo:hi].copy_(buf)
                if sbuf is not None and s_blocks is not None:
                    s_blocks[:, lo:hi].copy_(sbuf)
        return buf, sbuf

    for u in _units(chunks, rank):
        if u.r0 == rank and u.r1 == rank + 1:
            rows, srows = shard[u.lo:u.hi], None if scales is None else scales[u.lo:u.hi]
        else:
            buf, sbuf = arrived(u.split)
            rows, srows = buf[u.r0:u.r1], None if sbuf is None else sbuf[u.r0:u.r1]
        consume(u.r0, u.r1, u.lo, u.hi, rows.reshape(-1, k), _flat(srows, 1))
    for s in range(len(ranges)):
        arrived(s)


def _stage(out: torch.Tensor | None, local: torch.Tensor, world: int) -> torch.Tensor:
    """Where the remote rows land: ``out`` itself when it is contiguous (each chunk then is one
    contiguous copy), else a ``[world, *local.shape]`` buffer."""
    if out is not None and out.is_contiguous():
        return out
    return torch.empty((world, *local.shape), dtype=local.dtype, device=local.device)


def _fill(out: torch.Tensor | None, stage: torch.Tensor, rank: int, local: torch.Tensor) -> None:
    """The gathered rows into ``out`` (when wanted): the local block, and the staged remote ones."""
    if out is None:
        return
    stage[rank].copy_(local)
    if stage is not out:
        out.copy_(stage)


def _symm(shard, scales, ranges, chunks, group, rank, world, consume: Consumer, a_blocks, s_blocks) -> None:
    device, k = shard.device, shard.shape[-1]
    data_bytes = transport.aligned(shard.numel() * shard.element_size())
    scale_bytes = 0 if scales is None else scales.numel() * scales.element_size()
    ws = transport.workspace(group, device, data_bytes + scale_bytes)
    cur, side = Lane.current(device), Lane.side(device, "copy")
    stage = _stage(a_blocks, shard, world)
    sstage = None if scales is None else _stage(s_blocks, scales, world)
    # the previous call's closing barrier came after every rank's reads of this buffer
    transport.typed(ws.local(), 0, shard.shape, shard.dtype).copy_(shard)
    if scales is not None:
        transport.typed(ws.local(), data_bytes, scales.shape, scales.dtype).copy_(scales)
    side.after(cur)  # the buffers above and this rank's rows are ready before the copy lane touches them
    with side.use():
        ws.barrier()  # every rank's rows are in its buffer
    # every copy is queued first (the copy lane runs them back to back, whatever the host does
    # next), then every GEMM, each after its own chunk's event
    arrived = {}
    with side.use():
        for c in chunks:
            if c.rank == rank:
                continue
            src = transport.typed(ws.peer(c.rank), 0, shard.shape, shard.dtype)
            stage[c.rank, c.lo:c.hi].copy_(src[c.lo:c.hi])
            if scales is not None:
                ssrc = transport.typed(ws.peer(c.rank), data_bytes, scales.shape, scales.dtype)
                sstage[c.rank, c.lo:c.hi].copy_(ssrc[c.lo:c.hi])
            arrived[c] = side.mark()
    for c in chunks:
        if c.rank == rank:
            rows, srows = shard[c.lo:c.hi], None if scales is None else scales[c.lo:c.hi]
        else:
            cur.wait(arrived[c])
            rows, srows = stage[c.rank, c.lo:c.hi], None if scales is None else sstage[c.rank, c.lo:c.hi]
        consume(c.rank, c.rank + 1, c.lo, c.hi, rows.reshape(-1, k), _flat(srows, 1))
    with side.use():
        _fill(a_blocks, stage, rank, shard)
        if scales is not None:
            _fill(s_blocks, sstage, rank, scales)
        ws.barrier()  # every rank has read every buffer
    cur.after(side)  # (so every tensor the copy lane read stays allocated until it is done)


def all_gather_chunks(shard: torch.Tensor, scales: torch.Tensor | None, *, group, world: int, rank: int,
                      num_splits: int, order: str, transport_name: str, consume: Consumer,
                      a_blocks: torch.Tensor | None = None, s_blocks: torch.Tensor | None = None) -> None:
    """Gather ``shard`` (and ``scales``) over ``group`` and feed ``consume`` (module docstring)."""
    ranges = split_ranges(shard.shape[0], num_splits)
    chunks = chunk_order(rank, world, ranges, order)
    run = _symm if transport_name == "symm" else _nccl
    run(shard, scales, ranges, chunks, group, rank, world, consume, a_blocks, s_blocks)
