"""Reference (TORCH) kernels of the moe family: router, permutation, index conversions and the
single-process expert-parallel dispatch/combine (see ``moe_routing``, ``moe_permute``,
``moe_dispatch`` beside this module)."""

from __future__ import annotations

from turbo_core.backend import BackendType
from turbo_core.plugins.types import Kernel

_ROUTING = "turbo_core.reference.moe_routing"
_PERMUTE = "turbo_core.reference.moe_permute"
_DISPATCH = "turbo_core.reference.moe_dispatch"
_FLOATS = ("fp32", "fp16", "bf16")


def _kernel(primitive: str, module: str, variants: tuple[str, ...] = _FLOATS, check: str | None = None) -> Kernel:
    return Kernel(primitive, BackendType.TORCH, f"{module}:{primitive}", check=check, variants=variants,
                  priority=-100)


KERNELS = [
    _kernel("moe_routing_fwd", _ROUTING, ("sigmoid", "softmax", *_FLOATS)),
    _kernel("moe_routing_bwd", _ROUTING, ("sigmoid", "softmax", *_FLOATS)),
    _kernel("indices_to_multihot", _ROUTING),
    _kernel("indices_to_multihot_bwd", _ROUTING),
    _kernel("tokens_per_expert_to_mask", _ROUTING, ("int32", "int64")),
    _kernel("moe_permute_preprocess", _PERMUTE, ("routing_map", "topk_indices")),
    _kernel("moe_permute", _PERMUTE, (*_FLOATS, "fp8")),
    _kernel("moe_unpermute", _PERMUTE),
    _kernel("moe_unpermute_bwd", _PERMUTE),
    _kernel("moe_dispatch", _DISPATCH, ("single-process", *_FLOATS, "fp8"),
            check=f"{_DISPATCH}:check_dispatch_combine"),
    _kernel("moe_combine", _DISPATCH, ("single-process", *_FLOATS), check=f"{_DISPATCH}:check_dispatch_combine"),
]
