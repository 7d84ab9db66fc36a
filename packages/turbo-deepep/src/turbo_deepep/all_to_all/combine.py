"""``moe_combine`` over ``torch.distributed.all_to_all_single`` (backend DEEP_EP).

The inverse transport of the dispatch that made the handle: each received row (and its probs
row, when given) goes back to the rank it came from in one ``all_to_all_single`` (exact split
sizes from the handle, or the fixed slots of the worst-case mode: no host value), packed as one
byte row. There, each token's returned rows are summed in float64 (CPU) / float32 (GPU), rank 0's
row first, then rank 1's, ... (one ``index_add_`` per source rank, whose rows hold distinct tokens:
deterministic), and rounded once to ``x``'s dtype (probs: fp32). A token sent nowhere gets 0.
A handle from the fused dispatch path combines through :func:`turbo_deepep.all_to_all.fused.reduce`
(one kernel, the same order and bits) when the fused path serves these rows.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoeCombineArgs
from turbo_deepep.all_to_all import fused, symm_path
from turbo_deepep.all_to_all.dispatch import handle_reason
from turbo_deepep.all_to_all.exchange import exchange_rows, group_reason
from turbo_deepep.all_to_all.payload import RowFormat, row_format
from turbo_deepep.all_to_all.state import AllToAllState, compute_dtype, offsets

__all__ = ["can_handle", "moe_combine", "sum_rows"]


def can_handle(args: MoeCombineArgs) -> str | None:
    reason = handle_reason(args.handle)
    if reason is not None:
        return reason
    if args.handle.state.world > 1:
        return group_reason(args.handle.group, args.x.device)
    return None


def sum_rows(values: torch.Tensor, token: torch.Tensor, num_tokens: int, runs: list[tuple[int, int]],
             acc_dtype: torch.dtype) -> torch.Tensor:
    """``[num_tokens, C]`` in ``acc_dtype``: row ``i`` of ``values`` (``[N, C]``) added to token
    ``token[i]`` (-1: dropped), run by run (rows ``[a, b)`` of a run hold distinct tokens)."""
    acc = torch.zeros((num_tokens + 1, values.shape[1]), dtype=acc_dtype, device=values.device)
    dst = torch.where(token >= 0, token, torch.full_like(token, num_tokens))
    vals = values.to(acc_dtype)
    for a, b in runs:
        if b > a:
            acc.index_add_(0, dst[a:b], vals[a:b])
    return acc[:num_tokens]


def _runs(st: AllToAllState, rows: int) -> list[tuple[int, int]]:
    if st.mode == "local":
        return [(0, rows)]
    if st.mode == "worst":
        return [(d * st.slot, (d + 1) * st.slot) for d in range(st.world)]
    starts = offsets(st.send_splits)
    return list(zip(starts, starts[1:], strict=False))


_FUSED_SUMS = (torch.float32, torch.float16, torch.bfloat16)  # dtypes the fused combine sums (else torch's)


def _fused_combine(fmt: RowFormat, tensors: dict, handle, st: AllToAllState, r: int, t: int):
    """The fused path (:mod:`turbo_deepep.all_to_all.fused`): pack, one all-to-all (or the
    symmetric transport's stores), one summing kernel over ``st.pos``; same bytes and summation
    order as the torch path."""
    if st.transport == "symm":
        return symm_path.combine(handle.group, fmt, tensors, st, r, t, compute_dtype(tensors["x"]))
    if st.mode == "exact":
        send, _ = fused.pack(fmt, tensors, r, r)
        back = exchange_rows(send, handle.group, sum(st.send_splits), list(st.recv_splits), list(st.send_splits))
        return fused.reduce(back, fmt, st.pos, t, compute_dtype(tensors["x"]), bases=st.send_offs)
    send, _ = fused.pack(fmt, tensors, st.world * st.slot, r, rows=st.to_recv)
    back = exchange_rows(send, handle.group, st.world * st.slot)
    return fused.reduce(back, fmt, st.pos, t, compute_dtype(tensors["x"]), slot=st.slot)


def moe_combine(args: MoeCombineArgs):
    """``(combined [T, H] x's dtype, combined_probs [T, K] fp32 or None)``."""
    handle = args.handle
    st: AllToAllState = handle.state
    x = args.x.contiguous()
    probs = None if args.probs is None else args.probs.contiguous()
    dev, r, t = x.device, x.shape[0], handle.num_tokens
    fields = [("x", x.dtype, x.shape[1])] + ([] if probs is None else [("probs", torch.float32, probs.shape[1])])
    fmt = row_format(tuple(fields))
    tensors = {"x": x, "probs": probs}
    if st.pos is not None and x.dtype in _FUSED_SUMS and fused.enabled(fmt, dev):
        return _fused_combine(fmt, tensors, handle, st, r, t)
    if st.mode == "local":
        back = fmt.pack(tensors, r, dev)
    elif st.mode == "exact":
        back = exchange_rows(fmt.pack(tensors, r, dev), handle.group, sum(st.send_splits), list(st.recv_splits),
                             list(st.send_splits))
    else:
        send = fmt.pack(tensors, r, dev, pad_row=True)[st.to_recv]
        back = exchange_rows(send, handle.group, st.world * st.slot)
    runs = _runs(st, back.shape[0])
    acc = compute_dtype(x)
    combined = sum_rows(fmt.view(back, "x"), st.send_token, t, runs, acc).to(x.dtype)
    cprobs = None
    if probs is not None:
        cprobs = sum_rows(fmt.view(back, "probs"), st.send_token, t, runs, acc).to(torch.float32)
    return combined.contiguous(), cprobs
