"""The reduce-scatter side of async tensor parallelism: each chunk of partial products is computed,
sent to the rank that owns its rows, and summed there while the next chunks' GEMMs run.

``reduce_scatter_chunks(by_rank, produce, ...)`` takes this rank's input with the scattered dim
first and cut per destination, ``[world, per, *rest, K]``, and ``produce(rows) -> [rows, N]`` (the
GEMM, on the caller's stream). The sum over ranks of destination ``rank``'s rows lands in
``result`` (``[per, *rest, N]``, divided by ``world`` when ``avg``); when ``output_blocks``
(``[world, per, *rest, N]``) is given, this rank's own products land there too.

``nccl``: ``order="split"`` multiplies the rows of split ``s`` of every destination in one GEMM,
then queues that split's reduce-scatter (``async_op=True``) and goes on with split ``s + 1``;
``order="rank"`` multiplies destination by destination (ring order, the local rank last) and queues
a split's reduce-scatter once every destination's rows of that split are done. The sum is the
collective's (NCCL: in the output dtype).

``symm``: every rank's symmetric buffer holds ``world`` slots ``[world, per, *rest, N]``: slot ``j``
receives the products rank ``j`` computed for this rank's rows. Each chunk ``(destination d, split
s)``'s GEMM runs on the caller's stream; the copy lane then pushes the result into slot ``rank`` of
``d``'s buffer (a copy-engine transfer over NVLink) while the next GEMM runs; the local chunk is
copied into this rank's own slot. After a split's last chunk, a barrier on the copy lane (every
rank has pushed that split everywhere) releases the reduce lane, which sums the split's ``world``
slots into ``result`` (``torch.sum`` over the slots: fp32 accumulation, one rounding) while the GEMMs
of the next split run. A closing barrier (every rank has summed its slots) precedes the caller's next
work.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from turbo_core.ops.async_tp import transport
from turbo_core.ops.async_tp.layout import chunk_order, split_ranges
from turbo_core.ops.async_tp.streams import Lane

__all__ = ["reduce_scatter_chunks"]


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group):
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, op=dist.ReduceOp.SUM, group=group, async_op=True)


def _place_output(output_blocks, r0, r1, lo, hi, part) -> None:
    if output_blocks is not None:
        dst = output_blocks[r0:r1, lo:hi]
        dst.copy_(part.view(dst.shape))


def _nccl(by_rank, produce, ranges, group, rank, world, result, avg, output_blocks, order) -> None:
    k = by_rank.shape[-1]
    rest = by_rank.shape[2:-1]
    if order == "split":
        units = [(0, world, s, lo, hi) for s, (lo, hi) in enumerate(ranges)]
    else:
        units = [(c.rank, c.rank + 1, c.split, c.lo, c.hi)
                 for c in chunk_order(rank, world, ranges, "rank", local_last=True)]
    parts: dict[int, torch.Tensor] = {}
    done = [0] * len(ranges)
    pending = []
    for r0, r1, s, lo, hi in units:
        h = hi - lo
        prod = produce(by_rank[r0:r1, lo:hi].reshape(-1, k))  # [(r1 - r0) * h * rest, N], destination-major
        n = prod.shape[-1]
        _place_output(output_blocks, r0, r1, lo, hi, prod)
        if r1 - r0 == world:
            part = prod.view(world, h, *rest, n)
        else:
            part = parts.get(s)
            if part is None:
                part = parts[s] = torch.empty((world, h, *rest, n), dtype=prod.dtype, device=prod.device)
            part[r0:r1].copy_(prod.view(r1 - r0, h, *rest, n))
        done[s] += r1 - r0
        if done[s] == world:
            target = result[lo:hi]
            recv = target if target.is_contiguous() else torch.empty(target.shape, dtype=target.dtype, device=target.device)
            pending.append((target, recv, part, _reduce_scatter(recv.view(-1, n), part.view(-1, n), group)))
            parts.pop(s, None)
    for target, recv, _part, work in pending:  # _part stays alive until its collective is done
        work.wait()
        if avg:
            recv.div_(world)
        if recv is not target:
            target.copy_(recv)


def _symm(by_rank, produce, ranges, group, rank, world, result, avg, output_blocks, order, n, dtype) -> None:
    device, k = by_rank.device, by_rank.shape[-1]
    per, rest = by_rank.shape[1], by_rank.shape[2:-1]
    slot_shape = (world, per, *rest, n)
    nbytes = world * per * n * dtype.itemsize
    for r in rest:
        nbytes *= r
    ws = transport.workspace(group, device, nbytes)
    mine = transport.typed(ws.local(), 0, slot_shape, dtype)
    cur, side, red = Lane.current(device), Lane.side(device, "copy"), Lane.side(device, "reduce")
    side.after(cur)  # result and every input are ready before the side lanes touch them
    red.after(cur)
    chunks = chunk_order(rank, world, ranges, order, local_last=True)
    last = {c.split: i for i, c in enumerate(chunks)}
    own: dict[int, object] = {}
    for i, c in enumerate(chunks):
        h = c.hi - c.lo
        prod = produce(by_rank[c.rank, c.lo:c.hi].reshape(-1, k))  # [h * rest, N] on the caller's stream
        _place_output(output_blocks, c.rank, c.rank + 1, c.lo, c.hi, prod)
        if c.rank == rank:
            mine[rank, c.lo:c.hi].copy_(prod.view(h, *rest, n))
            own[c.split] = cur.mark()
        else:
            side.wait(cur.mark())
            with side.use():
                peer = transport.typed(ws.peer(c.rank), 0, slot_shape, dtype)
                peer[rank, c.lo:c.hi].copy_(prod.view(h, *rest, n))
            side.keep(prod)
        if last[c.split] == i:  # this rank has sent its part of split c.split to every rank
            with side.use():
                ws.barrier()  # ... and so has every rank: this rank's slots of the split are complete
            red.wait(side.mark())
            red.wait(own.get(c.split))
            with red.use():
                target = result[c.lo:c.hi]
                if target.is_contiguous():
                    torch.sum(mine[:, c.lo:c.hi], dim=0, out=target)
                else:
                    target.copy_(mine[:, c.lo:c.hi].sum(dim=0))
                if avg:
                    target.div_(world)
    side.after(red)
    with side.use():
        ws.barrier()  # every rank has summed its slots: the next call may write them
    cur.after(side)


def reduce_scatter_chunks(by_rank: torch.Tensor, produce: Callable[[torch.Tensor], torch.Tensor], *, group,
                          world: int, rank: int, num_splits: int, order: str, transport_name: str,
                          result: torch.Tensor, n: int, avg: bool, output_blocks: torch.Tensor | None = None) -> None:
    """Multiply ``by_rank``'s chunks with ``produce`` and reduce-scatter them into ``result``
    (module docstring)."""
    ranges = split_ranges(by_rank.shape[1], num_splits)
    if transport_name == "symm":
        _symm(by_rank, produce, ranges, group, rank, world, result, avg, output_blocks, order, n, result.dtype)
    else:
        _nccl(by_rank, produce, ranges, group, rank, world, result, avg, output_blocks, order)
