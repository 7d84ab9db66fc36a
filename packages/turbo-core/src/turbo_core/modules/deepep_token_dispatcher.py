"""``DeepEPTokenDispatcher``: Primus-Turbo's DeepEP token dispatcher (constructor, methods and
attributes under its names), built from turbo ops.

``token_dispatch(hidden_states [..., H], probs [T, E], routing_map=None, indices=None)``:

1. top-k: the token's experts come from ``indices`` (int ``[T, k]`` expert ids, -1 = none), else
   from the bool ``routing_map [T, E]`` (each row's routed experts in increasing id, at most
   ``router_topk``, -1 past them; with a ``UserWarning``: the conversion costs a sort), else from
   ``torch.topk(probs, router_topk)``; each slot's prob is gathered from ``probs`` (0 at -1 slots).
   With ``expert_capacity_factor`` set, slots whose prob is 0 (dropped upstream) become -1.
2. dispatch: ``moe_dispatch`` (probs in fp32) sends each token once to every rank of
   ``tp_ep_group`` holding one of its experts;
3. permute: ``moe_permute`` groups the received rows by local expert (``pad_multiple`` padding,
   ``permute_max_token_num`` cap), each row carrying its token's prob for that expert.

It returns ``(dispatched_input [N, H], tokens_per_expert int64 [E_l] (on the CPU unless
deepep_use_cuda_num_tokens_per_expert), permuted_probs fp32 [N])``. The experts run on those rows;
``token_combine(expert_output [N, H])`` undoes the permute (``moe_unpermute``: the sum of each
received token's expert rows) and the dispatch (``moe_combine``: the sum over the ranks the token
went to), and returns ``[..., H]`` in the input's shape. Gradients flow to ``hidden_states``,
``probs`` and the expert outputs. One dispatch's state is kept until its combine.

Tensor parallelism (``tp_group`` and ``tp_ep_group`` given): every expert is held by the ``tp``
ranks of a TP group, each with a shard; the expert space is expanded to ``E * tp`` experts and
``router_topk * tp`` slots (expert ``e`` of EP rank ``p`` becomes experts ``(p * tp + i) * E_l +
e % E_l``, ``i < tp``), so a token goes to every TP shard of its experts and the combine sums their
partial outputs. ``tp_ep_group``'s rank ``p * tp + i`` must be EP rank ``p``, TP rank ``i``.

Differences from Primus-Turbo: ``ep_group=None`` is one process; ``indices`` may hold -1;
``deepep_use_comm_stream``, ``deepep_num_use_cu`` and ``deepep_autotune_config`` are checked and
kept but change nothing (turbo's exchanges run on the current stream and take no CU budget; no
environment variable is set); the backend is the one turbo selects for ``moe_dispatch``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from turbo_core.ops.moe_dispatch import moe_combine, moe_dispatch
from turbo_core.ops.moe_permute import moe_permute, moe_unpermute

__all__ = ["DeepEPTokenDispatcher"]


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")
    return value


def _size(group: Any) -> int:
    return 1 if group is None else int(group.size())


class DeepEPTokenDispatcher:
    """Dispatch tokens to their experts over an expert-parallel group and combine the results
    (see the module docstring).

    Args:
        num_experts: ``E``, the experts of the router (before any TP expansion); a multiple of
            ``ep_group``'s size.
        router_topk: experts per token.
        ep_group: the expert-parallel ``ProcessGroup`` (``None``: one process).
        tp_group, tp_ep_group: both ``None`` (no TP: the dispatch runs on ``ep_group``) or both
            given (the dispatch runs on ``tp_ep_group``, of size ``ep * tp``).
        expert_capacity_factor: ``None`` or a number: zero-prob slots become -1 (the capacity itself
            is applied upstream, by zeroing the probs of dropped routes).
        permute_fusion: deprecated, ignored (a ``DeprecationWarning`` when given).
        pad_multiple: ``>= 0``, each expert's row count padded to a multiple (grouped-GEMM BLOCK_M).
        permute_max_token_num: ``-1`` (sized from the data: a host sync) or ``>= 0``, a static cap
            on the permuted rows.
        deepep_async_finish, deepep_allocate_on_comm_stream: passed to ``moe_dispatch`` /
            ``moe_combine`` as their stream hints.
        deepep_use_comm_stream, deepep_num_use_cu, deepep_autotune_config: accepted, no effect.
        deepep_num_worst_tokens: ``> 0``: the dispatch receives exactly this many rows (no host
            sync; every rank must pass the same number of tokens).
        deepep_use_cuda_num_tokens_per_expert: keep ``tokens_per_expert`` on the device (else it
            is copied to the CPU: a host sync).

    With ``deepep_num_worst_tokens > 0``, ``permute_max_token_num >= 0`` and
    ``deepep_use_cuda_num_tokens_per_expert=True`` nothing is read on the host.
    """

    def __init__(self, num_experts: int, router_topk: int, ep_group: Any, tp_group: Any = None,
                 tp_ep_group: Any = None, expert_capacity_factor: float | None = None,
                 permute_fusion: bool | None = None, pad_multiple: int = 0, permute_max_token_num: int = -1,
                 deepep_async_finish: bool = True, deepep_allocate_on_comm_stream: bool = True,
                 deepep_use_comm_stream: bool = False, deepep_num_use_cu: int = 32, deepep_num_worst_tokens: int = 0,
                 deepep_use_cuda_num_tokens_per_expert: bool = False, deepep_autotune_config: Any = None) -> None:
        num_experts = _int("num_experts", num_experts, 1)
        router_topk = _int("router_topk", router_topk, 1)
        if router_topk > num_experts:
            raise ValueError(f"router_topk: expected at most num_experts ({num_experts}), got {router_topk}")
        if (tp_group is None) != (tp_ep_group is None):
            raise ValueError("tp_group: pass tp_group and tp_ep_group together, or neither")
        self.ep_group = ep_group
        self.ep_size = _size(ep_group)
        if tp_group is None:
            self.tp_group, self.tp_ep_group, self.tp_size = None, ep_group, 1
        else:
            self.tp_group, self.tp_ep_group, self.tp_size = tp_group, tp_ep_group, _size(tp_group)
        self.tp_ep_size = self.ep_size * self.tp_size
        if _size(self.tp_ep_group) != self.tp_ep_size:
            raise ValueError(f"tp_ep_group: expected ep_group's size x tp_group's size ({self.tp_ep_size} ranks),"
                             f" got {_size(self.tp_ep_group)}")
        if num_experts % self.ep_size:
            raise ValueError(f"num_experts: expected a multiple of ep_group's size {self.ep_size}, got {num_experts}")
        self.num_local_experts = num_experts // self.ep_size
        self.tp_expanded_num_experts = num_experts * self.tp_size
        self.router_topk = router_topk * self.tp_size
        if expert_capacity_factor is not None and (isinstance(expert_capacity_factor, bool)
                                                   or not isinstance(expert_capacity_factor, (int, float))):
            raise TypeError(f"expert_capacity_factor: expected None or a number, got {expert_capacity_factor!r}")
        self.capacity_factor = expert_capacity_factor
        if permute_fusion is not None:
            warnings.warn("permute_fusion is deprecated and ignored: moe_permute is always used",
                          DeprecationWarning, stacklevel=2)
        self.pad_multiple = _int("pad_multiple", pad_multiple, 0)
        self.permute_max_token_num = _int("permute_max_token_num", permute_max_token_num, -1)
        self.deepep_async_finish = _bool("deepep_async_finish", deepep_async_finish)
        self.deepep_allocate_on_comm_stream = _bool("deepep_allocate_on_comm_stream", deepep_allocate_on_comm_stream)
        self.deepep_use_comm_stream = _bool("deepep_use_comm_stream", deepep_use_comm_stream)
        self.deepep_num_use_cu = _int("deepep_num_use_cu", deepep_num_use_cu, 1)
        self.deepep_num_worst_tokens = _int("deepep_num_worst_tokens", deepep_num_worst_tokens, 0)
        self.deepep_use_cuda_num_tokens_per_expert = _bool("deepep_use_cuda_num_tokens_per_expert",
                                                           deepep_use_cuda_num_tokens_per_expert)
        self.deepep_autotune_config = deepep_autotune_config
        self.handle = None
        self.row_id_map = None

    # -- the two calls -----------------------------------------------------------------------------

    def token_dispatch(self, hidden_states: torch.Tensor, probs: torch.Tensor, routing_map: torch.Tensor | None = None,
                       indices: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(dispatched_input [N, H], tokens_per_expert int64 [E_l], permuted_probs fp32 [N])``."""
        hidden_states, token_probs = self._pre_dispatch(hidden_states, probs, routing_map, indices)
        dispatched, dispatched_probs = self._exec_dispatch(hidden_states, token_probs)
        return self._post_dispatch(dispatched, dispatched_probs)

    def token_combine(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``[..., H]`` (the shape given to :meth:`token_dispatch`) from the expert outputs ``[N, H]``."""
        if self.handle is None:
            raise RuntimeError("token_combine: call token_dispatch first (each dispatch is combined once)")
        return self._post_combine(self._exec_combine(self._pre_combine(hidden_states)))

    # -- steps (Primus-Turbo's hooks) --------------------------------------------------------------

    def _expand(self, t: torch.Tensor) -> torch.Tensor:
        """``[T, E]`` to the TP-expanded ``[T, E * tp]`` (each EP rank's block repeated ``tp`` times)."""
        if self.tp_size == 1:
            return t
        n = t.shape[0]
        return (t.reshape(n, self.ep_size, 1, self.num_local_experts)
                .expand(-1, -1, self.tp_size, -1).reshape(n, self.tp_expanded_num_experts))

    def _pre_dispatch(self, hidden_states, probs, routing_map=None, indices=None):
        if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() < 1:
            raise TypeError("hidden_states: expected a tensor [..., H]")
        self.hidden_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, self.hidden_shape[-1])
        n = hidden_states.shape[0]
        e = self.ep_size * self.num_local_experts
        if not isinstance(probs, torch.Tensor) or tuple(probs.shape) != (n, e):
            raise ValueError(f"probs: expected shape {(n, e)} ([tokens, num_experts] before any TP expansion),"
                             f" got {getattr(probs, 'shape', probs)!r}")
        expanded = self._expand(probs)
        if indices is not None:
            if not isinstance(indices, torch.Tensor) or indices.dim() != 2 or indices.shape[0] != n \
                    or indices.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"indices: expected int32/int64 [{n}, k], got {getattr(indices, 'shape', indices)!r}")
            idx = indices.long()
            none = idx < 0
            if self.tp_size > 1:
                e_l = self.num_local_experts
                base = (idx // e_l) * (self.tp_size * e_l) + idx % e_l
                shift = torch.arange(self.tp_size, device=idx.device, dtype=idx.dtype) * e_l
                idx = (base[:, :, None] + shift).reshape(n, -1)
                none = none[:, :, None].expand(-1, -1, self.tp_size).reshape(n, -1)
            idx = idx.masked_fill(none, -1)
            token_probs = expanded.gather(1, idx.clamp(min=0)).masked_fill(none, 0)
        elif routing_map is not None:
            if not isinstance(routing_map, torch.Tensor) or tuple(routing_map.shape) != (n, e) \
                    or routing_map.dtype != torch.bool:
                raise ValueError(f"routing_map: expected bool of shape {(n, e)}, got {getattr(routing_map, 'shape', routing_map)!r}")
            warnings.warn("DeepEPTokenDispatcher: a routing_map is converted to top-k ids with a sort on every"
                          " dispatch; pass indices to skip it", UserWarning, stacklevel=3)
            rmap = self._expand(routing_map)
            order = torch.sort(rmap.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :self.router_topk]
            has = rmap.gather(1, order)
            idx = order.masked_fill(~has, -1)
            token_probs = expanded.gather(1, order).masked_fill(~has, 0)
        else:
            token_probs, idx = torch.topk(expanded, self.router_topk, dim=-1)
        if self.capacity_factor is not None:
            idx = idx.masked_fill(token_probs == 0, -1)
        self.token_indices = idx
        return hidden_states, token_probs

    def _exec_dispatch(self, hidden_states, token_probs):
        if token_probs.dtype != torch.float32:
            if token_probs.dtype in (torch.bfloat16, torch.float16):
                warnings.warn("DeepEPTokenDispatcher: probs are dispatched in float32", UserWarning, stacklevel=4)
            token_probs = token_probs.float()
        recv_x, recv_idx, recv_probs, _, handle = moe_dispatch(
            hidden_states, self.token_indices, token_probs, self.tp_expanded_num_experts, self.tp_ep_group,
            async_finish=self.deepep_async_finish, allocate_on_comm_stream=self.deepep_allocate_on_comm_stream,
            num_worst_tokens=self.deepep_num_worst_tokens)
        self.handle = handle
        self.dispatched_indices = recv_idx
        return recv_x, recv_probs

    def _post_dispatch(self, hidden_states, dispatched_probs):
        self.hidden_shape_before_permute = hidden_states.shape
        out = moe_permute(hidden_states, self.dispatched_indices, num_local_experts=self.num_local_experts,
                          num_topk=self.router_topk, pad_multiple=self.pad_multiple,
                          num_permuted_tokens=self.permute_max_token_num, probs=dispatched_probs, probs_layout="topk")
        self.row_id_map = out.row_id_map
        self.num_dispatched_token_tensor = out.num_dispatched_tokens
        tokens_per_expert = out.tokens_per_expert
        if not self.deepep_use_cuda_num_tokens_per_expert:
            tokens_per_expert = tokens_per_expert.cpu()
        return out.permuted_tokens, tokens_per_expert, out.permuted_probs

    def _pre_combine(self, hidden_states):
        out, _ = moe_unpermute(hidden_states, self.row_id_map, self.num_dispatched_token_tensor,
                               restore_shape=tuple(self.hidden_shape_before_permute),
                               num_local_experts=self.num_local_experts, pad_multiple=self.pad_multiple)
        return out

    def _exec_combine(self, hidden_states):
        out = moe_combine(hidden_states, self.tp_ep_group, self.handle, async_finish=self.deepep_async_finish,
                          allocate_on_comm_stream=self.deepep_allocate_on_comm_stream)
        self.handle = self.row_id_map = self.dispatched_indices = self.token_indices = None
        self.num_dispatched_token_tensor = None
        return out

    def _post_combine(self, hidden_states):
        return hidden_states.reshape(self.hidden_shape)
