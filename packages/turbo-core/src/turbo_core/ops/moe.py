"""Public MoE ops (Primus-Turbo's names and arguments), one module per group:
``moe_routing`` (router, index conversions), ``moe_permute`` / ``moe_token_permute``
(permutation), ``moe_dispatch`` (expert-parallel dispatch/combine)."""

from turbo_core.ops.moe_dispatch import MoeDispatchHandle, MoeDispatchResult, moe_combine, moe_dispatch
from turbo_core.ops.moe_permute import MoePermuteResult, moe_permute, moe_unpermute
from turbo_core.ops.moe_routing import (
    fused_group_topk_routing_with_aux_score,
    indices_to_multihot,
    tokens_per_expert_to_mask,
)
from turbo_core.ops.moe_token_permute import TokenPermuteResult, token_permute, token_unpermute

__all__ = [
    "MoeDispatchHandle",
    "MoeDispatchResult",
    "MoePermuteResult",
    "TokenPermuteResult",
    "fused_group_topk_routing_with_aux_score",
    "indices_to_multihot",
    "moe_combine",
    "moe_dispatch",
    "moe_permute",
    "moe_unpermute",
    "token_permute",
    "token_unpermute",
    "tokens_per_expert_to_mask",
]
