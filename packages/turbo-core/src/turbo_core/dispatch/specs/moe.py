"""MoE primitives: router, token permutation (with its row map), index conversions, EP dispatch/combine.

Every primitive is its own selection family except ``moe_dispatch`` / ``moe_combine``, which form
the family ``moe_dispatch_combine`` (``TURBO_MOE_DISPATCH_COMBINE_BACKEND``), are never auto-tuned
(a collective must run the same backend on every rank), and pair through their handle: a combine
runs on the backend that made the handle.

The row map (``row_id_map``) that links a token to its permuted copies is shared by ``moe_permute``
and ``token_permute``: int32 ``[T, 2E + 1]`` (E = the number of local experts). For token ``t`` with
``n = row_id_map[t, 2E]`` kept copies (listed in increasing expert order),
``row_id_map[t, j]`` (``j < n``) is the 0-based row of copy ``j`` in the permuted tensor and
``row_id_map[t, E + j]`` its column in the probs tensor (the expert id for a ``[T, E]`` probs, the
top-k slot for a ``[T, topk]`` probs); every other entry is -1. A per-token map lets unpermute
gather-and-sum each token's copies without atomics (deterministic) and never holds padding rows:
padding rows of the permuted tensor are zero and belong to no token.

Tensor *values* are never validated on a GPU (that would be a host sync): expert ids are checked
against their range only for CPU tensors in eager mode. On a GPU an expert id outside ``[0, E)``
is treated like -1 (no expert).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    dtype_name,
    require_bool,
    require_choice,
    require_float,
    require_int,
    require_rows,
    require_same_device,
    require_shape,
    require_tensor,
    values_readable,
)
from turbo_core.low_precision import FP8_DTYPES

__all__ = [
    "INDICES_TO_MULTIHOT",
    "INDICES_TO_MULTIHOT_BWD",
    "MOE_COMBINE",
    "MOE_DISPATCH",
    "MOE_PERMUTE",
    "MOE_PERMUTE_PREPROCESS",
    "MOE_ROUTING_BWD",
    "MOE_ROUTING_FWD",
    "MOE_UNPERMUTE",
    "MOE_UNPERMUTE_BWD",
    "TOKENS_PER_EXPERT_TO_MASK",
    "PROBS_LAYOUTS",
    "SCORE_FUNCTIONS",
    "IndicesToMultihotArgs",
    "IndicesToMultihotBwdArgs",
    "MoeCombineArgs",
    "MoeDispatchArgs",
    "MoeDispatchHandle",
    "MoePermuteArgs",
    "MoePermutePreprocessArgs",
    "MoeRoutingBwdArgs",
    "MoeRoutingFwdArgs",
    "MoeUnpermuteArgs",
    "MoeUnpermuteBwdArgs",
    "TokensPerExpertToMaskArgs",
    "check_expert_ids",
    "group_size",
    "require_row_id_map",
]

SCORE_FUNCTIONS = ("sigmoid", "softmax")
PROBS_LAYOUTS = ("topk", "routing_map")


# -- validators of MoE arguments -------------------------------------------------------------

def check_expert_ids(name: str, ids: torch.Tensor, num_experts: int) -> None:
    """Expert ids must lie in ``[-1, num_experts)``; checked on CPU tensors in eager mode only."""
    if ids.numel() == 0 or not values_readable(ids):
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < -1 or hi >= num_experts:
        bad = lo if lo < -1 else hi
        raise ValueError(f"{name}: expert id {bad} out of range: expected -1 (none) or 0..{num_experts - 1}")


def group_size(group: object) -> int:
    """World size of a process group (``None`` means a single process)."""
    if group is None:
        return 1
    return int(group.size())


def _require_group(name: str, group: object) -> None:
    if group is None:
        return
    pg = None
    if torch.distributed.is_available():
        pg = getattr(torch.distributed, "ProcessGroup", None)
    if pg is None or not isinstance(group, pg):
        raise TypeError(f"{name}: expected None or a torch.distributed.ProcessGroup, got {type(group).__name__}")


def require_row_id_map(row_id_map: object, num_tokens: int | None = None, *, name: str = "row_id_map") -> int:
    """Validate a row map (int32 ``[T, 2E + 1]``); return its number of local experts E."""
    if isinstance(row_id_map, torch.Tensor) and (row_id_map.dim() != 2 or row_id_map.dtype != torch.int32):
        raise TypeError(
            f"{name}: expected the row map returned by the permute (int32 [T, 2E + 1]), got"
            f" {dtype_name(row_id_map.dtype)} of shape {tuple(row_id_map.shape)}"
        )
    require_tensor(name, row_id_map, ndim=2, dtypes=(torch.int32,))
    cols = row_id_map.shape[1]
    if cols < 3 or cols % 2 == 0:
        raise ValueError(f"{name}: expected shape [T, 2E + 1] with E >= 1, got {tuple(row_id_map.shape)}")
    if num_tokens is not None:
        require_rows(name, row_id_map, num_tokens, "one per token")
    return (cols - 1) // 2


# -- router --------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class MoeRoutingFwdArgs:
    """Group-limited top-k routing with the auxiliary-loss scores (Primus-Turbo's fused router).

    Shapes and dtypes: ``logits`` ``[T, E]`` fp16/bf16/fp32 (``T >= 0``, ``E >= 1``).
    ``topk`` in ``[1, E]``; ``groups >= 1`` divides ``E``; ``selected_groups`` in ``[1, groups]``;
    with ``k_g = topk // selected_groups`` (the experts that score a group): ``1 <= k_g <= E / groups``
    and ``topk <= selected_groups * E / groups``. Primus-Turbo's Triton kernel also needs ``groups``
    to be a power of 2; the spec does not (a backend may decline).

    Semantics, row by row, in fp32 or wider:

    * raw score ``r = sigmoid(logits)`` or ``softmax(logits)`` (``score_function``);
    * ``scores`` (for the aux loss): ``r / sum(r)`` for sigmoid, ``r`` for softmax;
    * a group's score is the sum of its ``k_g`` largest ``r``; the ``selected_groups`` best groups
      are kept and the ``topk`` largest ``r`` among their experts are selected (ties go to the lower
      group / expert index);
    * ``probs``: the selected ``r`` divided by their sum (sigmoid) or as they are (softmax), times
      ``scaling_factor``, at the selected experts; 0 elsewhere;
    * ``routing_map``: True at the selected experts (exactly ``topk`` per row).

    Result: ``(scores, probs, routing_map)``: ``[T, E]`` each; scores and probs in logits' dtype
    (rounded once), routing_map bool.
    """

    logits: torch.Tensor
    topk: int
    groups: int = 1
    selected_groups: int = 1
    score_function: str = "sigmoid"
    scaling_factor: float = 1.0


@dataclass(frozen=True, eq=False)
class MoeRoutingBwdArgs:
    """Gradient of :class:`MoeRoutingFwdArgs`'s ``scores`` and ``probs`` with respect to ``logits``.

    ``logits`` ``[T, E]`` (the forward's); ``routing_map`` bool ``[T, E]`` (the forward's selection,
    held constant); ``grad_scores`` / ``grad_probs``: ``[T, E]`` fp16/bf16/fp32 or ``None`` (no
    gradient); ``score_function`` and ``scaling_factor`` as in the forward.

    Numerics in fp32 or wider, recomputing ``r`` from ``logits``: the exact derivative of the
    forward's formulas with the selection fixed (sigmoid: ``d r = r (1 - r)``; softmax: the softmax
    Jacobian), summed over both outputs. Result: ``grad_logits`` ``[T, E]`` in logits' dtype.
    """

    logits: torch.Tensor
    routing_map: torch.Tensor
    grad_scores: torch.Tensor | None
    grad_probs: torch.Tensor | None
    score_function: str = "sigmoid"
    scaling_factor: float = 1.0


def _validate_routing_fwd(args: MoeRoutingFwdArgs) -> None:
    require_tensor("logits", args.logits, ndim=2, dtypes=FLOAT_DTYPES)
    e = args.logits.shape[1]
    if e < 1:
        raise ValueError(f"logits: expected at least one expert (shape [T, E], E >= 1), got {tuple(args.logits.shape)}")
    topk = require_int("topk", args.topk, minimum=1)
    if topk > e:
        raise ValueError(f"topk: expected at most the number of experts ({e}), got {topk}")
    groups = require_int("groups", args.groups, minimum=1)
    if e % groups:
        raise ValueError(f"groups: expected a divisor of the number of experts ({e}), got {groups}")
    sel = require_int("selected_groups", args.selected_groups, minimum=1)
    if sel > groups:
        raise ValueError(f"selected_groups: expected at most groups ({groups}), got {sel}")
    per_group = e // groups
    if topk < sel or topk // sel > per_group:
        raise ValueError(
            f"selected_groups: topk // selected_groups (the experts that score a group) must be in "
            f"1..{per_group} (experts per group); got topk={topk}, selected_groups={sel}"
        )
    if topk > sel * per_group:
        raise ValueError(
            f"topk: expected at most selected_groups * experts per group ({sel * per_group}), got {topk}"
        )
    require_choice("score_function", args.score_function, SCORE_FUNCTIONS)
    require_float("scaling_factor", args.scaling_factor)


def _validate_routing_bwd(args: MoeRoutingBwdArgs) -> None:
    require_tensor("logits", args.logits, ndim=2, dtypes=FLOAT_DTYPES)
    shape = tuple(args.logits.shape)
    require_tensor("routing_map", args.routing_map, ndim=2, dtypes=(torch.bool,))
    require_shape("routing_map", args.routing_map, shape, "logits' shape")
    for name in ("grad_scores", "grad_probs"):
        g = getattr(args, name)
        if g is not None:
            require_tensor(name, g, ndim=2, dtypes=FLOAT_DTYPES)
            require_shape(name, g, shape, "logits' shape")
    require_choice("score_function", args.score_function, SCORE_FUNCTIONS)
    require_float("scaling_factor", args.scaling_factor)
    require_same_device(logits=args.logits, routing_map=args.routing_map, grad_scores=args.grad_scores,
                        grad_probs=args.grad_probs)


# -- permutation ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class MoePermutePreprocessArgs:
    """Build the row map (see the module docstring) and the per-expert layout of a permutation.

    ``expert_map``: a routing map bool ``[T, E]`` (``E == num_local_experts``) or a top-k index map
    int32/int64 ``[T, K]`` whose entries are local expert ids or -1 (none); an id repeated in a row
    counts once (its first slot). ``num_local_experts`` ``E >= 1``.

    Layout of the permuted tensor: expert segments in expert order; inside a segment the tokens in
    token order, then zero padding rows. Segment ``e`` has ``c_e`` tokens (the tokens routed to
    ``e``) padded to ``p_e = ceil(c_e / pad_multiple) * pad_multiple`` rows (``pad_multiple`` 0 =
    no padding), starting at ``o_e = p_0 + ... + p_{e-1}``. With ``expert_capacity >= 0`` (Megatron's
    drop-and-pad; -1 = off; excludes ``pad_multiple``), every segment has exactly ``expert_capacity``
    rows: the first ``expert_capacity`` tokens of each expert, the rest dropped (not an overflow).

    ``num_permuted_tokens >= 0`` is a static cap on the rows: rows at or past it are dropped and
    ``overflow_flag`` is 1 when anything (a token or a padding row) was dropped; -1 is no cap.

    ``probs_layout``: which column the row map records for each copy: ``"routing_map"``: the expert
    id (probs ``[T, E]``); ``"topk"``: the top-k slot (probs ``[T, K]``, index maps only).

    Result (no host sync): ``(row_id_map int32 [T, 2E + 1], tokens_per_expert int64 [E],
    overflow_flag int32 [1], num_dispatched_tokens int32 [1])``. ``tokens_per_expert[e]`` is the
    number of rows of segment ``e`` inside the cap (``min(p_e, max(0, cap - o_e))``), i.e. the
    grouped-GEMM group lengths; ``num_dispatched_tokens`` counts the tokens routed to at least one
    local expert (before the cap).
    """

    expert_map: torch.Tensor
    num_local_experts: int
    pad_multiple: int = 0
    num_permuted_tokens: int = -1
    probs_layout: str = "routing_map"
    expert_capacity: int = -1


@dataclass(frozen=True, eq=False)
class MoePermuteArgs:
    """Gather tokens into their permuted rows: ``out[row_id_map[t, j]] = tokens[t]``.

    ``tokens`` ``[T, H]`` fp16/bf16/fp32 or an fp8 dtype (copied bit-exactly); ``row_id_map`` int32
    ``[T, 2E + 1]`` (the preprocess result; its row ids must be ``< num_out``); ``num_out >= 0``
    the number of permuted rows. ``scaling_factor``: ``None`` or per-token scales ``[T, S]`` fp32
    (the FP8 case) that travel with the tokens. ``probs``: ``None`` or ``[T, W]`` fp16/bf16/fp32,
    gathered at the row map's columns (which must be ``< W``).

    Result: ``(permuted [num_out, H] tokens' dtype, permuted_scaling_factor [num_out, S] or None,
    permuted_probs [num_out] probs' dtype or None)``. Rows that no token maps to are zero.
    """

    tokens: torch.Tensor
    row_id_map: torch.Tensor
    num_out: int
    scaling_factor: torch.Tensor | None = None
    probs: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class MoeUnpermuteArgs:
    """Sum each token's permuted copies back: ``out[t] = sum_j w_j * permuted[row_id_map[t, j]]``.

    ``permuted_tokens`` ``[N, H]`` fp16/bf16/fp32; ``row_id_map`` int32 ``[T, 2E + 1]`` (row ids
    ``< N``). ``merging_probs``: ``None`` (``w = 1``) or ``[T, W]`` fp16/bf16/fp32, ``w_j =
    merging_probs[t, row_id_map[t, E + j]]``. ``permuted_probs``: ``None`` or ``[N]``
    fp16/bf16/fp32, scattered back to ``unpermuted_probs[t, row_id_map[t, E + j]]`` of width
    ``probs_width`` (zeros elsewhere).

    Numerics: products and sums in fp32 or wider, in the row map's copy order, rounded once.
    Result: ``(tokens [T, H] permuted_tokens' dtype, unpermuted_probs [T, probs_width] or None)``.
    """

    permuted_tokens: torch.Tensor
    row_id_map: torch.Tensor
    permuted_probs: torch.Tensor | None = None
    probs_width: int = 0
    merging_probs: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class MoeUnpermuteBwdArgs:
    """Backward of a weighted unpermute (:class:`MoeUnpermuteArgs` with ``merging_probs``).

    ``grad_tokens`` ``[T, H]``, ``permuted_tokens`` ``[N, H]`` (the forward input), ``row_id_map``
    ``[T, 2E + 1]``, ``merging_probs`` ``[T, W]``. For each copy ``j`` of token ``t`` at row ``r``
    and column ``c``: ``grad_permuted[r] = grad_tokens[t] * merging_probs[t, c]`` and
    ``grad_merging_probs[t, c] = dot(grad_tokens[t], permuted_tokens[r])`` (fp32 or wider).
    Result: ``(grad_permuted [N, H] grad_tokens' dtype, grad_merging_probs [T, W] merging_probs'
    dtype)``; rows / entries that no copy uses are zero.
    """

    grad_tokens: torch.Tensor
    permuted_tokens: torch.Tensor
    row_id_map: torch.Tensor
    merging_probs: torch.Tensor


def _validate_preprocess(args: MoePermutePreprocessArgs) -> None:
    e = require_int("num_local_experts", args.num_local_experts, minimum=1)
    require_tensor("expert_map", args.expert_map, ndim=2, dtypes=(torch.bool, *INDEX_DTYPES))
    is_mask = args.expert_map.dtype == torch.bool
    if is_mask and args.expert_map.shape[1] != e:
        raise ValueError(
            f"expert_map: a routing map must be [T, num_local_experts={e}], got {tuple(args.expert_map.shape)}"
        )
    if not is_mask:
        check_expert_ids("expert_map", args.expert_map, e)
    require_int("pad_multiple", args.pad_multiple, minimum=0)
    require_int("num_permuted_tokens", args.num_permuted_tokens, minimum=-1)
    require_choice("probs_layout", args.probs_layout, PROBS_LAYOUTS)
    if args.probs_layout == "topk" and is_mask:
        raise ValueError("probs_layout: 'topk' needs a top-k index map; with a bool routing map use 'routing_map'")
    require_int("expert_capacity", args.expert_capacity, minimum=-1)
    if args.expert_capacity >= 0 and args.pad_multiple:
        raise ValueError("expert_capacity: cannot be combined with pad_multiple (segments are exactly the capacity)")


def _validate_permute(args: MoePermuteArgs) -> None:
    require_tensor("tokens", args.tokens, ndim=2, dtypes=FLOAT_DTYPES + FP8_DTYPES)
    t = args.tokens.shape[0]
    require_row_id_map(args.row_id_map, t)
    require_int("num_out", args.num_out, minimum=0)
    if args.scaling_factor is not None:
        require_tensor("scaling_factor", args.scaling_factor, ndim=2, dtypes=(torch.float32,))
        require_rows("scaling_factor", args.scaling_factor, t, "one per token")
    if args.probs is not None:
        require_tensor("probs", args.probs, ndim=2, dtypes=FLOAT_DTYPES)
        require_rows("probs", args.probs, t, "one per token")
    require_same_device(tokens=args.tokens, row_id_map=args.row_id_map, scaling_factor=args.scaling_factor,
                        probs=args.probs)


def _validate_unpermute(args: MoeUnpermuteArgs) -> None:
    require_tensor("permuted_tokens", args.permuted_tokens, ndim=2, dtypes=FLOAT_DTYPES)
    n = args.permuted_tokens.shape[0]
    require_row_id_map(args.row_id_map)
    t = args.row_id_map.shape[0]
    width = require_int("probs_width", args.probs_width, minimum=0)
    if args.permuted_probs is not None:
        require_tensor("permuted_probs", args.permuted_probs, ndim=1, dtypes=FLOAT_DTYPES)
        require_shape("permuted_probs", args.permuted_probs, (n,), "one per permuted row")
        if width < 1:
            raise ValueError("probs_width: expected >= 1 when permuted_probs is given")
    if args.merging_probs is not None:
        require_tensor("merging_probs", args.merging_probs, ndim=2, dtypes=FLOAT_DTYPES)
        require_rows("merging_probs", args.merging_probs, t, "one per token")
    require_same_device(permuted_tokens=args.permuted_tokens, row_id_map=args.row_id_map,
                        permuted_probs=args.permuted_probs, merging_probs=args.merging_probs)


def _validate_unpermute_bwd(args: MoeUnpermuteBwdArgs) -> None:
    require_tensor("permuted_tokens", args.permuted_tokens, ndim=2, dtypes=FLOAT_DTYPES)
    require_row_id_map(args.row_id_map)
    t, h = args.row_id_map.shape[0], args.permuted_tokens.shape[1]
    require_tensor("grad_tokens", args.grad_tokens, ndim=2, dtypes=FLOAT_DTYPES)
    require_shape("grad_tokens", args.grad_tokens, (t, h), "[T, H]")
    require_tensor("merging_probs", args.merging_probs, ndim=2, dtypes=FLOAT_DTYPES)
    require_rows("merging_probs", args.merging_probs, t, "one per token")
    require_same_device(grad_tokens=args.grad_tokens, permuted_tokens=args.permuted_tokens,
                        row_id_map=args.row_id_map, merging_probs=args.merging_probs)


# -- index conversions ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class IndicesToMultihotArgs:
    """Top-k expert ids to a routing map and dense probs.

    ``indices`` int32/int64 ``[T, K]`` (local expert ids, -1 = none); ``probs`` ``[T, K]``
    fp16/bf16/fp32; ``num_experts`` ``E >= 1``. An id repeated in a row counts once: its first slot.
    Result: ``(routing_map bool [T, E], multihot_probs [T, E] probs' dtype)`` with
    ``multihot_probs[t, indices[t, k]] = probs[t, k]`` and zeros elsewhere.
    """

    indices: torch.Tensor
    probs: torch.Tensor
    num_experts: int


@dataclass(frozen=True, eq=False)
class IndicesToMultihotBwdArgs:
    """Gradient of :class:`IndicesToMultihotArgs`'s ``multihot_probs`` with respect to ``probs``.

    ``grad_multihot`` ``[T, E]``; ``indices`` ``[T, K]`` (the forward's). Result ``[T, K]`` in
    grad_multihot's dtype: ``grad_multihot[t, indices[t, k]]`` where slot ``k`` is the first of its
    id in the row, 0 for -1 and repeated slots.
    """

    grad_multihot: torch.Tensor
    indices: torch.Tensor


@dataclass(frozen=True, eq=False)
class TokensPerExpertToMaskArgs:
    """``mask[i] = 1 if i < sum(tokens_per_expert) else 0`` for ``i < num_tokens``.

    ``tokens_per_expert`` int32/int64 ``[E]``; ``num_tokens >= 0``. Result int64 ``[num_tokens]``
    (computed on the device: no host sync).
    """

    tokens_per_expert: torch.Tensor
    num_tokens: int


def _validate_multihot(args: IndicesToMultihotArgs) -> None:
    e = require_int("num_experts", args.num_experts, minimum=1)
    require_tensor("indices", args.indices, ndim=2, dtypes=INDEX_DTYPES)
    require_tensor("probs", args.probs, ndim=2, dtypes=FLOAT_DTYPES)
    require_shape("probs", args.probs, tuple(args.indices.shape), "indices' shape")
    check_expert_ids("indices", args.indices, e)
    require_same_device(indices=args.indices, probs=args.probs)


def _validate_multihot_bwd(args: IndicesToMultihotBwdArgs) -> None:
    require_tensor("indices", args.indices, ndim=2, dtypes=INDEX_DTYPES)
    require_tensor("grad_multihot", args.grad_multihot, ndim=2, dtypes=FLOAT_DTYPES)
    if args.grad_multihot.shape[0] != args.indices.shape[0] or args.grad_multihot.shape[1] < 1:
        raise ValueError(
            f"grad_multihot: expected [T={args.indices.shape[0]}, E>=1], got {tuple(args.grad_multihot.shape)}"
        )
    require_same_device(grad_multihot=args.grad_multihot, indices=args.indices)


def _validate_tpe_mask(args: TokensPerExpertToMaskArgs) -> None:
    require_tensor("tokens_per_expert", args.tokens_per_expert, ndim=1, dtypes=INDEX_DTYPES)
    require_int("num_tokens", args.num_tokens, minimum=0)


# -- expert-parallel dispatch / combine ----------------------------------------------------------

class MoeDispatchHandle(NamedTuple):
    """What a dispatch leaves for its combine (and for a cached re-dispatch of gradients).

    Attributes:
        backend: the backend that made it; combine and cached dispatch run on it.
        group: the process group (``None``: a single process).
        num_tokens: ``T``, the rows of the dispatched ``x`` on this rank (combine's output rows).
        num_recv: ``R``, the rows of ``recv_x`` on this rank (combine's input rows).
        num_local_experts: experts held by this rank (``num_experts // world size``).
        state: backend-private data. TORCH: ``(src_token,)``, int64 ``[R]``, the row of ``x`` that
            each received row holds (-1: a padding row).
    """

    backend: str
    group: Any
    num_tokens: int
    num_recv: int
    num_local_experts: int
    state: tuple


@dataclass(frozen=True, eq=False)
class MoeDispatchArgs:
    """Expert-parallel dispatch (DeepEP semantics).

    Fresh dispatch (``handle is None``): ``x`` ``[T, H]`` fp16/bf16/fp32, or fp8 with ``x_scales``
    ``[T, S]`` fp32 travelling with it; ``token_indices`` int32/int64 ``[T, K]`` global expert ids
    (-1 = none); ``token_probs`` fp32 ``[T, K]``; ``num_experts`` divisible by the group's world
    size W (rank ``r`` holds experts ``[r * E_l, (r + 1) * E_l)``, ``E_l = num_experts / W``).
    Each token is sent once to every rank that holds at least one of its experts.

    Result: ``(recv_x [R, H], recv_x_scales [R, S] or None, recv_token_indices [R, K] (local expert
    ids, -1 for experts held elsewhere and for padding rows), recv_token_probs fp32 [R, K] (0 where
    the index is -1), tokens_per_expert int64 [E_l] (received (token, expert) pairs per local expert,
    on the device), handle)``. ``R`` is data-dependent with W > 1 unless ``num_worst_tokens > 0``
    fixes it (rows past the received ones are zero, indices -1).

    Cached dispatch (``handle`` given; ``token_indices``/``token_probs`` None): re-sends ``x``
    ``[T, H]`` along the handle's layout (the backward of combine); the result has ``None`` for the
    indices, probs and counts and returns the same handle.

    ``async_finish`` / ``allocate_on_comm_stream``: stream hints (a synchronous backend ignores them).
    Single process (``group`` None or of size 1): ``R = max(T, num_worst_tokens)``, row ``t`` holds
    token ``t`` (a token with no valid expert is a row of -1 indices).
    """

    x: torch.Tensor
    x_scales: torch.Tensor | None
    token_indices: torch.Tensor | None
    token_probs: torch.Tensor | None
    num_experts: int
    group: Any = None
    handle: MoeDispatchHandle | None = None
    async_finish: bool = False
    allocate_on_comm_stream: bool = False
    num_worst_tokens: int = 0


@dataclass(frozen=True, eq=False)
class MoeCombineArgs:
    """Expert-parallel combine: the inverse layout of the dispatch that made ``handle``.

    ``x`` ``[R, H]`` fp16/bf16/fp32 (``R = handle.num_recv``); ``probs``: ``None`` or ``[R, K]``
    fp32, reduced alongside (DeepEP's ``topk_weights``). Each token's output is the sum, in fp32 or
    wider rounded once, of the rows returned for it by every rank it was sent to (0 for a token sent
    nowhere). Result: ``(combined [T, H] x's dtype, combined_probs [T, K] fp32 or None)``.
    """

    x: torch.Tensor
    handle: MoeDispatchHandle
    group: Any = None
    probs: torch.Tensor | None = None
    async_finish: bool = False
    allocate_on_comm_stream: bool = False


def _same_group(a: object, b: object) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return getattr(a, "group_name", a) == getattr(b, "group_name", b)


def _require_handle(handle: object, group: object) -> MoeDispatchHandle:
    if not isinstance(handle, MoeDispatchHandle):
        raise TypeError(f"handle: expected the MoeDispatchHandle returned by moe_dispatch, got {type(handle).__name__}")
    if not _same_group(group, handle.group):
        raise ValueError("group: expected the process group of the dispatch that made the handle")
    return handle


def _validate_dispatch(args: MoeDispatchArgs) -> None:
    _require_group("group", args.group)
    require_tensor("x", args.x, ndim=2, dtypes=FLOAT_DTYPES + FP8_DTYPES)
    t = args.x.shape[0]
    if args.x.dtype in FP8_DTYPES and args.x_scales is None:
        raise ValueError(f"x_scales: required with an fp8 x ({dtype_name(args.x.dtype)}): pass (x, x_scales)")
    if args.x_scales is not None:
        require_tensor("x_scales", args.x_scales, ndim=2, dtypes=(torch.float32,))
        require_rows("x_scales", args.x_scales, t, "one per token")
    require_bool("async_finish", args.async_finish)
    require_bool("allocate_on_comm_stream", args.allocate_on_comm_stream)
    worst = require_int("num_worst_tokens", args.num_worst_tokens, minimum=0)
    if args.handle is not None:
        handle = _require_handle(args.handle, args.group)
        if args.token_indices is not None or args.token_probs is not None:
            raise ValueError("token_indices: must be None for a cached dispatch (handle given)")
        require_rows("x", args.x, handle.num_tokens, "the handle's tokens")
        require_same_device(x=args.x, x_scales=args.x_scales)
        return
    world = group_size(args.group)
    e = require_int("num_experts", args.num_experts, minimum=1)
    if e % world:
        raise ValueError(f"num_experts: expected a multiple of the group's world size {world}, got {e}")
    require_tensor("token_indices", args.token_indices, ndim=2, dtypes=INDEX_DTYPES)
    require_rows("token_indices", args.token_indices, t, "x's")
    require_tensor("token_probs", args.token_probs, ndim=2, dtypes=(torch.float32,))
    require_shape("token_probs", args.token_probs, tuple(args.token_indices.shape), "token_indices' shape")
    check_expert_ids("token_indices", args.token_indices, e)
    if world == 1 and 0 < worst < t:
        raise ValueError(f"num_worst_tokens: expected 0 or >= the number of tokens ({t}) in a single process, got {worst}")
    require_same_device(x=args.x, x_scales=args.x_scales, token_indices=args.token_indices,
                        token_probs=args.token_probs)


def _validate_combine(args: MoeCombineArgs) -> None:
    _require_group("group", args.group)
    handle = _require_handle(args.handle, args.group)
    require_tensor("x", args.x, ndim=2, dtypes=FLOAT_DTYPES)
    require_rows("x", args.x, handle.num_recv, "the dispatch's received rows")
    if args.probs is not None:
        require_tensor("probs", args.probs, ndim=2, dtypes=(torch.float32,))
        require_rows("probs", args.probs, handle.num_recv, "the dispatch's received rows")
    require_bool("async_finish", args.async_finish)
    require_bool("allocate_on_comm_stream", args.allocate_on_comm_stream)
    require_same_device(x=args.x, probs=args.probs)


# -- definitions ---------------------------------------------------------------------------------

def _define(name: str, args_type: type, validate, doc: str, family: str | None = None, tunable: bool = True):
    return define_primitive(Primitive(
        name=name, args_type=args_type, precision=PrecisionType.BF16_FP16_FP32, family=family or name,
        validate=validate, tunable=tunable, doc=doc,
    ))


MOE_ROUTING_FWD = _define(
    "moe_routing_fwd", MoeRoutingFwdArgs, _validate_routing_fwd,
    "Group-limited top-k router (sigmoid/softmax): (aux scores, scaled probs, routing_map) [T, E].")
MOE_ROUTING_BWD = _define(
    "moe_routing_bwd", MoeRoutingBwdArgs, _validate_routing_bwd,
    "Router backward: d logits from d scores and d probs with the selection fixed.")
MOE_PERMUTE_PREPROCESS = _define(
    "moe_permute_preprocess", MoePermutePreprocessArgs, _validate_preprocess,
    "Row map int32 [T, 2E+1], padded/capped tokens_per_expert, overflow flag, dispatched count (no host sync).")
MOE_PERMUTE = _define(
    "moe_permute", MoePermuteArgs, _validate_permute,
    "Gather tokens (and per-token FP8 scales, probs) into expert-sorted rows by a row map.")
MOE_UNPERMUTE = _define(
    "moe_unpermute", MoeUnpermuteArgs, _validate_unpermute,
    "Sum each token's permuted copies (optionally weighted by merging probs); scatter permuted probs back.")
MOE_UNPERMUTE_BWD = _define(
    "moe_unpermute_bwd", MoeUnpermuteBwdArgs, _validate_unpermute_bwd,
    "Backward of the probs-weighted unpermute: (grad permuted rows, grad merging probs).")
INDICES_TO_MULTIHOT = _define(
    "indices_to_multihot", IndicesToMultihotArgs, _validate_multihot,
    "Top-k ids [T, K] (-1 none) to routing map bool [T, E] and dense probs [T, E].")
INDICES_TO_MULTIHOT_BWD = _define(
    "indices_to_multihot_bwd", IndicesToMultihotBwdArgs, _validate_multihot_bwd,
    "Gather dense probs gradients [T, E] back to top-k slots [T, K].")
TOKENS_PER_EXPERT_TO_MASK = _define(
    "tokens_per_expert_to_mask", TokensPerExpertToMaskArgs, _validate_tpe_mask,
    "int64 [num_tokens] mask: 1 for the first sum(tokens_per_expert) rows, else 0.")
MOE_DISPATCH = _define(
    "moe_dispatch", MoeDispatchArgs, _validate_dispatch,
    "EP dispatch (DeepEP semantics): send each token once to every rank holding one of its top-k experts.",
    family="moe_dispatch_combine", tunable=False)
MOE_COMBINE = _define(
    "moe_combine", MoeCombineArgs, _validate_combine,
    "EP combine: sum the rows returned for each token by the ranks it was dispatched to.",
    family="moe_dispatch_combine", tunable=False)
