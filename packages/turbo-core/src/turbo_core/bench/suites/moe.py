"""MoE router, token permutation and index ops (``turbo bench moe``): memory-bound, scored in GB/s
(the index ops: by the wall clock per eager call, the device time beside it); and the whole fused MoE
layer, ``fused_mega_moe``, in TFLOP/s by the wall clock (:mod:`turbo_core.bench.suites.moe_mega`).

Ops, each forward (``fwd``) and backward (``bwd``):

* ``moe_routing``: the ``moe_routing_fwd`` / ``moe_routing_bwd`` primitives on fp32 logits
  ``[T, E]`` (the router GEMM's output; DeepSeek-V3 and Megatron keep it in fp32). Forward reads
  the logits, writes ``scores``, ``probs`` (fp32) and ``routing_map`` (bool); backward reads
  ``logits``, ``routing_map``, ``grad_scores``, ``grad_probs`` and writes ``grad_logits``. The
  case's ``hidden`` is E (the row width).
* ``moe_permute``: forward ``moe_permute`` of bf16 tokens ``[T, H]`` with fp32 probs ``[T, E]``
  (routing-map layout) into ``[N, H]`` + ``[N]``, ``N = T * K``; backward = its autograd backward,
  ``moe_unpermute`` of the gradients (each token's K rows summed, probs gradients scattered back
  into a dense ``[T, E]``).
* ``moe_unpermute``: forward the probs-weighted ``moe_unpermute`` of ``[N, H]`` back to
  ``[T, H]``; backward ``moe_unpermute_bwd`` (``grad_permuted [N, H]``, ``grad_merging_probs [T, E]``).

The routing of the permutation cases is random top-K per token (balanced on average); its row map
(``moe_permute_preprocess``, int32 ``[T, 2E + 1]``) is built once per input set, outside the
timed region, by the reference backend (the layout is the spec's, the same for every backend).

Bytes (``e`` = 2 for bf16, 4 per fp32 probs / logits element, ``M = 4 (1 + 2K)`` the row-map
entries a kernel needs per token: the copy count, K rows, K probs columns; sparse ``[T, E]`` probs
read at their K used entries; dense outputs written in full; every input read once, every output
written once):

* routing fwd ``T E (4 + 4 + 4 + 1)``; routing bwd ``T E (4 + 1 + 4 + 4 + 4)``;
* permute fwd ``T H e + T M + 4 T K + N H e + 4 N``; permute bwd ``N H e + 4 N + T M + T H e + 4 T E``;
* unpermute fwd ``N H e + T M + 4 T K + T H e``; unpermute bwd ``T H e + N H e + T M + 4 T K + N H e + 4 T E``.

Providers: ``torch`` (eager PyTorch: for the router the reference backend's functions, which are
plain sync-free PyTorch in fp32 on a GPU; for the permutation the usual gather / gather-sum
expressions over index tensors derived from the row map outside the timed region, e.g.
``tokens.index_select(0, src)``), ``torch.compile`` of the same functions (static shapes), and
``turbo:<BACKEND>`` for every available backend with a kernel for the primitive (the TORCH
reference only with ``--include-reference``). Accuracy: max relative error of every output against
float64 math (the permutation from the routing map itself, independent of the row map; the router
from the reference functions run in float64 on the CPU).

Index ops (:data:`INDEX_OPS`; tiny, launch-bound at small token counts, so also at
:data:`INDEX_SMALL_TOKENS` tokens besides the suite's counts): ``indices_to_multihot`` forward
(int32 top-K ids ``[T, K]``, every third token's last slot -1 (no local expert), fp32 probs ``[T, K]``
-> bool map and fp32 dense probs ``[T, E]``) and backward (fp32 ``[T, E]`` gradient gathered at the
ids -> ``[T, K]``), ``tokens_per_expert_to_mask`` (int32 counts ``[E]`` -> int64 mask ``[T K]``,
the first count one short so the mask ends in zeros) and ``moe_permute_preprocess`` (bool routing
map ``[T, E]`` -> the row map, counts, overflow flag and dispatched count). Bytes, as above:
multihot fwd ``T K (4 + 4) + T E (1 + 4)``, bwd ``3 * 4 T K``, mask ``4 E + 8 T K``, preprocess
``T E + 4 T (2E + 1) + 8 E + 8``. The ``torch`` providers are the reference backend's functions
(plain PyTorch), ``torch.compile`` compiles them, the turbo providers call the primitive through the
dispatcher pinned to the backend; accuracy against float64 math from the inputs (the row map from
the routing map's expert-major layout). Their rows carry ``timing = "wall clock"`` (the report
gives them tables of their own): ``median_ms`` (with ``p10_ms``, ``p90_ms``, ``gbps``, ``ratio``)
is the wall clock per eager call, :func:`turbo_core.timing.measure_batched` over batches of
``calls`` calls enqueued back to back (host cost included: what an eager step pays), and
``device_ms`` (``device_p10_ms``, ``device_p90_ms``) the device time of one call,
:func:`turbo_core.timing.measure`.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.bench.runner import available_backends, max_rel_err
from turbo_core.bench.suites import moe_mega, norm
from turbo_core.bench.suites.norm import MemCase, compile_skip_reason, copy_bandwidth, run_bandwidth
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs import moe as spec
from turbo_core.dispatch.specs.moe import MoePermutePreprocessArgs, MoeRoutingBwdArgs, MoeRoutingFwdArgs
from turbo_core.platform import platform_of
from turbo_core.reference import moe_routing as ref_routing
from turbo_core.reference.moe_permute import moe_permute_preprocess
from turbo_core.reference.moe_routing import moe_routing_bwd, moe_routing_fwd

__all__ = ["INDEX_OPS", "MODELS", "MoeModel", "case_bytes", "cases", "print_table", "run"]


@dataclass(frozen=True)
class MoeModel:
    """A model's router: ``experts`` E, ``topk`` K, ``hidden`` H, group-limited routing
    (``groups`` / ``selected_groups``), score function and the probs' scaling factor."""

    experts: int
    topk: int
    hidden: int
    groups: int = 1
    selected_groups: int = 1
    score_function: str = "softmax"
    scaling_factor: float = 1.0


#: Hugging Face configs (../shared/reference/benchmarks.md); DeepSeek-V3's routed scaling 2.5.
MODELS = {
    "deepseek-v3": MoeModel(256, 8, 7168, 8, 4, "sigmoid", 2.5),
    "qwen3-235b-a22b": MoeModel(128, 8, 4096),
    "mixtral-8x7b": MoeModel(8, 2, 4096),
}
QUICK_MODELS = {"tiny-grouped": MoeModel(16, 4, 48, 4, 2, "sigmoid", 2.5), "tiny": MoeModel(8, 2, 40)}
TOKENS = (4096, 16384)
QUICK_TOKENS = (24,)
OPS = (("moe_routing", "fwd"), ("moe_routing", "bwd"), ("moe_permute", "fwd"), ("moe_permute", "bwd"),
       ("moe_unpermute", "fwd"), ("moe_unpermute", "bwd"))
#: The index ops: (op, pass) -> the primitive timed.
INDEX_OPS = {("indices_to_multihot", "fwd"): "indices_to_multihot",
             ("indices_to_multihot", "bwd"): "indices_to_multihot_bwd",
             ("tokens_per_expert_to_mask", "fwd"): "tokens_per_expert_to_mask",
             ("moe_permute_preprocess", "fwd"): "moe_permute_preprocess"}
#: Token counts the index ops also run at, unless ``--tokens`` (``--quick``: :data:`QUICK_INDEX_SMALL_TOKENS`).
INDEX_SMALL_TOKENS = (1, 16, 128)
QUICK_INDEX_SMALL_TOKENS = (1,)
#: Calls per timed batch of the index ops' wall clock (``--quick``: :data:`QUICK_CALLS`).
CALLS = 100
QUICK_CALLS = 10
#: The ``timing`` field of the index ops' rows (``median_ms`` is the wall clock per eager call).
WALL = "wall clock"
TOKEN_DTYPE = torch.bfloat16
LOGITS_DTYPE = torch.float32
PROBS_DTYPE = torch.float32


def case_bytes(op: str, pass_: str, tokens: int, m: MoeModel) -> int:
    """The explicit byte count of one case (see the module docstring)."""
    t, e, k, h = tokens, m.experts, m.topk, m.hidden
    n, te, f = t * k, t * e, 4  # f: bytes of an fp32 probs / logits element
    if op == "indices_to_multihot":
        return t * k * (4 + f) + te * (1 + f) if pass_ == "fwd" else 3 * 4 * t * k
    if op == "tokens_per_expert_to_mask":
        return 4 * e + 8 * t * k
    if op == "moe_permute_preprocess":
        return te + 4 * t * (2 * e + 1) + 8 * e + 4 + 4
    if op == "moe_routing":
        return te * (3 * f + 1) if pass_ == "fwd" else te * (4 * f + 1)
    b = TOKEN_DTYPE.itemsize
    rmap = t * 4 * (1 + 2 * k)
    if op == "moe_permute":
        if pass_ == "fwd":
            return t * h * b + rmap + f * t * k + n * h * b + f * n
        return n * h * b + f * n + rmap + t * h * b + f * te
    if pass_ == "fwd":
        return n * h * b + rmap + f * t * k + t * h * b
    return t * h * b + n * h * b + rmap + f * t * k + n * h * b + f * te


#: The dtype of an index case's row (its probs, its counts, its routing map).
_INDEX_DTYPES = {"indices_to_multihot": PROBS_DTYPE, "tokens_per_expert_to_mask": torch.int32,
                 "moe_permute_preprocess": torch.bool}


def _case(op: str, pass_: str, name: str, t: int, m: MoeModel) -> MemCase:
    fields = {"experts": m.experts, "topk": m.topk, "expert_groups": m.groups, "selected_groups": m.selected_groups,
              "score_function": m.score_function}
    if (op, pass_) in INDEX_OPS:
        return MemCase("moe", op, name, pass_, t, m.experts, _INDEX_DTYPES[op], case_bytes(op, pass_, t, m),
                       extra={"model": m}, fields={**fields, "timing": WALL})
    routing = op == "moe_routing"
    return MemCase("moe", op, name, pass_, t, m.experts if routing else m.hidden,
                   LOGITS_DTYPE if routing else TOKEN_DTYPE, case_bytes(op, pass_, t, m), extra={"model": m},
                   fields=fields)


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MemCase]:
    """Every op and pass per model and token count, the index ops also at :data:`INDEX_SMALL_TOKENS`
    tokens first (``tokens`` given: that count only). An index case's ``hidden`` is E."""
    table = QUICK_MODELS if quick else MODELS
    counts = (tokens,) if tokens else (QUICK_TOKENS if quick else TOKENS)
    small = () if tokens else (QUICK_INDEX_SMALL_TOKENS if quick else INDEX_SMALL_TOKENS)
    out = []
    for t in (*small, *counts):
        for name, m in table.items():
            if models and name not in models:
                continue
            ops = list(INDEX_OPS) if t in small else [*OPS, *INDEX_OPS]
            out += [_case(op, pass_, name, t, m) for op, pass_ in ops]
    return out


def _index(case: MemCase) -> bool:
    return (case.op, case.pass_) in INDEX_OPS


def _model(case: MemCase) -> MoeModel:
    return case.extra["model"]


# ---- inputs --------------------------------------------------------------------------------------


def _routing_map(t: int, m: MoeModel, device: str, gen: torch.Generator) -> torch.Tensor:
    """bool ``[T, E]``: K distinct random experts per token."""
    picked = torch.rand(t, m.experts, device=device, generator=gen).topk(m.topk, dim=1).indices
    return torch.zeros(t, m.experts, dtype=torch.bool, device=device).scatter_(1, picked, True)


def _row_map(routing_map: torch.Tensor) -> torch.Tensor:
    return moe_permute_preprocess(MoePermutePreprocessArgs(routing_map, routing_map.shape[1]))[0]


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    """The case's tensors, the timed op's first (the timing anchor):

    routing fwd ``(logits,)``; routing bwd ``(logits, routing_map, grad_scores, grad_probs)``;
    permute fwd ``(tokens, row_id_map, probs, routing_map)``; permute bwd ``(grad_permuted,
    row_id_map, grad_permuted_probs, routing_map)``; unpermute fwd ``(permuted, row_id_map, probs,
    routing_map)``; unpermute bwd ``(grad_tokens, permuted, row_id_map, probs, routing_map)``; the
    index ops: :func:`_index_inputs`.
    """
    if _index(case):
        return _index_inputs(case, device, gen)
    m, t = _model(case), case.tokens
    e, n, h = m.experts, case.tokens * m.topk, m.hidden
    if case.op == "moe_routing":
        logits = torch.randn(t, e, device=device, generator=gen, dtype=LOGITS_DTYPE)
        if case.pass_ == "fwd":
            return (logits,)

        rmap = moe_routing_fwd(MoeRoutingFwdArgs(logits, m.topk, m.groups, m.selected_groups, m.score_function,
                                                 m.scaling_factor))[2]
        grads = [torch.randn(t, e, device=device, generator=gen, dtype=LOGITS_DTYPE) for _ in range(2)]
        return (logits, rmap, *grads)
    routing_map = _routing_map(t, m, device, gen)
    row_id_map = _row_map(routing_map)
    probs = torch.rand(t, e, device=device, generator=gen, dtype=PROBS_DTYPE) * routing_map

    def rows(count):
        return torch.randn(count, h, device=device, generator=gen).to(TOKEN_DTYPE)

    if case.op == "moe_permute":
        if case.pass_ == "fwd":
            return rows(t), row_id_map, probs, routing_map
        return rows(n), row_id_map, torch.randn(n, device=device, generator=gen, dtype=PROBS_DTYPE), routing_map
    if case.pass_ == "fwd":
        return rows(n), row_id_map, probs, routing_map
    return rows(t), rows(n), row_id_map, probs, routing_map


def _index_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    """multihot fwd ``(indices int32 [T, K], probs fp32 [T, K])``; bwd ``(grad fp32 [T, E],
    indices)``; mask ``(tokens_per_expert int32 [E],)``; preprocess ``(routing_map bool [T, E],)``."""
    m, t = _model(case), case.tokens
    routing_map = _routing_map(t, m, device, gen)
    if case.op == "moe_permute_preprocess":
        return (routing_map,)
    if case.op == "tokens_per_expert_to_mask":
        counts = routing_map.sum(0, dtype=torch.int32)
        counts[0] -= (counts[0] > 0).to(torch.int32)  # one short: the mask ends in zeros
        return (counts,)
    indices = torch.rand(t, m.experts, device=device, generator=gen).topk(m.topk, dim=1).indices.to(torch.int32)
    indices[::3, -1] = -1  # a slot routed to no local expert
    if case.pass_ == "fwd":
        return indices, torch.rand(t, m.topk, device=device, generator=gen, dtype=PROBS_DTYPE)
    return torch.randn(t, m.experts, device=device, generator=gen, dtype=PROBS_DTYPE), indices


# ---- float64 references --------------------------------------------------------------------------

_CHUNK_ROWS_ELEMS = 2**25  # float64 temporaries of at most 256 MB


def _pairs(routing_map: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token, expert)`` int64 ``[N]`` of every permuted row: experts in order, tokens in order
    inside an expert (the layout of the spec, derived from the routing map, not the row map)."""
    pairs = routing_map.t().nonzero()
    return pairs[:, 1], pairs[:, 0]


def _chunks(n: int, width: int):
    step = max(1, _CHUNK_ROWS_ELEMS // max(1, width))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def _routing_reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    m = _model(case)
    dev = inputs[0].device
    cpu = [x.cpu().double() if x.is_floating_point() else x.cpu() for x in inputs]
    if case.pass_ == "fwd":
        out = moe_routing_fwd(MoeRoutingFwdArgs(cpu[0], m.topk, m.groups, m.selected_groups, m.score_function,
                                                m.scaling_factor))
    else:
        out = [moe_routing_bwd(MoeRoutingBwdArgs(*cpu, m.score_function, m.scaling_factor))]
    return [x.to(dev) for x in out]


def _index_reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """float64 outputs of an index op, from the inputs alone (see :func:`reference`)."""
    f64 = torch.float64
    if case.op == "tokens_per_expert_to_mask":
        (counts,) = inputs
        total = int(counts.long().sum())
        return [(torch.arange(case.tokens * _model(case).topk, device=counts.device) < total).to(f64)]
    if case.op == "moe_permute_preprocess":
        return _preprocess_reference(inputs[0])
    indices = inputs[0] if case.pass_ == "fwd" else inputs[1]
    t, e = indices.shape[0], _model(case).experts
    rows, slots = (indices >= 0).nonzero(as_tuple=True)  # the ids are distinct in a row: no repeats
    cols = indices[rows, slots].long()
    if case.pass_ == "bwd":
        grad = torch.zeros(indices.shape, dtype=f64, device=indices.device)
        grad[rows, slots] = inputs[0][rows, cols].double()
        return [grad]
    routing_map = torch.zeros(t, e, dtype=f64, device=indices.device)
    probs = torch.zeros(t, e, dtype=f64, device=indices.device)
    routing_map[rows, cols] = 1.0
    probs[rows, cols] = inputs[1][rows, slots].double()
    return [routing_map, probs]


def _preprocess_reference(routing_map: torch.Tensor) -> list[torch.Tensor]:
    """``[row_id_map, tokens_per_expert, overflow, dispatched]`` as float64: token ``t``'s copies in
    expert order, copy ``j`` at the permuted row :func:`_pairs` gives it (expert-major, tokens in
    order inside an expert), -1 elsewhere; no cap, no padding."""
    t, e = routing_map.shape
    dev = routing_map.device
    src, expert = _pairs(routing_map)
    order = torch.argsort(src * e + expert)  # the permuted rows by token, then expert
    tok, exp = src[order], expert[order]
    per_token = routing_map.sum(1)
    first = torch.cumsum(per_token, 0) - per_token  # index in ``order`` of each token's first copy
    copy = torch.arange(order.numel(), device=dev) - first[tok]
    row_id_map = torch.full((t, 2 * e + 1), -1.0, dtype=torch.float64, device=dev)
    row_id_map[tok, copy] = order.double()
    row_id_map[tok, e + copy] = exp.double()
    row_id_map[:, 2 * e] = per_token.double()
    counts = routing_map.sum(0).double()
    dispatched = routing_map.any(1).sum().double().reshape(1)
    return [row_id_map, counts, torch.zeros(1, dtype=torch.float64, device=dev), dispatched]


def reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """float64 outputs (exact copies keep their dtype): routing fwd ``[scores, probs, routing_map]``,
    bwd ``[grad_logits]``; permute fwd ``[permuted, permuted_probs]``, bwd ``[grad_tokens,
    grad_probs]``; unpermute fwd ``[tokens]``, bwd ``[grad_permuted, grad_merging_probs]``;
    multihot fwd ``[routing_map, probs]``, bwd ``[grad_probs]``; mask ``[mask]``; preprocess
    ``[row_id_map, tokens_per_expert, overflow_flag, num_dispatched_tokens]``."""
    if _index(case):
        return _index_reference(case, inputs)
    if case.op == "moe_routing":
        return _routing_reference(case, inputs)
    m, t = _model(case), case.tokens
    f64 = torch.float64
    src, expert = _pairs(inputs[-1])
    dev, h = src.device, m.hidden
    if case.op == "moe_permute" and case.pass_ == "fwd":
        tokens, _, probs, _ = inputs
        return [tokens[src], probs[src, expert].double()]
    if case.op == "moe_permute":
        grad_rows, _, grad_pprobs, _ = inputs
        g = torch.zeros(t, h, dtype=f64, device=dev)
        for s in _chunks(src.numel(), h):
            g.index_add_(0, src[s], grad_rows[s].double())
        gp = torch.zeros(t, m.experts, dtype=f64, device=dev)
        gp[src, expert] = grad_pprobs.double()
        return [g, gp]
    if case.pass_ == "fwd":
        permuted, _, probs, _ = inputs
        w = probs[src, expert].double()
        out = torch.zeros(t, h, dtype=f64, device=dev)
        for s in _chunks(src.numel(), h):
            out.index_add_(0, src[s], permuted[s].double() * w[s, None])
        return [out]
    grad, permuted, _, probs, _ = inputs
    w = probs[src, expert].double()
    gx = torch.empty(src.numel(), h, dtype=f64, device=dev)
    dots = torch.empty(src.numel(), dtype=f64, device=dev)
    for s in _chunks(src.numel(), h):
        g = grad[src[s]].double()
        gx[s] = g * w[s, None]
        dots[s] = (g * permuted[s].double()).sum(-1)
    gm = torch.zeros(t, m.experts, dtype=f64, device=dev)
    gm[src, expert] = dots
    return [gx, gm]


# ---- the torch expressions (eager and compiled) ---------------------------------------------------


def _routing_fwd_expr(logits, topk, groups, selected, score_function, scale):
    return moe_routing_fwd(MoeRoutingFwdArgs(logits, topk, groups, selected, score_function, scale))


def _routing_bwd_expr(logits, routing_map, grad_scores, grad_probs, score_function, scale):
    return moe_routing_bwd(MoeRoutingBwdArgs(logits, routing_map, grad_scores, grad_probs, score_function, scale))


def _permute_expr(tokens, probs, src, col):
    """Gather each permuted row from its token (Megatron's ``index_select`` permute)."""
    return tokens.index_select(0, src), probs[src, col]


def _permute_bwd_expr(grad_rows, grad_pprobs, rows, cols, num_experts: int):
    """Sum each token's K gradient rows (fp32 accumulation); scatter the probs gradients back."""
    t, k = rows.shape
    g = grad_rows.index_select(0, rows.reshape(-1)).view(t, k, -1).sum(1, dtype=torch.float32)
    gp = torch.zeros(t, num_experts, dtype=grad_pprobs.dtype, device=grad_pprobs.device)
    return g.to(grad_rows.dtype), gp.scatter_(1, cols, grad_pprobs[rows])


def _unpermute_expr(permuted, probs, rows, cols):
    """Each token's K rows weighted by its probs, summed in fp32."""
    t, k = rows.shape
    x = permuted.index_select(0, rows.reshape(-1)).view(t, k, -1).float()
    return (x * probs.gather(1, cols).float().unsqueeze(-1)).sum(1).to(permuted.dtype)


def _unpermute_bwd_expr(grad, permuted, probs, src, col):
    """``grad_permuted[r] = grad[src[r]] * w[r]``; ``grad_probs[src[r], col[r]] = <grad[src[r]], permuted[r]>``."""
    g = grad.index_select(0, src).float()
    gx = (g * probs[src, col].float().unsqueeze(1)).to(grad.dtype)
    dots = (g * permuted.float()).sum(-1)
    return gx, torch.zeros_like(probs).index_put_((src, col), dots.to(probs.dtype))


def _layout(row_id_map: torch.Tensor, topk: int):
    """From the row map (every token has exactly ``topk`` copies here: no cap, no drops):
    ``rows``/``cols`` int64 ``[T, K]`` (permuted row and expert of each copy) and ``src``/``col``
    int64 ``[N]`` (token and expert of each permuted row)."""
    t, e = row_id_map.shape[0], (row_id_map.shape[1] - 1) // 2
    rows, cols = row_id_map[:, :topk].long(), row_id_map[:, e:e + topk].long()
    flat = rows.reshape(-1)
    src = torch.empty(t * topk, dtype=torch.long, device=rows.device)
    src[flat] = torch.arange(t, device=rows.device).repeat_interleave(topk)
    col = torch.empty_like(src)
    col[flat] = cols.reshape(-1)
    return rows, cols, src, col


def _index_reference_fn(case: MemCase) -> Callable:
    """The reference backend's function of an index op (plain PyTorch, no host sync)."""
    if case.op == "moe_permute_preprocess":
        return moe_permute_preprocess
    return getattr(ref_routing, INDEX_OPS[(case.op, case.pass_)])


def torch_provider(case: MemCase, compiled: bool) -> Callable:
    """``prepare(inputs) -> zero-argument callable``; index tensors are derived in ``prepare``."""
    m = _model(case)
    fns = {("moe_routing", "fwd"): _routing_fwd_expr, ("moe_routing", "bwd"): _routing_bwd_expr,
           ("moe_permute", "fwd"): _permute_expr, ("moe_permute", "bwd"): _permute_bwd_expr,
           ("moe_unpermute", "fwd"): _unpermute_expr, ("moe_unpermute", "bwd"): _unpermute_bwd_expr}
    fn = _index_reference_fn(case) if _index(case) else fns[(case.op, case.pass_)]
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, dynamic=False)

    def prepare(inputs):
        if _index(case):
            args = turbo_args(case, inputs)[1]
            return lambda: _outputs(case, fn(args))
        if case.op == "moe_routing":
            if case.pass_ == "fwd":
                return lambda: list(fn(inputs[0], m.topk, m.groups, m.selected_groups, m.score_function,
                                       m.scaling_factor))
            return lambda: [fn(*inputs, m.score_function, m.scaling_factor)]
        rmap = inputs[2] if (case.op, case.pass_) == ("moe_unpermute", "bwd") else inputs[1]
        rows, cols, src, col = _layout(rmap, m.topk)
        if case.op == "moe_permute" and case.pass_ == "fwd":
            return lambda: list(fn(inputs[0], inputs[2], src, col))
        if case.op == "moe_permute":
            return lambda: list(fn(inputs[0], inputs[2], rows, cols, m.experts))
        if case.pass_ == "fwd":
            return lambda: [fn(inputs[0], inputs[2], rows, cols)]
        return lambda: list(fn(inputs[0], inputs[1], inputs[3], src, col))

    return prepare


# ---- turbo primitives ----------------------------------------------------------------------------


def turbo_args(case: MemCase, inputs: tuple):
    """``(primitive name, args)`` of the case."""
    m = _model(case)
    name = INDEX_OPS.get((case.op, case.pass_))
    if name == "indices_to_multihot":
        return name, spec.IndicesToMultihotArgs(inputs[0], inputs[1], m.experts)
    if name == "indices_to_multihot_bwd":
        return name, spec.IndicesToMultihotBwdArgs(inputs[0], inputs[1])
    if name == "tokens_per_expert_to_mask":
        return name, spec.TokensPerExpertToMaskArgs(inputs[0], case.tokens * m.topk)
    if name == "moe_permute_preprocess":
        return name, MoePermutePreprocessArgs(inputs[0], m.experts)
    if case.op == "moe_routing":
        if case.pass_ == "fwd":
            return "moe_routing_fwd", spec.MoeRoutingFwdArgs(inputs[0], m.topk, m.groups, m.selected_groups,
                                                             m.score_function, m.scaling_factor)
        return "moe_routing_bwd", spec.MoeRoutingBwdArgs(*inputs, m.score_function, m.scaling_factor)
    n = case.tokens * m.topk
    if case.op == "moe_permute" and case.pass_ == "fwd":
        tokens, rmap, probs, _ = inputs
        return "moe_permute", spec.MoePermuteArgs(tokens, rmap, n, None, probs)
    if case.op == "moe_permute":
        grad_rows, rmap, grad_pprobs, _ = inputs
        return "moe_unpermute", spec.MoeUnpermuteArgs(grad_rows, rmap, grad_pprobs, m.experts, None)
    if case.pass_ == "fwd":
        permuted, rmap, probs, _ = inputs
        return "moe_unpermute", spec.MoeUnpermuteArgs(permuted, rmap, None, 0, probs)
    grad, permuted, rmap, probs, _ = inputs
    return "moe_unpermute_bwd", spec.MoeUnpermuteBwdArgs(grad, permuted, rmap, probs)


def _outputs(case: MemCase, out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if case.op == "moe_routing" or _index(case):
        return list(out) if case.pass_ == "fwd" else [out]
    if case.op == "moe_permute" and case.pass_ == "fwd":
        return [out[0], out[2]]  # (permuted, scales=None, permuted_probs)
    if case.op == "moe_unpermute" and case.pass_ == "fwd":
        return [out[0]]  # (tokens, unpermuted_probs=None)
    return list(out)


def turbo_provider(case: MemCase, backend: str) -> Callable:
    def prepare(inputs):
        name, args = turbo_args(case, inputs)

        def run_once():
            with use_backend(backend):
                return _outputs(case, call(name, args))

        return run_once

    return prepare


# ---- the index ops: wall clock per eager call and device time ------------------------------------


def _rotation(fns: list[Callable]) -> Callable[[], object]:
    """One call of the next of ``fns`` (the input sets in turn) per call."""
    turn = itertools.cycle(fns)
    return lambda: next(turn)()


def _index_row(case: MemCase, name: str, copy_gbps: float, calls: int) -> dict:
    return {"suite": case.suite, "case": case.label, "op": case.op, "model": case.model, "pass": case.pass_,
            "tokens": case.tokens, "hidden": case.hidden, "dtype": str(case.dtype).replace("torch.", ""),
            "bytes": case.bytes, **case.fields, "provider": name, "copy_gbps": copy_gbps, "calls": calls}


def run_index(all_cases: list[MemCase], *, providers: list[str] | None, include_reference: bool, warmup: int,
              iters: int, device: str, copy_gbps: float, calls: int, progress=None) -> list[dict]:
    """Every provider on every index case (see the module doc): the row keys of
    :func:`turbo_core.bench.suites.norm.run_bandwidth`, with ``median_ms`` the wall clock per eager call
    (``iters`` batches of ``calls`` calls, the input sets in turn), ``device_ms`` the device time and
    ``calls``."""
    no_compile = compile_skip_reason(device)
    gen = torch.Generator(device=device).manual_seed(0)
    task = progress.add_task("moe index ops", total=len(all_cases)) if progress and all_cases else None
    rows: list[dict] = []
    for case in all_cases:
        first = make_inputs(case, device, gen)
        per_set = sum(t.numel() * t.element_size() for t in first)
        n_sets = timing.copies_needed(per_set) if device == "cuda" else 1
        sets = [first] + [make_inputs(case, device, gen) for _ in range(n_sets - 1)]
        prim, prim_args = turbo_args(case, first)
        table: list[tuple[str, Callable | None]] = [("torch", torch_provider(case, False)), ("torch.compile", None)]
        table += [(f"turbo:{b}", None) for b in available_backends(prim, include_reference=include_reference)]
        if providers:
            table = [(n, f) for n, f in table if n in providers]
        refs = reference(case, first)
        base_ms = None
        for name, prepare in table:
            row = _index_row(case, name, copy_gbps, calls)
            try:
                if name.startswith("turbo:"):
                    backend = name.split(":", 1)[1]
                    reason = decline_reason(get_primitive(prim), backend, prim_args, platform_of(first[0].device))
                    if reason:
                        rows.append({**row, "status": f"declined: {reason}"})
                        continue
                    prepare = turbo_provider(case, backend)
                elif name == "torch.compile":
                    if no_compile:
                        rows.append({**row, "status": f"skipped: {no_compile}"})
                        continue
                    prepare = torch_provider(case, True)
                fns = [prepare(s) for s in sets]
                outs = fns[0]()
                if len(outs) != len(refs):
                    raise ValueError(f"{len(outs)} outputs, expected {len(refs)}")
                err = max((max_rel_err(o, r) for o, r in zip(outs, refs, strict=True) if r.numel()), default=0.0)
                dev = timing.measure(lambda fn, _anchor: fn(), [(fn, s[0]) for fn, s in zip(fns, sets, strict=True)],
                                     warmup=warmup, iters=iters)
                wall = timing.measure_batched(_rotation(fns), device=device, warmup=warmup, iters=iters, calls=calls,
                                              clock="wall")
            except Exception as exc:  # one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                continue
            if name == "torch":
                base_ms = wall.median_ms
            gbps = case.bytes / wall.median_ms / 1e6
            rows.append({**row, "status": "ok", "median_ms": wall.median_ms, "p10_ms": wall.p10_ms,
                         "p90_ms": wall.p90_ms, "device_ms": dev.median_ms, "device_p10_ms": dev.p10_ms,
                         "device_p90_ms": dev.p90_ms, "gbps": gbps, "copy_fraction": gbps / copy_gbps,
                         "ratio": (base_ms / wall.median_ms) if base_ms else None, "max_rel_err": err})
        if progress:
            progress.advance(task)
    return rows


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """The MoE suite: rows as :func:`turbo_core.bench.suites.norm.run_bandwidth`'s, plus the case's
    ``experts``, ``topk``, ``expert_groups``, ``selected_groups``, ``score_function``; the index ops'
    rows as :func:`run_index`'s."""
    all_cases = cases(tokens, quick, models)
    copy_gbps = copy_bandwidth(device)
    common = {"providers": providers, "include_reference": include_reference, "warmup": warmup, "iters": iters,
              "device": device, "progress": progress, "copy_gbps": copy_gbps}
    rows = run_bandwidth(sys.modules[__name__], [c for c in all_cases if not _index(c)], **common)
    rows += run_index([c for c in all_cases if _index(c)], calls=QUICK_CALLS if quick else CALLS, **common)
    return rows + moe_mega.run(moe_mega.cases(tokens, quick, models), providers=providers,
                               include_reference=include_reference, warmup=warmup, iters=iters, device=device,
                               progress=progress)


def _index_cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    return f"{r['median_ms'] * 1e3:.3g}{ratio} {{{r['device_ms'] * 1e3:.3g}}} [{r['max_rel_err']:.1e}]"


def print_table(rows: list[dict], console) -> None:
    """The bandwidth rows as :func:`turbo_core.bench.suites.norm.print_table`; the index ops' rows in
    microseconds: the wall clock per eager call (the ratio to torch's) {the device time} [the error];
    the fused layer's in TFLOP/s by the wall clock (:mod:`turbo_core.bench.suites.moe_mega`)."""
    layer = [r for r in rows if r.get("mode") == moe_mega.MODE]
    rows = [r for r in rows if r.get("mode") != moe_mega.MODE]
    timed = [r for r in rows if r.get("timing") == WALL]
    rest = [r for r in rows if r.get("timing") != WALL]
    if rest:
        norm.print_table(rest, console)
    if timed:
        print_tables(timed, console, cell=_index_cell,
                     title="turbo bench moe index ops: wall clock per eager call, us (ratio to torch) "
                           "{device time, us} [max rel err]")
    if layer:
        print_tables(layer, console, title="turbo bench moe fused layer: TFLOP/s by the wall clock per call "
                                           "(ratio to torch) [max rel err]")
