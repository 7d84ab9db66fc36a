"""Reference expert-parallel ``moe_dispatch`` / ``moe_combine`` for a single process.

With one rank every expert is local (local id = global id) and every token is "sent" once to
itself: received row ``t`` holds token ``t`` (rows past ``T`` up to ``num_worst_tokens`` are
padding: zero, indices -1, probs 0). The handle's state is ``(src_token,)``, int64 ``[R]``.
Combine sums the received rows of each token (at most one here) in fp32 or wider. A group of world
size > 1 is declined: multi-rank dispatch belongs to the turbo-deepep backend.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs, MoeDispatchHandle, group_size
from turbo_core.reference.moe_permute import _gather_rows
from turbo_core.reference.moe_routing import compute_dtype, first_slots

__all__ = ["check_dispatch_combine", "moe_combine", "moe_dispatch"]


def check_dispatch_combine(args: MoeDispatchArgs | MoeCombineArgs) -> str | None:
    world = group_size(args.group)
    if world > 1:
        return (f"TORCH runs moe_dispatch/moe_combine in a single process only (group=None or world size 1),"
                f" this group has {world} ranks: multi-rank dispatch needs the turbo-deepep backend"
                f" (pip install turbo-deepep)")
    handle = args.handle
    if handle is not None and handle.backend not in (BackendType.TORCH, ""):  # "": compiled, reference layout
        return f"the handle was made by backend {handle.backend}, not TORCH"
    return None


def moe_dispatch(args: MoeDispatchArgs):
    x, scales = args.x, args.x_scales
    if args.handle is not None:
        (src,) = args.handle.state
        recv_scales = None if scales is None else _gather_rows(scales, src)
        return _gather_rows(x, src), recv_scales, None, None, None, args.handle
    t = x.shape[0]
    r = max(t, args.num_worst_tokens)
    e = args.num_experts
    dev = x.device
    src = torch.full((r,), -1, dtype=torch.int64, device=dev)
    src[:t] = torch.arange(t, dtype=torch.int64, device=dev)
    idx = args.token_indices
    valid = (idx >= 0) & (idx < e)
    pad_rows = r - t
    recv_idx = torch.cat([torch.where(valid, idx, torch.full_like(idx, -1)),
                          torch.full((pad_rows, idx.shape[1]), -1, dtype=idx.dtype, device=dev)])
    probs = args.token_probs
    recv_probs = torch.cat([torch.where(valid, probs, torch.zeros_like(probs)),
                            torch.zeros((pad_rows, probs.shape[1]), dtype=probs.dtype, device=dev)])
    cols = first_slots(idx, e)
    pairs = torch.zeros((t, e + 1), dtype=torch.bool, device=dev).scatter_(1, cols, True)[:, :e]
    tokens_per_expert = pairs.sum(dim=0, dtype=torch.int64)
    handle = MoeDispatchHandle(BackendType.TORCH, args.group, t, r, e, (src,))
    recv_scales = None if scales is None else _gather_rows(scales, src)
    return (_gather_rows(x, src), recv_scales, recv_idx.contiguous(), recv_probs.contiguous(),
            tokens_per_expert, handle)


def _sum_back(x: torch.Tensor, src: torch.Tensor, num_tokens: int, out_dtype: torch.dtype) -> torch.Tensor:
    ct = compute_dtype(x)
    acc = torch.zeros((num_tokens + 1, *x.shape[1:]), dtype=ct, device=x.device)
    acc.index_add_(0, torch.where(src >= 0, src, num_tokens), x.to(ct))
    return acc[:num_tokens].to(out_dtype).contiguous()


def moe_combine(args: MoeCombineArgs):
    (src,) = args.handle.state
    t = args.handle.num_tokens
    combined = _sum_back(args.x, src, t, args.x.dtype)
    probs = None if args.probs is None else _sum_back(args.probs, src, t, torch.float32)
    return combined, probs
