"""The demo model in plain PyTorch: the oracle of the end-to-end parity tests and the ``torch``
baseline of ``turbo bench train``.

:class:`PlainDecoder` computes what :class:`~turbo_core.demo.model.TurboDecoder` computes with
``torch.nn.Linear``, ``F.scaled_dot_product_attention`` (causal; ``enable_gqa`` when the config has
fewer key/value heads than query heads), a hand-written RMSNorm (``x * rsqrt(mean(x^2) + 1e-6) * w``),
the routing written out in torch ops (:func:`route`) and a loop over the experts this rank holds
(:func:`expert_loop`). No turbo op is called, so it runs in any dtype torch supports, float64
included.

Its state_dict has the same keys and shapes as the turbo decoder's (FP8 or not), so
``plain.load_state_dict(turbo.state_dict())`` gives both the same weights.

Numerics, in the parameters' dtype except where stated: the router's logits are cast to fp32
(float64 in a float64 model) before the scores and the top-k, as the turbo MoE block does (with
bf16 logits near-ties could route tokens differently); each expert's SwiGLU output is scaled by its
routing probability in that precision, then rounded to the model dtype; a token's expert copies
are summed in that precision and rounded once (as ``moe_unpermute``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_core.demo.model import DemoConfig

__all__ = ["PlainDecoder", "expert_loop", "route"]


class _RMSNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Experts(torch.nn.Module):
    """``weight [E, n_out, n_in]``, the layout of turbo's ``GroupedLinear``."""

    def __init__(self, e: int, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(e, n_out, n_in))


class _Attention(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.n_kv_heads, cfg.d_head
        self.qkv = torch.nn.Linear(cfg.d_model, (cfg.heads + 2 * cfg.n_kv_heads) * cfg.d_head, bias=False)
        self.out = torch.nn.Linear(cfg.heads * cfg.d_head, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h, g, hd = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(x).split((h * hd, g * hd, g * hd), dim=-1)
        q, k, v = (t.view(b, s, n, hd).transpose(1, 2) for t, n in ((q, h), (k, g), (v, g)))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g != h)
        return self.out(o.transpose(1, 2).reshape(b, s, h * hd))


def _swiglu(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


class _Dense(torch.nn.Module):
    def __init__(self, cfg: DemoConfig, ffn: int | None = None) -> None:
        super().__init__()
        ffn = cfg.ffn if ffn is None else ffn
        self.gate_up = torch.nn.Linear(cfg.d_model, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_swiglu(self.gate_up(x)))


def route(logits: torch.Tensor, cfg: DemoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The routing of the turbo MoE block in torch ops: ``logits [T, E]`` (fp32 or wider) ->
    ``(probs [T, K], experts int64 [T, K])``, the ``K = cfg.topk`` chosen experts of each token
    and their probabilities.

    Scores: ``softmax(logits)`` or ``sigmoid(logits)`` (``cfg.score_function``). With
    ``expert_groups > 1`` each group of ``E / expert_groups`` experts scores the sum of its
    ``topk // selected_groups`` best scores, and only the ``selected_groups`` best groups compete.
    Probs: the chosen scores, divided by their sum for sigmoid (or softmax with ``norm_topk``),
    times ``route_scale``.
    """
    t, e = logits.shape
    raw = torch.softmax(logits, dim=-1) if cfg.score_function == "softmax" else torch.sigmoid(logits)
    candidates = raw
    if cfg.expert_groups > 1:
        grouped = raw.view(t, cfg.expert_groups, e // cfg.expert_groups)
        group_score = grouped.topk(cfg.topk // cfg.selected_groups, dim=-1).values.sum(-1)
        kept = group_score.topk(cfg.selected_groups, dim=-1).indices
        mask = torch.zeros_like(group_score, dtype=torch.bool).scatter(1, kept, True)
        candidates = raw.masked_fill(~mask.repeat_interleave(e // cfg.expert_groups, dim=1), float("-inf"))
    top_i = candidates.topk(cfg.topk, dim=-1).indices
    top_p = raw.gather(1, top_i)
    if cfg.score_function == "sigmoid" or cfg.norm_topk:
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    return top_p * cfg.route_scale, top_i


@torch.compiler.disable
def expert_loop(x: torch.Tensor, probs: torch.Tensor, experts: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor) -> torch.Tensor:
    """The routed experts' output ``[T, d]`` in x's dtype for ``x [T, d]``, ``probs``/``experts``
    ``[T, K]`` (:func:`route`), ``w_gate_up [L, 2f, d]`` and ``w_down [L, d, f]``: experts
    ``0 .. L - 1`` are held here; copies routed to experts ``>= L`` are dropped.

    The copies are sorted by expert (one host sync reads the per-expert counts), each expert runs
    SwiGLU on its rows, scaled by their probs in ``probs``' dtype, and the copies of a token are
    summed in that dtype, then rounded to x's dtype. Under ``torch.compile`` this function runs
    eagerly (``torch.compiler.disable``): its shapes depend on the routing, so a traced loop would
    recompile for every new set of counts.
    """
    local, k = w_gate_up.shape[0], experts.shape[1]
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=local)[:local].tolist()
    order = order[:sum(counts)]  # copies for experts < local sort first
    rows = order // k
    outs = []
    for e, (xe, pe) in enumerate(zip(x[rows].split(counts), probs.reshape(-1)[order].split(counts), strict=True)):
        h = _swiglu(xe @ w_gate_up[e].T)
        h = (h.to(probs.dtype) * pe[:, None]).to(x.dtype)
        outs.append(h @ w_down[e].T)
    y = torch.cat(outs) if outs else x.new_zeros((0, x.shape[1]))
    return torch.zeros(x.shape, dtype=probs.dtype, device=x.device).index_add(0, rows, y.to(probs.dtype)).to(x.dtype)


class _MoE(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = torch.nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.gate_up = _Experts(cfg.n_local_experts, cfg.d_model, 2 * cfg.expert_ffn)
        self.down = _Experts(cfg.n_local_experts, cfg.expert_ffn, cfg.d_model)
        self.shared = _Dense(cfg, cfg.shared_ffn) if cfg.shared_ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1])
        wide = torch.promote_types(x2d.dtype, torch.float32)  # fp32, or float64 for the oracle
        probs, experts = route(self.router(x2d).to(wide), self.cfg)
        out = expert_loop(x2d, probs, experts, self.gate_up.weight, self.down.weight)
        if self.shared is not None:
            out = out + self.shared(x2d)
        return out.view(x.shape)


class _Block(torch.nn.Module):
    def __init__(self, cfg: DemoConfig, moe: bool) -> None:
        super().__init__()
        self.has_attention = cfg.attention
        if cfg.attention:
            self.norm1, self.attn = _RMSNorm(cfg.d_model), _Attention(cfg)
        self.norm2, self.ffn = _RMSNorm(cfg.d_model), (_MoE(cfg) if moe else _Dense(cfg))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.has_attention:
            x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class PlainDecoder(torch.nn.Module):
    """The demo decoder in plain PyTorch: ``tokens int64 [b, s] -> logits [b, s, vocab]`` in the
    parameters' dtype (any floating dtype; float64 for an oracle). Each layer is dense or MoE, with
    or without attention, as in the turbo decoder of the same config."""

    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = torch.nn.ModuleList(_Block(cfg, cfg.is_moe(i)) for i in range(cfg.layers))
        self.norm = _RMSNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
