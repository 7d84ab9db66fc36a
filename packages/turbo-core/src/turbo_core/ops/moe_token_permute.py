"""``token_permute`` / ``token_unpermute``: Megatron-style mask-map permutation (Primus-Turbo's names).

One convention replaces Primus-Turbo's two (its fused path returned a Triton row map in slot 3,
its unfused path Megatron's ``sorted_indices``): slot 3 is always the row map of
:func:`~turbo_core.ops.moe_permute` (int32 ``[T, 2E + 1]``), the same kernels serve both APIs, and
``fused`` / ``return_tokens_per_expert`` are accepted for compatibility and do not change the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from turbo_core.dispatch.specs.moe import MOE_PERMUTE_PREPROCESS, MoePermutePreprocessArgs, require_row_id_map
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    require_bool,
    require_int,
    require_shape,
    require_tensor,
)
from turbo_core.ops.moe_permute import MergeUnpermuteFunction, PermuteFunction, UnpermuteFunction, optional

__all__ = ["TokenPermuteResult", "token_permute", "token_unpermute"]


class TokenPermuteResult(NamedTuple):
    """What :func:`token_permute` returns (Primus-Turbo's 4-tuple order, with names)."""

    permuted_tokens: torch.Tensor
    permuted_probs: torch.Tensor | None
    row_id_map: torch.Tensor
    tokens_per_expert: torch.Tensor


def _routing_map(routing_map: object, num_tokens: int, name: str = "routing_map") -> torch.Tensor:
    require_tensor(name, routing_map, ndim=2, dtypes=(torch.bool, torch.uint8, torch.int8, *INDEX_DTYPES))
    if routing_map.shape[0] != num_tokens or routing_map.shape[1] < 1:
        raise ValueError(f"{name}: expected [T={num_tokens}, E>=1], got {tuple(routing_map.shape)}")
    return routing_map if routing_map.dtype == torch.bool else routing_map != 0


def token_permute(inp: torch.Tensor, num_out_tokens: int = -1, probs: torch.Tensor | None = None,
                  routing_map: torch.Tensor | None = None, topk_indices: torch.Tensor | None = None,
                  drop_and_pad: bool = False, fused: bool = False,
                  return_tokens_per_expert: bool = False) -> TokenPermuteResult:
    """Group tokens by expert from a ``[T, E]`` routing map (Megatron's mask-map permute).

    Args:
        inp: ``[T, H]`` fp16/bf16/fp32.
        num_out_tokens: ``>= 0``: the output has exactly this many rows (routed copies past it are
            dropped, unfilled rows are zero; no host sync). ``-1``: the number of routed copies,
            read back to the host (a sync). With ``drop_and_pad`` it is the total capacity:
            ``capacity = num_out_tokens // E`` rows per expert.
        probs: ``None`` or ``[T, E]`` fp16/bf16/fp32; ``permuted_probs[i]`` is the probability of
            row ``i``'s (token, expert).
        routing_map: required: ``[T, E]`` bool (or 0/1 integers).
        topk_indices: not supported (as in Primus-Turbo): convert with :func:`indices_to_multihot`.
        drop_and_pad: every expert segment has exactly ``capacity`` rows: its first ``capacity``
            tokens (token order), the others dropped, and zero padding rows that belong to no token
            (Megatron pads with copies of unrelated tokens; identical results when each expert has
            at most ``capacity`` tokens and unpermute merges with probs).
        fused, return_tokens_per_expert: accepted for compatibility; no effect.

    Returns:
        :class:`TokenPermuteResult` ``(permuted_tokens [N, H], permuted_probs [N] or None,
        row_id_map int32 [T, 2E + 1], tokens_per_expert int64 [E])``: expert segments in expert
        order, tokens in token order; ``tokens_per_expert`` is each segment's row count in the
        output (always returned). Gradients flow to ``inp`` and ``probs``.
    """
    for name, value in (("drop_and_pad", drop_and_pad), ("fused", fused),
                        ("return_tokens_per_expert", return_tokens_per_expert)):
        require_bool(name, value)
    if topk_indices is not None:
        raise NotImplementedError(
            "topk_indices: not supported (as in Primus-Turbo); build a routing map with "
            "indices_to_multihot(topk_indices, probs, num_experts) and pass routing_map"
        )
    require_tensor("inp", inp, ndim=2, dtypes=FLOAT_DTYPES)
    t = inp.shape[0]
    if routing_map is None:
        raise ValueError("routing_map: required (a [T, E] bool map of each token's experts)")
    rmap = _routing_map(routing_map, t).contiguous()
    e = rmap.shape[1]
    require_int("num_out_tokens", num_out_tokens, minimum=-1)
    if probs is not None:
        require_tensor("probs", probs, ndim=2, dtypes=FLOAT_DTYPES)
        require_shape("probs", probs, (t, e), "routing_map's")
        probs = probs.contiguous()
    capacity = -1
    cap = num_out_tokens
    if drop_and_pad:
        if num_out_tokens < 0:
            raise ValueError("num_out_tokens: drop_and_pad needs the total capacity (>= 0), got -1")
        capacity = num_out_tokens // e
        cap = capacity * e
    MOE_PERMUTE_PREPROCESS.check_args(MoePermutePreprocessArgs(rmap, e, 0, cap, "routing_map", capacity))
    out = PermuteFunction.apply(inp.contiguous(), probs, rmap, None, e, 0, cap, "routing_map", capacity)
    return TokenPermuteResult(out[0], optional(out[6], probs is not None), out[1], out[2])


def token_unpermute(inp: torch.Tensor, sorted_indices: torch.Tensor, merging_probs: torch.Tensor | None = None,
                    restore_shape: Sequence[int] | None = None, routing_map: torch.Tensor | None = None,
                    fused: bool = False, drop_and_pad: bool = False) -> torch.Tensor:
    """Undo :func:`token_permute`: ``out[t] = sum over t's copies of w * inp[row]``.

    Args:
        inp: ``[N, H]`` fp16/bf16/fp32 in the permuted layout.
        sorted_indices: the row map returned in slot 3 of :func:`token_permute`.
        merging_probs: ``None`` (``w = 1``) or ``[T, E]`` fp16/bf16/fp32: ``w = merging_probs[t, e]``
            for the copy of token ``t`` at expert ``e``.
        restore_shape: ``(T, H)`` or ``None`` (taken from the row map and ``inp``).
        routing_map: optional, checked for shape ``[T, E]`` (the row map already holds the experts).
        fused, drop_and_pad: accepted for compatibility; no effect (the row map encodes both).

    Returns:
        ``[T, H]`` in inp's dtype: products and sums in fp32 or wider, rounded once. Gradients flow
        to ``inp`` and ``merging_probs`` (``dot(grad_out[t], inp[row])`` per copy).
    """
    require_bool("fused", fused)
    require_bool("drop_and_pad", drop_and_pad)
    require_tensor("inp", inp, ndim=2, dtypes=FLOAT_DTYPES)
    e = require_row_id_map(sorted_indices, name="sorted_indices")
    t = sorted_indices.shape[0]
    if restore_shape is not None:
        if not isinstance(restore_shape, Sequence) or tuple(restore_shape) != (t, inp.shape[1]):
            raise ValueError(f"restore_shape: expected {(t, inp.shape[1])} ([tokens, hidden]), got {restore_shape!r}")
    if routing_map is not None:
        require_tensor("routing_map", routing_map, ndim=2)
        require_shape("routing_map", routing_map, (t, e), "[T, E] of sorted_indices")
    rows = sorted_indices.contiguous()
    if merging_probs is not None:
        require_tensor("merging_probs", merging_probs, ndim=2, dtypes=FLOAT_DTYPES)
        require_shape("merging_probs", merging_probs, (t, e), "[T, E] of sorted_indices")
        return MergeUnpermuteFunction.apply(inp.contiguous(), merging_probs.contiguous(), rows)
    out, _ = UnpermuteFunction.apply(inp.contiguous(), None, rows, 0)
    return out
