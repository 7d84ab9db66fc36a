"""Launchers of the moe family (custom ops ``turbo::moe_*``, ``turbo::indices_to_multihot*``,
``turbo::tokens_per_expert_to_mask``), one module per group of primitives."""

from turbo_core.dispatch.launch.moe_dispatch import moe_combine, moe_dispatch, moe_dispatch_cached
from turbo_core.dispatch.launch.moe_permute import (
    moe_permute,
    moe_permute_preprocess,
    moe_unpermute,
    moe_unpermute_bwd,
)
from turbo_core.dispatch.launch.moe_routing import (
    indices_to_multihot,
    indices_to_multihot_bwd,
    moe_routing_bwd,
    moe_routing_fwd,
    tokens_per_expert_to_mask,
)

__all__ = [
    "indices_to_multihot",
    "indices_to_multihot_bwd",
    "moe_combine",
    "moe_dispatch",
    "moe_dispatch_cached",
    "moe_permute",
    "moe_permute_preprocess",
    "moe_routing_bwd",
    "moe_routing_fwd",
    "moe_unpermute",
    "moe_unpermute_bwd",
    "tokens_per_expert_to_mask",
]
