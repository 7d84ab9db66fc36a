"""The demo model: a small Llama-style decoder made of turbo modules and ops.

Layout (``[b, s]`` token ids in, ``[b, s, vocab]`` logits out; ``d = d_model``, ``h = heads``):

* ``embed``: ``torch.nn.Embedding(vocab, d)`` (plain torch);
* ``layers[i]``: ``x = x + attn(norm1(x))``; ``x = x + ffn(norm2(x))`` with turbo ``RMSNorm``
  (eps 1e-6), causal turbo ``Attention`` over a fused ``qkv`` projection (no positional encoding:
  the synthetic data is first-order Markov), and the FFN a dense SwiGLU block on even layers and
  an MoE block on odd layers;
* ``norm`` (``RMSNorm``) and ``head`` (``Linear(d, vocab)``).

Every projection is a turbo ``Linear`` (``Float8Linear`` with ``fp8``), bias-free. The MoE block:
router ``torch.nn.Linear(d, E)`` (plain torch, fp32 logits) -> ``fused_group_topk_routing_with_aux_score``
(softmax, top-k; the probs are the raw softmax values at the chosen experts) -> ``moe_permute``
(tokens and probs sorted by expert) -> ``GroupedLinear`` gate/up ``[E, 2f, d]`` ->
``swiglu_with_probs`` (the routing prob multiplies each copy) -> ``GroupedLinear`` down ``[E, d, f]``
-> ``moe_unpermute`` (each token's copies summed). With ``fp8`` the experts run
``grouped_gemm_fp8`` on the same weights with the same recipe. Attention, norms, the router and
the embedding stay in the model dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.modules import Attention, Float8Linear, GroupedLinear, Linear, RMSNorm
from turbo_core.ops import fused_group_topk_routing_with_aux_score, moe_permute, moe_unpermute, swiglu_with_probs
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8

__all__ = ["FP8_RECIPES", "DemoConfig", "TurboDecoder", "fp8_recipe"]

#: ``--fp8`` choices; ``none`` means every GEMM in the model dtype.
FP8_RECIPES = ("none", "tensorwise", "rowwise", "blockwise")


def fp8_recipe(name: str) -> Float8QuantConfig | None:
    """The E4M3 :class:`Float8QuantConfig` of a ``--fp8`` choice (``None`` for ``"none"``);
    blockwise uses 128-element blocks."""
    if name not in FP8_RECIPES:
        raise ValueError(f"fp8: expected one of {', '.join(FP8_RECIPES)}, got {name!r}")
    if name == "none":
        return None
    gran = ScalingGranularity(name.upper())
    return Float8QuantConfig(granularity=gran, block_size=128 if name == "blockwise" else None)


@dataclass(frozen=True)
class DemoConfig:
    """Model size. The defaults are the tiny CPU config (about 0.2 M parameters)."""

    vocab: int = 256
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    experts: int = 4
    topk: int = 2
    expert_ffn: int = 64

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "layers", "heads", "ffn", "experts", "topk", "expert_ffn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(f"heads: must divide d_model={self.d_model}, got {self.heads}")
        if self.topk > self.experts:
            raise ValueError(f"topk: must be <= experts={self.experts}, got {self.topk}")


def _linear(fp8: Float8QuantConfig | None, n_in: int, n_out: int) -> torch.nn.Linear:
    if fp8 is None:
        return Linear(n_in, n_out, bias=False)
    return Float8Linear(n_in, n_out, bias=False, config=fp8)


class SelfAttention(torch.nn.Module):
    """Causal multi-head self-attention: ``x [b, s, d] -> [b, s, d]``."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = _linear(fp8, cfg.d_model, 3 * cfg.d_model)
        self.attn = Attention(causal=True)
        self.out = _linear(fp8, cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        return self.out(self.attn(q, k, v).reshape(b, s, d))


class DenseFFN(torch.nn.Module):
    """SwiGLU: ``down(silu(gate) * up)`` with ``[gate | up] = gate_up(x)``; ``[..., d] -> [..., d]``."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None) -> None:
        super().__init__()
        self.gate_up = _linear(fp8, cfg.d_model, 2 * cfg.ffn)
        self.down = _linear(fp8, cfg.ffn, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gate_up(x)
        ones = torch.ones(h.shape[:-1].numel(), dtype=torch.float32, device=x.device)
        return self.down(swiglu_with_probs(h, ones)).view(x.shape)


class MoEFFN(torch.nn.Module):
    """Top-k routed SwiGLU experts: ``[..., d] -> [..., d]`` (see the module docstring)."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None) -> None:
        super().__init__()
        self.experts, self.topk, self.fp8 = cfg.experts, cfg.topk, fp8
        self.router = torch.nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.gate_up = GroupedLinear(cfg.experts, cfg.d_model, 2 * cfg.expert_ffn)
        self.down = GroupedLinear(cfg.experts, cfg.expert_ffn, cfg.d_model)

    def _grouped(self, layer: GroupedLinear, x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        if self.fp8 is None:
            return layer(x, lens)
        return grouped_gemm_fp8(x, layer.weight, lens, trans_b=True, out_dtype=x.dtype, config=self.fp8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1])
        logits = self.router(x2d).float()
        _scores, probs, routing_map = fused_group_topk_routing_with_aux_score(logits, self.topk,
                                                                              score_function="softmax")
        perm = moe_permute(x2d, routing_map, num_local_experts=self.experts, probs=probs,
                           probs_layout="routing_map")
        lens = perm.tokens_per_expert
        h = self._grouped(self.gate_up, perm.permuted_tokens, lens)
        h = self._grouped(self.down, swiglu_with_probs(h, perm.permuted_probs.float()), lens)
        out, _ = moe_unpermute(h, perm.row_id_map, perm.num_dispatched_tokens, restore_shape=tuple(x2d.shape),
                               num_local_experts=self.experts)
        return out.view(x.shape)


class Block(torch.nn.Module):
    """``x + attn(norm1(x))``, then ``+ ffn(norm2(x))``; ``[b, s, d] -> [b, s, d]``."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None, moe: bool) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = SelfAttention(cfg, fp8)
        self.norm2 = RMSNorm(cfg.d_model)
        self.ffn = MoEFFN(cfg, fp8) if moe else DenseFFN(cfg, fp8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class TurboDecoder(torch.nn.Module):
    """The demo decoder: ``tokens int64 [b, s] -> logits [b, s, vocab]`` in the parameters' dtype.

    The state_dict keys (``embed.weight``, ``layers.<i>.{norm1,attn.qkv,attn.out,norm2}.weight``,
    ``layers.<i>.ffn.{gate_up,down}.weight`` and, on MoE layers, ``layers.<i>.ffn.router.weight``,
    ``norm.weight``, ``head.weight``) have ``torch.nn`` shapes, so a plain-PyTorch twin with the
    same names loads them directly (the parity test does).
    """

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = torch.nn.ModuleList(Block(cfg, fp8, moe=i % 2 == 1) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = _linear(fp8, cfg.d_model, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
