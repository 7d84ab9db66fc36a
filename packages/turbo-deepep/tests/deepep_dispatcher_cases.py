"""turbo_core's DeepEPTokenDispatcher over a gloo group (run by test_deep_ep_buffer_distributed's
workers): token_dispatch -> experts -> token_combine equals one float64 MoE holding every expert,
outputs and gradients (input, probs, expert weights), within fp32 tolerance (GEMMs).

Expert ``e`` is ``y = (x A_e^T) B_e^T`` (``A_e [F, H]``, ``B_e [H, F]``); with tensor parallelism
each TP rank holds the shard ``A_e[rows i]``, ``B_e[:, cols i]`` of its EP rank's experts and the
combine sums the partial outputs. The MoE output of a token is ``sum over its experts of
p[t, e] * y_e(x[t])``, the experts being the top-k of ``probs``, the given ``indices`` (-1 = none)
or the ``routing_map``'s, minus zero-prob slots under a capacity factor.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

F64 = torch.float64


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    want = want.detach()
    atol = 1e-4 * max(1.0, want.abs().max().item() if want.numel() else 1.0)
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=1e-4, atol=atol, msg=lambda m: f"{what}: {m}")


def _groups(rank: int, world: int, tp: int, group):
    """``(ep_group, tp_group, tp_ep_group, ep_rank, tp_rank)``: tp_ep rank ``p * tp + i`` is EP
    rank ``p``, TP rank ``i`` (every rank makes every group, in one order)."""
    if tp == 1:
        return group, None, None, rank, 0
    ep = world // tp
    tp_groups = [dist.new_group([p * tp + i for i in range(tp)]) for p in range(ep)]
    ep_groups = [dist.new_group([p * tp + i for p in range(ep)]) for i in range(tp)]
    return ep_groups[rank % tp], tp_groups[rank // tp], group, rank // tp, rank % tp


def _routes(probs: torch.Tensor, mode: str, topk: int, g: torch.Generator):
    """``(kwargs for token_dispatch, selection bool [T, E])`` for one rank's float64 probs."""
    t, e = probs.shape
    if mode == "topk":
        sel = torch.zeros((t, e), dtype=torch.bool).scatter_(1, torch.topk(probs, topk, dim=1).indices, True)
        return {}, sel
    order = torch.stack([torch.randperm(e, generator=g)[:topk] for _ in range(t)]) if t else \
        torch.zeros((0, topk), dtype=torch.int64)
    drop = torch.rand((t, topk), generator=g) < 0.25
    if mode == "indices":
        idx = order.masked_fill(drop, -1)
        sel = torch.zeros((t, e + 1), dtype=torch.bool).scatter_(1, torch.where(drop, e, order), True)[:, :e]
        return {"indices": idx}, sel
    sel = torch.zeros((t, e + 1), dtype=torch.bool).scatter_(1, torch.where(drop, e, order), True)[:, :e]
    return {"routing_map": sel}, sel


def _case(rank, world, group, dev, *, seed, mode, tp=1, pad_multiple=0, cap=False, worst=False, capacity=False):
    from turbo_core.modules import DeepEPTokenDispatcher

    ep_group, tp_group, tp_ep_group, ep_rank, tp_rank = _groups(rank, world, tp, group)
    ep = world // tp
    e_l, topk, h, fs, t = 3, 2, 8, 4, 6
    e, f = e_l * ep, fs * tp
    g = torch.Generator().manual_seed(seed)
    a = torch.rand((e, f, h), generator=g, dtype=F64) - 0.5
    b = torch.rand((e, h, f), generator=g, dtype=F64) - 0.5
    xs = [torch.randn((t, h), generator=g, dtype=F64) for _ in range(world)]
    probs = [torch.softmax(torch.randn((t, e), generator=g, dtype=F64), dim=1) for _ in range(world)]
    grads = [torch.randint(-4, 5, (t, h), generator=g).to(F64) / 4 for _ in range(world)]
    routes = [_routes(p, mode, topk, g) for p in probs]
    if capacity:  # the routes a capacity step dropped upstream: their probs zeroed
        for s in range(world):
            dropped = routes[s][1] & (torch.rand((t, e), generator=g) < 0.3)
            probs[s] = probs[s].masked_fill(dropped, 0.0)
            routes[s] = (routes[s][0], routes[s][1] & ~dropped)
    # the float64 reference: every rank's tokens through every expert
    ref_a, ref_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref_x = [x.clone().requires_grad_() for x in xs]
    ref_p = [p.clone().requires_grad_() for p in probs]
    outs = []
    for s in range(world):
        y = torch.stack([(ref_x[s] @ ref_a[j].T) @ ref_b[j].T for j in range(e)], dim=1)  # [T, E, H]
        outs.append(((ref_p[s] * routes[s][1])[:, :, None] * y).sum(dim=1))
    sum((o * gr).sum() for o, gr in zip(outs, grads, strict=True)).backward()
    # this rank: its experts' shards, its tokens
    mine = slice(ep_rank * e_l, (ep_rank + 1) * e_l)
    shard = slice(tp_rank * fs, (tp_rank + 1) * fs)
    wa = a[mine, shard].float().to(dev).requires_grad_()
    wb = b[mine, :, shard].float().to(dev).requires_grad_()
    x = xs[rank].float().to(dev).requires_grad_()
    p = probs[rank].float().to(dev).requires_grad_()
    kw = {"pad_multiple": pad_multiple, "deepep_num_worst_tokens": t * world if worst else 0,
          "permute_max_token_num": t * world * min(topk * tp, e_l) + e_l * max(pad_multiple, 1) if cap else -1,
          "deepep_use_cuda_num_tokens_per_expert": worst, "expert_capacity_factor": 1.0 if capacity else None}
    disp = DeepEPTokenDispatcher(e, topk, ep_group, tp_group, tp_ep_group, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, tpe, pp = disp.token_dispatch(x.reshape(2, t // 2, h), p, **{k: v.to(dev) for k, v in routes[rank][0].items()})
    if mode == "routing_map":
        assert any(issubclass(w.category, UserWarning) and "routing_map" in str(w.message) for w in caught), caught
    assert tpe.device.type == (dev.type if worst else "cpu") and tpe.dtype == torch.int64
    if pad_multiple:
        assert all(n % pad_multiple == 0 for n in tpe.tolist()), tpe
    if cap:
        assert rows.shape[0] == kw["permute_max_token_num"], rows.shape
    pieces, start = [], 0
    for j, n in enumerate(tpe.tolist()):
        seg = rows[start:start + n]
        pieces.append(((seg @ wa[j].T) @ wb[j].T) * pp[start:start + n, None])
        start += n
    pieces.append(rows[start:] * 0)
    out = disp.token_combine(torch.cat(pieces))
    assert out.shape == (2, t // 2, h)
    _close(out.reshape(t, h), outs[rank], "dispatcher output")
    (out.reshape(t, h) * grads[rank].float().to(dev)).sum().backward()
    _close(x.grad, ref_x[rank].grad, "grad hidden_states")
    _close(p.grad, ref_p[rank].grad, "grad probs")
    _close(wa.grad, ref_a.grad[mine, shard], "grad A (this rank's shard)")
    _close(wb.grad, ref_b.grad[mine, :, shard], "grad B (this rank's shard)")


def cases(rank: int, world: int, group, dev, *, seed: int):
    return [
        ("dispatcher top-k", lambda: _case(rank, world, group, dev, seed=seed, mode="topk")),
        ("dispatcher indices, pad_multiple, cap", lambda: _case(rank, world, group, dev, seed=seed + 1, mode="indices",
                                                               pad_multiple=4, cap=True)),
        ("dispatcher routing_map, worst tokens, device counts", lambda: _case(rank, world, group, dev, seed=seed + 2,
                                                                             mode="routing_map", worst=True, cap=True)),
        ("dispatcher capacity factor", lambda: _case(rank, world, group, dev, seed=seed + 3, mode="indices", capacity=True)),
        ("dispatcher tensor parallel", lambda: _case(rank, world, group, dev, seed=seed + 4, mode="topk", tp=2)),
    ]
