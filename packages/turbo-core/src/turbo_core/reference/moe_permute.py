"""Reference token permutation: ``moe_permute_preprocess``, ``moe_permute``, ``moe_unpermute``,
``moe_unpermute_bwd`` (the row map is described in ``turbo_core.dispatch.specs.moe``).

Everything is vectorized on the device (no host sync): scatters whose duplicate indices land only
in a discarded dump slot, gathers with clamped indices masked by ``torch.where`` (so a NaN in an
unrelated row never leaks). Unpermute walks the row map's copy columns in order and accumulates in
float64 on the CPU / fp32 on a GPU (deterministic: no atomics), rounding once.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import (
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
)
from turbo_core.reference.moe_routing import compute_dtype, first_slots

__all__ = ["moe_permute", "moe_permute_preprocess", "moe_unpermute", "moe_unpermute_bwd"]


def _routing(args: MoePermutePreprocessArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask bool [T, E], column int64 [T, E])``: which experts each token goes to, and the probs
    column each copy reads (expert id, or top-k slot for the ``topk`` layout)."""
    emap, e = args.expert_map, args.num_local_experts
    t, dev = emap.shape[0], emap.device
    expert_ids = torch.arange(e, dtype=torch.int64, device=dev).expand(t, e)
    if emap.dtype == torch.bool:
        return emap, expert_ids
    cols = first_slots(emap, e)
    mask = torch.zeros((t, e + 1), dtype=torch.bool, device=dev).scatter_(1, cols, True)[:, :e]
    if args.probs_layout != "topk":
        return mask, expert_ids
    k = emap.shape[1]
    slots = torch.arange(k, dtype=torch.int64, device=dev).expand(t, k)
    slot_of = torch.full((t, e + 1), -1, dtype=torch.int64, device=dev).scatter_(1, cols, slots)[:, :e]
    return mask, slot_of


def moe_permute_preprocess(args: MoePermutePreprocessArgs):
    mask, column = _routing(args)
    t, e = mask.shape
    dev = mask.device
    counts = mask.sum(dim=0, dtype=torch.int64)
    rank = torch.cumsum(mask.to(torch.int64), dim=0) - 1  # position of the token inside its expert
    keep = mask
    if args.expert_capacity >= 0:
        keep = mask & (rank < args.expert_capacity)
        rows = torch.full((e,), args.expert_capacity, dtype=torch.int64, device=dev)
    elif args.pad_multiple > 0:
        pm = args.pad_multiple
        rows = (counts + pm - 1) // pm * pm
    else:
        rows = counts
    offsets = torch.cumsum(rows, dim=0) - rows
    dest = offsets + rank
    cap = args.num_permuted_tokens
    if cap >= 0:
        keep = keep & (dest < cap)
        overflow = (rows.sum() > cap).to(torch.int32).reshape(1)
        tokens_per_expert = torch.minimum(rows, (cap - offsets).clamp(min=0))
    else:
        overflow = torch.zeros((1,), dtype=torch.int32, device=dev)
        tokens_per_expert = rows
    # Compact each token's kept copies to the front of its row, in expert order.
    slot = torch.where(keep, torch.cumsum(keep.to(torch.int64), dim=1) - 1, torch.full_like(dest, e))
    minus = torch.full((t, e + 1), -1, dtype=torch.int64, device=dev)
    dest_cols = minus.clone().scatter_(1, slot, torch.where(keep, dest, -1))[:, :e]
    prob_cols = minus.scatter_(1, slot, torch.where(keep, column, -1))[:, :e]
    row_id_map = torch.cat([dest_cols, prob_cols, keep.sum(dim=1, keepdim=True)], dim=1).to(torch.int32)
    dispatched = mask.any(dim=1).sum().to(torch.int32).reshape(1)
    return row_id_map.contiguous(), tokens_per_expert.contiguous(), overflow, dispatched


def _sources(row_id_map: torch.Tensor, num_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src_token int64 [num_out], src_col int64 [num_out])`` of every permuted row (-1: none)."""
    t, e = row_id_map.shape[0], (row_id_map.shape[1] - 1) // 2
    dev = row_id_map.device
    dest = row_id_map[:, :e].long()
    cols = row_id_map[:, e:2 * e].long()
    valid = (dest >= 0) & (dest < num_out)
    where = torch.where(valid, dest, num_out).reshape(-1)
    tok = torch.arange(t, dtype=torch.int64, device=dev).unsqueeze(1).expand(t, e).reshape(-1)
    src = torch.full((num_out + 1,), -1, dtype=torch.int64, device=dev).scatter_(0, where, tok)[:num_out]
    col = torch.full((num_out + 1,), -1, dtype=torch.int64, device=dev).scatter_(0, where, cols.reshape(-1))[:num_out]
    return src, col


def _gather_rows(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``out[i] = x[src[i]]``, zero where ``src[i] < 0`` (bit-exact for any dtype)."""
    n = src.shape[0]
    if x.shape[0] == 0 or n == 0:
        return torch.zeros((n, *x.shape[1:]), dtype=x.dtype, device=x.device)
    bits = x.view(torch.uint8) if x.element_size() == 1 else x
    picked = bits[src.clamp(min=0)]
    out = torch.where((src >= 0).reshape(n, *([1] * (x.dim() - 1))), picked, torch.zeros_like(picked))
    return out.view(x.dtype) if bits is not x else out


def moe_permute(args: MoePermuteArgs):
    src, col = _sources(args.row_id_map, args.num_out)
    permuted = _gather_rows(args.tokens, src).contiguous()
    scales = None if args.scaling_factor is None else _gather_rows(args.scaling_factor, src).contiguous()
    probs = None
    if args.probs is not None:
        p = args.probs
        n = args.num_out
        if p.shape[0] == 0 or p.shape[1] == 0 or n == 0:
            probs = torch.zeros((n,), dtype=p.dtype, device=p.device)
        else:
            ok = (src >= 0) & (col >= 0) & (col < p.shape[1])
            picked = p[src.clamp(min=0), col.clamp(min=0, max=p.shape[1] - 1)]
            probs = torch.where(ok, picked, torch.zeros_like(picked)).contiguous()
    return permuted, scales, probs


def _copies(row_id_map: torch.Tensor, num_rows: int):
    """Per copy column ``j``: ``(rows int64 [T], cols int64 [T], valid bool [T])``."""
    e = (row_id_map.shape[1] - 1) // 2
    for j in range(e):
        rows = row_id_map[:, j].long()
        cols = row_id_map[:, e + j].long()
        yield rows, cols, (rows >= 0) & (rows < num_rows)


def _weights(merging: torch.Tensor, cols: torch.Tensor, valid: torch.Tensor, ct: torch.dtype) -> torch.Tensor:
    w_cols = merging.shape[1]
    ok = valid & (cols >= 0) & (cols < w_cols)
    if w_cols == 0:
        return torch.zeros(cols.shape, dtype=ct, device=cols.device)
    w = merging.gather(1, cols.clamp(min=0, max=w_cols - 1).unsqueeze(1)).squeeze(1).to(ct)
    return torch.where(ok, w, torch.zeros_like(w))


def moe_unpermute(args: MoeUnpermuteArgs):
    x, rmap = args.permuted_tokens, args.row_id_map
    n, h = x.shape
    t = rmap.shape[0]
    ct = compute_dtype(x)
    acc = torch.zeros((t, h), dtype=ct, device=x.device)
    if n > 0:
        for rows, cols, valid in _copies(rmap, n):
            picked = x[rows.clamp(0, n - 1)].to(ct)
            if args.merging_probs is not None:
                picked = picked * _weights(args.merging_probs, cols, valid, ct).unsqueeze(1)
            acc = acc + torch.where(valid.unsqueeze(1), picked, torch.zeros_like(picked))
    out = acc.to(x.dtype)
    probs = None
    if args.permuted_probs is not None:
        pp, width = args.permuted_probs, args.probs_width
        probs = torch.zeros((t, width + 1), dtype=pp.dtype, device=pp.device)
        if n > 0:
            for rows, cols, valid in _copies(rmap, n):
                ok = valid & (cols >= 0) & (cols < width)
                vals = torch.where(ok, pp[rows.clamp(0, n - 1)], torch.zeros((), dtype=pp.dtype, device=pp.device))
                probs.scatter_(1, torch.where(ok, cols, width).unsqueeze(1), vals.unsqueeze(1))
        probs = probs[:, :width].contiguous()
    return out, probs


def moe_unpermute_bwd(args: MoeUnpermuteBwdArgs):
    g, x, rmap, merging = args.grad_tokens, args.permuted_tokens, args.row_id_map, args.merging_probs
    n, h = x.shape
    t, width = rmap.shape[0], merging.shape[1]
    ct = compute_dtype(g)
    grad_x = torch.zeros((n + 1, h), dtype=ct, device=g.device)
    grad_m = torch.zeros((t, width + 1), dtype=ct, device=g.device)
    if n > 0:
        g_ct = g.to(ct)
        for rows, cols, valid in _copies(rmap, n):
            w = _weights(merging, cols, valid, ct)
            ok = valid & (cols >= 0) & (cols < width)
            grad_x[torch.where(valid, rows, n)] = g_ct * w.unsqueeze(1)
            dots = (g_ct * x[rows.clamp(0, n - 1)].to(ct)).sum(dim=1)
            grad_m.scatter_(1, torch.where(ok, cols, width).unsqueeze(1), torch.where(ok, dots, 0).unsqueeze(1))
    return grad_x[:n].to(g.dtype).contiguous(), grad_m[:, :width].to(merging.dtype).contiguous()
