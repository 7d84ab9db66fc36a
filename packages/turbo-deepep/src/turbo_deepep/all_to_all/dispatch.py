"""``moe_dispatch`` over ``torch.distributed.all_to_all_single`` (backend DEEP_EP).

Each token row travels once to every rank holding at least one of its experts, as one packed byte
row (``x`` in its own dtype, FP8 scales when ``x`` is fp8, fp32 probs, int32 global expert ids;
see :mod:`turbo_deepep.all_to_all.payload`): values arrive bit-identical. The receiver turns the
ids into its local ids (-1 for experts held elsewhere) and zeroes the probs of -1 slots.

Received rows are grouped by source rank in rank order, each source's tokens in increasing index
(DeepEP's order).

Two transports:

* exact (``num_worst_tokens == 0``): the per-rank row counts are exchanged once (one
  ``all_to_all_single`` of W int64 values) and read on the host (the one host sync: the split
  sizes and ``R`` depend on the data), then one ``all_to_all_single`` moves exactly the rows needed.
* worst (``num_worst_tokens > 0``): no count exchange and no host value: every rank sends W fixed
  slots of ``slot = min(T, num_worst_tokens)`` rows (its tokens for that rank, then padding rows
  whose expert ids are -1), one ``all_to_all_single`` with equal splits; the receiver packs the
  valid rows to the front of ``R = num_worst_tokens`` rows on the device. Capturable in a CUDA
  graph. Every rank must pass the same ``T`` and ``num_worst_tokens`` (they size the slots).
  Received rows past ``num_worst_tokens`` (a bound too small) are dropped.

One process (``group`` None or of size 1): no communication, the reference layout (``R = max(T,
num_worst_tokens)``, row ``t`` holds token ``t``, a token with no valid expert is a row of -1 ids).

``async_finish`` / ``allocate_on_comm_stream`` are accepted and ignored: the collectives run on the
current stream and the results are ready in stream order when this returns.

On GPUs the layout, packing, compaction and unpacking run as the fused Triton kernels of
:mod:`turbo_deepep.all_to_all.fused` (bit-identical results, a handful of launches instead of about
ninety torch ops); elsewhere, or with ``TURBO_DEEPEP_FUSED=0``, as torch ops. When the group's
ranks are GPUs of one host, the fused path moves the rows through symmetric memory instead of the
collectives (:mod:`turbo_deepep.all_to_all.symm_path`: the packing kernel stores each row in its
destination's buffer, at the same place; ``TURBO_DEEPEP_TRANSPORT=collective`` turns it off).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoeDispatchArgs, MoeDispatchHandle, group_size
from turbo_deepep.all_to_all import fused, symm, symm_path
from turbo_deepep.all_to_all.exchange import exchange_counts, exchange_rows, group_reason
from turbo_deepep.all_to_all.layout import (
    compact_rows,
    count_pairs,
    local_indices,
    ordered_rows,
    slot_rows,
    token_in_rank,
)
from turbo_deepep.all_to_all.payload import RowFormat, row_format
from turbo_deepep.all_to_all.state import AllToAllState, offsets

__all__ = ["BACKEND", "can_handle", "handle_reason", "moe_dispatch"]

BACKEND = "DEEP_EP"


def handle_reason(handle: MoeDispatchHandle) -> str | None:
    """Why this backend cannot use ``handle`` (None: it made it)."""
    if handle.backend != BACKEND:
        return f"the handle was made by backend {handle.backend or '(compiled region)'}, not {BACKEND}"
    if not isinstance(handle.state, AllToAllState):
        return f"the handle's state is not a {BACKEND} all-to-all layout"
    return None


def can_handle(args: MoeDispatchArgs) -> str | None:
    if args.handle is not None:
        reason = handle_reason(args.handle)
        if reason is not None:
            return reason
    if group_size(args.group) > 1:
        return group_reason(args.group, args.x.device)
    return None


def _format(x: torch.Tensor, scales: torch.Tensor | None, topk: int | None) -> RowFormat:
    fields = [("x", x.dtype, x.shape[1])]
    if scales is not None:
        fields.append(("scales", torch.float32, scales.shape[1]))
    if topk is not None:
        fields += [("probs", torch.float32, topk), ("idx", torch.int32, topk)]
    return row_format(tuple(fields), (("idx", 0xFF),))


def _move(args: MoeDispatchArgs, fmt: RowFormat, tensors: dict, st: AllToAllState | None,
          in_rank: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, AllToAllState]:
    """``(buf, index, state)``: the received packed rows are ``buf[index]`` (all of ``buf`` when
    ``index`` is None). ``st`` given: retrace it (cached dispatch); else build the layout from
    ``in_rank`` (fresh dispatch)."""
    x, group = args.x, args.group
    t, dev = x.shape[0], x.device
    world = group_size(group)
    if world == 1:
        if st is None:
            r = max(t, args.num_worst_tokens)
            src = torch.full((r,), -1, dtype=torch.int64, device=dev)
            src[:t] = torch.arange(t, dtype=torch.int64, device=dev)
            st = AllToAllState("local", 0, 1, src)
        index = torch.where(st.send_token >= 0, st.send_token, torch.full_like(st.send_token, t))
        return fmt.pack(tensors, t, dev, pad_row=True), index, st
    rank = group.rank()
    if (st.mode == "worst") if st is not None else args.num_worst_tokens > 0:
        if st is None:
            slot = min(t, args.num_worst_tokens)
            st = AllToAllState("worst", rank, world, slot_rows(in_rank, slot), slot=slot)
        buf = exchange_rows(fmt.gather(tensors, st.send_token, t), group, world * st.slot, tail=fmt.pad_row(dev))
        if st.recv_from is None:
            valid = (local_indices(fmt.unpack(buf[:-1], "idx"), rank, args.num_experts // world) >= 0).any(dim=1)
            recv_from, to_recv = compact_rows(valid, args.num_worst_tokens)
            st = st._replace(recv_from=recv_from, to_recv=to_recv)
        return buf, st.recv_from, st
    if st is None:
        send_counts = in_rank.sum(dim=0, dtype=torch.int64)
        recv_counts = exchange_counts(send_counts, group)
        send_splits, recv_splits = torch.stack([send_counts, recv_counts]).tolist()  # the one host sync
        st = AllToAllState("exact", rank, world, ordered_rows(in_rank, sum(send_splits)),
                           tuple(send_splits), tuple(recv_splits))
    send = fmt.gather(tensors, st.send_token, t)
    return exchange_rows(send, group, sum(st.recv_splits), list(st.send_splits), list(st.recv_splits)), None, st


def _fused_layout(args: MoeDispatchArgs, fmt: RowFormat, tensors: dict, world: int):
    """Fresh dispatch on the fused path: ``(buf, recv_from or None, rows received, state)``."""
    x, group, e = args.x, args.group, args.num_experts
    t, rank = x.shape[0], group.rank()
    if args.num_worst_tokens > 0:
        slot = min(t, args.num_worst_tokens)
        slot_tok, pos, _ = fused.route(args.token_indices, e, world, slot)
        send, _ = fused.pack(fmt, tensors, world * slot, t, rows=slot_tok.view(-1), num_experts=e)
        buf = exchange_rows(send, group, world * slot)
        recv_from, to_recv = fused.compact(buf, fmt, rank, e // world, args.num_worst_tokens)
        st = AllToAllState("worst", rank, world, slot_tok.view(-1), recv_from=recv_from, to_recv=to_recv, slot=slot,
                           pos=pos)
        return buf, recv_from, args.num_worst_tokens, st
    slot_tok, pos, send_counts = fused.route(args.token_indices, e, world, t)
    recv_counts = exchange_counts(send_counts, group)
    send_splits, recv_splits = torch.stack([send_counts, recv_counts]).tolist()  # the one host sync
    offs = offsets(send_splits)
    offs_dev = torch.tensor(offs, dtype=torch.int64, device=x.device)
    send, order = fused.pack(fmt, tensors, offs[-1], t, slots=slot_tok, offs=offs_dev, num_experts=e)
    buf = exchange_rows(send, group, sum(recv_splits), send_splits, recv_splits)
    st = AllToAllState("exact", rank, world, order, tuple(send_splits), tuple(recv_splits), pos=pos,
                       send_offs=offs_dev)
    return buf, None, buf.shape[0], st


def _fused_resend(args: MoeDispatchArgs, fmt: RowFormat, tensors: dict, st: AllToAllState):
    """Cached dispatch on the fused path: ``(recv_x, recv_scales)`` along ``st``'s layout."""
    t = args.x.shape[0]
    if st.transport == "symm":
        buf = symm_path.resend(args, fmt, tensors, st)
        rows, index = (st.recv_from.shape[0], st.recv_from) if st.mode == "worst" else (buf.shape[0], None)
        rx, rs, *_ = fused.unpack(buf, fmt, rows, index)
        return rx, rs
    if st.mode == "worst":
        send, _ = fused.pack(fmt, tensors, st.world * st.slot, t, rows=st.send_token)
        buf = exchange_rows(send, args.group, st.world * st.slot)
        rx, rs, *_ = fused.unpack(buf, fmt, st.recv_from.shape[0], st.recv_from)
        return rx, rs
    send, _ = fused.pack(fmt, tensors, st.send_token.shape[0], t, rows=st.send_token)
    buf = exchange_rows(send, args.group, sum(st.recv_splits), list(st.send_splits), list(st.recv_splits))
    rx, rs, *_ = fused.unpack(buf, fmt, buf.shape[0], None)
    return rx, rs


def moe_dispatch(args: MoeDispatchArgs):
    """``(recv_x, recv_x_scales, recv_token_indices, recv_token_probs, tokens_per_expert, handle)``
    as :class:`~turbo_core.dispatch.specs.moe.MoeDispatchArgs` describes (cached dispatch:
    ``(recv_x, recv_x_scales, None, None, None, handle)``)."""
    x = args.x.contiguous()
    scales = None if args.x_scales is None else args.x_scales.contiguous()
    tensors = {"x": x, "scales": scales}
    world = group_size(args.group)
    if args.handle is not None:
        fmt = _format(x, scales, None)
        if world > 1 and fused.enabled(fmt, x.device):
            rx, rs = _fused_resend(args, fmt, tensors, args.handle.state)
            return rx, rs, None, None, None, args.handle
        buf, index, _ = _move(args, fmt, tensors, args.handle.state, None)
        recv_scales = None if scales is None else fmt.unpack(buf, "scales", index)
        return fmt.unpack(buf, "x", index), recv_scales, None, None, None, args.handle
    idx, e, group = args.token_indices, args.num_experts, args.group
    e_l = e // world
    fmt = _format(x, scales, idx.shape[1])
    if world > 1 and fused.enabled(fmt, x.device):
        tensors.update(idx=idx, probs=args.token_probs)
        if symm.reason(group, x.device) is None:
            rx, rs, local, probs, tpe, st = symm_path.dispatch(args, fmt, tensors, world)
        else:
            buf, recv_from, rows, st = _fused_layout(args, fmt, tensors, world)
            rx, rs, local, probs, tpe = fused.unpack(buf, fmt, rows, recv_from, idx_dtype=idx.dtype, rank=st.rank,
                                                     num_local=e_l)
        return rx, rs, local, probs, tpe, MoeDispatchHandle(BACKEND, group, x.shape[0], rx.shape[0], e_l, st)
    valid = (idx >= 0) & (idx < e)
    tensors["idx"] = torch.where(valid, idx, torch.full_like(idx, -1)).to(torch.int32)
    tensors["probs"] = args.token_probs.contiguous()
    in_rank = token_in_rank(idx, e, world) if world > 1 else None
    buf, index, st = _move(args, fmt, tensors, None, in_rank)
    local = local_indices(fmt.unpack(buf, "idx", index), st.rank, e_l)
    probs = fmt.unpack(buf, "probs", index)
    recv_probs = torch.where(local >= 0, probs, torch.zeros_like(probs))
    recv_x = fmt.unpack(buf, "x", index)
    handle = MoeDispatchHandle(BACKEND, group, x.shape[0], recv_x.shape[0], e_l, st)
    recv_scales = None if scales is None else fmt.unpack(buf, "scales", index)
    return recv_x, recv_scales, local.to(idx.dtype), recv_probs, count_pairs(local, e_l), handle
