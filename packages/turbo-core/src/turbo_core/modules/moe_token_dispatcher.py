"""Megatron-style MoE token dispatching and an MoE layer built on it, from turbo ops only.

``MoETokenDispatcher`` (Megatron's ``token_permutation`` / ``token_unpermutation`` interface, the
DeepEP "flex" order): for each token's routed experts,

1. capacity (optional): each expert keeps at most ``capacity`` of this rank's tokens
   (``drop_policy="probs"``: the highest probabilities; ``"position"``: the first tokens);
2. dispatch: ``moe_dispatch`` sends each token once to every rank holding one of its kept experts
   (a no-op layout in one process);
3. permute: the received tokens are grouped by local expert (``token_permute``), optionally padded
   to a fixed ``capacity * W`` rows per expert (``pad_to_capacity``: static shapes);
4. (the experts run on ``[N, H]`` rows, ``tokens_per_expert`` rows each);
5. unpermute: each received token's expert rows are summed (``token_unpermute``);
6. combine: ``moe_combine`` returns them to their token's rank and sums them there.

``MoELayer``: router (a bias-free linear to ``E`` logits in fp32, then
``fused_group_topk_routing_with_aux_score``) -> dispatcher -> SwiGLU experts (``GroupedLinear``
fc1 ``[E_l, 2F, H]``, ``swiglu_with_probs`` weighting each row by its routing probability, fc2
``[E_l, H, F]``) -> output ``[..., H]``:
``out[t] = sum over kept experts e of p[t, e] * fc2_e(silu(g_e) * u_e)``, ``(g_e, u_e) = fc1_e(x[t])``.

Expert ``e`` lives on rank ``e // E_l`` of the expert-parallel ``group`` (``E_l = E / W``); each rank
holds its ``E_l`` experts' weights. Gradients flow to the input, the router and the experts.
"""

from __future__ import annotations

import math

import torch

from turbo_core.modules.grouped_linear import GroupedLinear
from turbo_core.ops.activation import swiglu_with_probs
from turbo_core.ops.moe_dispatch import moe_combine, moe_dispatch
from turbo_core.ops.moe_routing import fused_group_topk_routing_with_aux_score, indices_to_multihot
from turbo_core.ops.moe_token_permute import token_permute, token_unpermute

__all__ = ["DROP_POLICIES", "MoELayer", "MoETokenDispatcher", "drop_tokens", "expert_capacity"]

DROP_POLICIES = ("probs", "position")


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def expert_capacity(num_tokens: int, topk: int, num_experts: int, capacity_factor: float) -> int:
    """Megatron's per-expert capacity: ``ceil(num_tokens * topk / num_experts * capacity_factor)``."""
    return math.ceil(num_tokens * topk / num_experts * capacity_factor)


def drop_tokens(probs: torch.Tensor, routing_map: torch.Tensor, capacity: int,
                policy: str = "probs") -> tuple[torch.Tensor, torch.Tensor]:
    """Keep at most ``capacity`` tokens per expert (a column of ``routing_map``).

    Args:
        probs: ``[T, E]`` float, the routing probabilities (0 where not routed).
        routing_map: bool ``[T, E]``.
        capacity: ``>= 0``.
        policy: ``"probs"`` keeps each expert's tokens with the largest probs (ties: lower token
            index), ``"position"`` its first tokens.

    Returns:
        ``(probs * kept, kept)``: ``[T, E]`` in probs' dtype (gradients flow to the kept entries)
        and bool. Computed on the device (a stable sort per expert), no host sync.
    """
    if policy not in DROP_POLICIES:
        raise ValueError(f"policy: expected 'probs' or 'position', got {policy!r}")
    t = routing_map.shape[0]
    if capacity >= t:
        return probs, routing_map
    if policy == "probs":
        key = probs.detach().float()
    else:
        key = -torch.arange(t, dtype=torch.float32, device=probs.device)[:, None].expand_as(probs)
    key = torch.where(routing_map, key, torch.full_like(key, -math.inf))
    order = torch.sort(key, dim=0, descending=True, stable=True).indices[:capacity]
    kept = torch.zeros_like(routing_map).scatter_(0, order, True) & routing_map
    return probs * kept, kept


def topk_from_map(probs: torch.Tensor, routing_map: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices int64 [T, topk], probs fp32 [T, topk])``: each row's routed experts in increasing
    id (``-1`` / 0 past the routed ones, e.g. after drops). No host sync."""
    order = torch.argsort(routing_map.to(torch.int8), dim=1, descending=True, stable=True)[:, :topk]
    has = routing_map.gather(1, order)
    idx = torch.where(has, order, torch.full_like(order, -1))
    return idx, probs.gather(1, order).float() * has


class MoETokenDispatcher:
    """Dispatch tokens to their experts across an expert-parallel group and bring the results back.

    Args:
        num_experts: ``E``, all experts; a multiple of the group's size ``W``.
        topk: experts per token (the width of the top-k layout sent through ``moe_dispatch``).
        group: a ``torch.distributed.ProcessGroup`` or ``None`` (one process).
        capacity_factor: ``None`` (dropless) or ``> 0``: each expert keeps at most
            :func:`expert_capacity` ``(T, topk, E, capacity_factor)`` of each rank's ``T`` tokens.
        drop_policy: ``"probs"`` or ``"position"`` (see :func:`drop_tokens`).
        pad_to_capacity: every local expert gets exactly ``capacity * W`` rows (zero padding rows
            with probability 0): static shapes, no host sync in the permute (needs
            ``capacity_factor``).
        num_worst_tokens: ``> 0``: the dispatch receives a fixed number of rows (no host sync; see
            ``moe_dispatch``), and the permute is capped at ``num_worst_tokens * min(topk, E_l)`` rows.

    ``token_permutation(hidden [T, H], probs [T, E], routing_map bool [T, E])`` returns
    ``(expert_input [N, H], tokens_per_expert int64 [E_l], permuted_probs fp32 [N])``: rows grouped
    by local expert (expert order; padding rows zero with prob 0); ``tokens_per_expert`` are the
    grouped-GEMM group lengths. ``token_unpermutation(expert_output [N, H])`` returns ``[T, H]``: the
    sum over each token's kept experts of their output rows (fp32 sums, rounded once per step).
    The state of one permutation is kept until its unpermutation (one micro-batch at a time).
    """

    def __init__(self, num_experts: int, topk: int, group=None, *, capacity_factor: float | None = None,
                 drop_policy: str = "probs", pad_to_capacity: bool = False, num_worst_tokens: int = 0) -> None:
        self.num_experts = _int("num_experts", num_experts, 1)
        self.topk = _int("topk", topk, 1)
        if topk > num_experts:
            raise ValueError(f"topk: expected at most num_experts ({num_experts}), got {topk}")
        self.group = group
        self.world = 1 if group is None else int(group.size())
        if num_experts % self.world:
            raise ValueError(f"num_experts: expected a multiple of the group's size {self.world}, got {num_experts}")
        self.num_local_experts = num_experts // self.world
        if capacity_factor is not None and (isinstance(capacity_factor, bool) or not capacity_factor > 0):
            raise ValueError(f"capacity_factor: expected None or a number > 0, got {capacity_factor!r}")
        self.capacity_factor = capacity_factor
        if drop_policy not in DROP_POLICIES:
            raise ValueError(f"drop_policy: expected 'probs' or 'position', got {drop_policy!r}")
        self.drop_policy = drop_policy
        if not isinstance(pad_to_capacity, bool):
            raise TypeError(f"pad_to_capacity: expected a bool, got {pad_to_capacity!r}")
        if pad_to_capacity and capacity_factor is None:
            raise ValueError("pad_to_capacity: needs a capacity_factor (the capacity to pad to)")
        self.pad_to_capacity = pad_to_capacity
        self.num_worst_tokens = _int("num_worst_tokens", num_worst_tokens, 0)
        self._state = None

    def capacity(self, num_tokens: int) -> int | None:
        if self.capacity_factor is None:
            return None
        return expert_capacity(num_tokens, self.topk, self.num_experts, self.capacity_factor)

    def token_permutation(self, hidden: torch.Tensor, probs: torch.Tensor,
                          routing_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if hidden.dim() != 2:
            raise ValueError(f"hidden: expected [T, H], got shape {tuple(hidden.shape)}")
        t, e = hidden.shape[0], self.num_experts
        for name, v in (("probs", probs), ("routing_map", routing_map)):
            if not isinstance(v, torch.Tensor) or tuple(v.shape) != (t, e):
                raise ValueError(f"{name}: expected shape {(t, e)}, got {getattr(v, 'shape', v)!r}")
        if routing_map.dtype != torch.bool:
            raise TypeError(f"routing_map: expected bool, got {routing_map.dtype}")
        cap = self.capacity(t)
        if cap is not None:
            probs, routing_map = drop_tokens(probs, routing_map, cap, self.drop_policy)
        idx, probs_k = topk_from_map(probs, routing_map, self.topk)
        recv_x, recv_idx, recv_probs, _, handle = moe_dispatch(hidden, idx, probs_k, e, self.group,
                                                               num_worst_tokens=self.num_worst_tokens)
        e_l = self.num_local_experts
        local_map, local_probs = indices_to_multihot(recv_idx, recv_probs, e_l)
        if self.pad_to_capacity:
            num_out = cap * self.world * e_l
        elif self.num_worst_tokens:
            num_out = recv_x.shape[0] * min(self.topk, e_l)
        else:
            num_out = -1
        permuted, permuted_probs, row_map, tokens_per_expert = token_permute(
            recv_x, num_out, probs=local_probs, routing_map=local_map, drop_and_pad=self.pad_to_capacity)
        self._state = (row_map, handle, recv_x.shape)
        return permuted, tokens_per_expert, permuted_probs.float()

    def token_unpermutation(self, expert_output: torch.Tensor) -> torch.Tensor:
        if self._state is None:
            raise RuntimeError("token_unpermutation: call token_permutation first")
        row_map, handle, recv_shape = self._state
        self._state = None
        rows = token_unpermute(expert_output, row_map, restore_shape=(recv_shape[0], expert_output.shape[1]))
        return moe_combine(rows, self.group, handle)


class MoELayer(torch.nn.Module):
    """Router -> :class:`MoETokenDispatcher` -> SwiGLU experts -> output (see the module docstring).

    Args:
        hidden_size: ``H``; ffn_hidden_size: ``F`` (each expert's inner size).
        num_experts, topk, group, capacity_factor, drop_policy, pad_to_capacity, num_worst_tokens:
            as :class:`MoETokenDispatcher`.
        groups, selected_groups, score_function, scaling_factor: the router's (see
            ``fused_group_topk_routing_with_aux_score``).
        aux_loss_coeff: ``>= 0``: the switch load-balancing loss, ``coeff * E / (topk * T^2) *
            sum_e(sum_t scores[t, e] * routed_e)``, with ``routed_e`` this rank's (token, expert) pairs
            before drops, is left in ``self.aux_loss`` (None when 0); add it to the training loss.
        device, dtype: of the parameters (the router weight is fp32, the experts ``dtype``).

    ``forward(x [..., H])`` returns ``[..., H]`` in x's dtype.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_experts: int, topk: int, group=None, *,
                 capacity_factor: float | None = None, drop_policy: str = "probs", pad_to_capacity: bool = False,
                 num_worst_tokens: int = 0, groups: int = 1, selected_groups: int = 1, score_function: str = "softmax",
                 scaling_factor: float = 1.0, aux_loss_coeff: float = 0.0, device=None, dtype=None) -> None:
        super().__init__()
        self.hidden_size = _int("hidden_size", hidden_size, 1)
        self.ffn_hidden_size = _int("ffn_hidden_size", ffn_hidden_size, 1)
        self.dispatcher = MoETokenDispatcher(num_experts, topk, group, capacity_factor=capacity_factor,
                                             drop_policy=drop_policy, pad_to_capacity=pad_to_capacity,
                                             num_worst_tokens=num_worst_tokens)
        self.router_kwargs = {"groups": groups, "selected_groups": selected_groups, "score_function": score_function,
                              "scaling_factor": scaling_factor}
        if isinstance(aux_loss_coeff, bool) or not isinstance(aux_loss_coeff, (int, float)) or aux_loss_coeff < 0:
            raise ValueError(f"aux_loss_coeff: expected a number >= 0, got {aux_loss_coeff!r}")
        self.aux_loss_coeff = float(aux_loss_coeff)
        self.aux_loss: torch.Tensor | None = None
        e_l = self.dispatcher.num_local_experts
        self.router_weight = torch.nn.Parameter(torch.empty((num_experts, hidden_size), device=device,
                                                            dtype=torch.float32))
        torch.nn.init.kaiming_uniform_(self.router_weight, a=math.sqrt(5))
        self.fc1 = GroupedLinear(e_l, hidden_size, 2 * ffn_hidden_size, device=device, dtype=dtype)
        self.fc2 = GroupedLinear(e_l, ffn_hidden_size, hidden_size, device=device, dtype=dtype)

    def route(self, x2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(scores, probs, routing_map)`` ``[T, E]`` of the fp32 router."""
        logits = torch.nn.functional.linear(x2d.float(), self.router_weight)
        return fused_group_topk_routing_with_aux_score(logits, self.dispatcher.topk, **self.router_kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"x: expected [..., {self.hidden_size}], got shape {tuple(x.shape)}")
        x2d = x.reshape(-1, self.hidden_size)
        scores, probs, routing_map = self.route(x2d)
        self.aux_loss = None
        if self.aux_loss_coeff:
            t, e, k = x2d.shape[0], self.dispatcher.num_experts, self.dispatcher.topk
            routed = routing_map.sum(dim=0, dtype=torch.float32)
            self.aux_loss = self.aux_loss_coeff * e / (k * max(t, 1) ** 2) * (scores.float().sum(dim=0) * routed).sum()
        rows, tokens_per_expert, row_probs = self.dispatcher.token_permutation(x2d, probs, routing_map)
        h = self.fc1(rows, tokens_per_expert)
        act = swiglu_with_probs(h, row_probs)
        out = self.fc2(act, tokens_per_expert)
        return self.dispatcher.token_unpermutation(out).reshape(x.shape)
