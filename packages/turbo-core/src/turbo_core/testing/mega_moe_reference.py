"""The plain-PyTorch mixture-of-experts layer that ``turbo_core.ops.fused_mega_moe`` computes: a
loop over the experts, written from the definition. Given float64 tensors it is the float64 oracle
of the tests; given the inputs' own dtype it is the eager loop a user would write (the baseline of
``turbo bench moe``'s fused-layer cases).

``y[t] = sum over slots k with e = topk_idx[t, k] >= 0 of topk_weights[t, k] * ffn_e(x[t])``,
``ffn_e(v) = (silu(v @ w1[e, :I].T) * (v @ w1[e, I:].T)) @ w2[e].T``.

Differentiable in x, topk_weights, w1 and w2 through autograd. It reads which tokens each expert
serves on the host (a ``nonzero`` per expert: host syncs, data-dependent shapes), as eager MoE code
does; it is not the op's sync-free path.
"""

from __future__ import annotations

import torch

__all__ = ["mega_moe_reference", "mega_moe_reference_ep"]


def mega_moe_reference(x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
                       w2: torch.Tensor) -> torch.Tensor:
    """``y [T, H]`` (module docstring) in x's dtype, every op in that dtype.

    ``x [T, H]``, ``topk_idx [T, K]`` (-1 = none; ids past ``E`` ignored), ``topk_weights [T, K]``
    (cast to x's dtype), ``w1 [E, 2I, H]``, ``w2 [E, H, I]``. A repeated id in a row counts once per
    slot, so its weights add up.
    """
    inter = w1.shape[1] // 2
    weights = topk_weights.to(x.dtype)
    y = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        hit = topk_idx == e  # [T, K]
        tokens = hit.any(dim=1).nonzero().squeeze(1)
        if tokens.numel() == 0:
            continue
        v = x.index_select(0, tokens)
        h = v @ w1[e].t()
        out = (torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]) @ w2[e].t()
        gate = (weights * hit).sum(dim=1).index_select(0, tokens)
        y = y.index_add(0, tokens, out * gate.unsqueeze(1))
    return y


def mega_moe_reference_ep(xs: list[torch.Tensor], topk_idx: list[torch.Tensor], topk_weights: list[torch.Tensor],
                          w1s: list[torch.Tensor], w2s: list[torch.Tensor]) -> list[torch.Tensor]:
    """The expert-parallel layer on one process: rank ``r``'s tokens ``xs[r]`` with global expert
    ids, its local experts ``w1s[r] [G, 2I, H]`` / ``w2s[r]`` (rank ``r`` holds experts ``[r G,
    (r + 1) G)``). Returns every rank's ``y``: :func:`mega_moe_reference` of all tokens against
    all experts, split back by rank."""
    y = mega_moe_reference(torch.cat(xs), torch.cat(topk_idx), torch.cat(topk_weights), torch.cat(w1s),
                           torch.cat(w2s))
    return list(y.split([x.shape[0] for x in xs]))
