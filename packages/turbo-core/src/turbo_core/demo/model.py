"""The demo model: a Llama-style decoder made of turbo modules and ops.

Layout (``[b, s]`` token ids in, ``[b, s, vocab]`` logits out; ``d = d_model``, ``h = heads``,
``g = kv_heads``, ``hd = head_dim``):

* ``embed``: ``torch.nn.Embedding(vocab, d)`` (plain torch);
* ``layers[i]``: ``x = x + attn(norm1(x))``; ``x = x + ffn(norm2(x))`` with turbo ``RMSNorm``
  (eps 1e-6), causal turbo ``Attention`` over a fused ``qkv`` projection ``d -> (h + 2g) * hd``
  laid out ``[q | k | v]`` (grouped-query attention when ``g < h``; no positional encoding: the
  synthetic data is first-order Markov) and an output projection ``h * hd -> d``. The FFN is a dense
  SwiGLU block or an MoE block per :attr:`DemoConfig.moe_layers` (the default: dense on even layers,
  MoE on odd ones). With ``attention=False`` a layer is ``x + ffn(norm2(x))`` alone (an MoE layer
  as an expert-parallel rank holds it);
* ``norm`` (``RMSNorm``) and ``head`` (``Linear(d, vocab)``).

Every projection is a turbo ``Linear`` (``Float8Linear`` with ``fp8``), bias-free. With a ROWWISE,
BLOCKWISE or MX recipe a dense SwiGLU block hands its ``down`` projection the activation's output
already quantized (``swiglu_with_probs_fp8``: the activation and the quantization in one pass),
the same bits as ``down`` quantizing it itself. The MoE block:
router ``torch.nn.Linear(d, E)`` (plain torch, fp32 logits) -> ``fused_group_topk_routing_with_aux_score``
(softmax or sigmoid scores, group-limited top-k; see :class:`DemoConfig`) -> with ``norm_topk`` the
top-k probs divided by their sum -> the columns of the ``local_experts`` this rank holds (experts
``0 .. local_experts - 1``; a token's copies routed to other experts are dropped, as another rank
computes them) -> ``moe_permute`` (tokens and probs sorted by expert) -> ``GroupedLinear`` gate/up
``[L, 2f, d]`` -> ``swiglu_with_probs`` (the routing prob multiplies each copy) -> ``GroupedLinear``
down ``[L, d, f]`` -> ``moe_unpermute`` (each token's copies summed) -> plus, with ``shared_ffn``,
a dense SwiGLU shared expert every token passes through. With ``fp8`` the experts are
``GroupedLinear`` layers with that recipe (``grouped_gemm_fp8`` on the same weights). Every FP8
layer, dense or grouped, keeps its weight's FP8 copies in its weight cache, so micro-batches that
share an optimizer step (gradient accumulation) quantize each weight once. Attention, norms, the
router and the embedding stay in the model dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.dispatch.specs.activation_fp8 import ROW_LOCAL
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.modules import Attention, Float8Linear, GroupedLinear, Linear, RMSNorm
from turbo_core.ops import (
    fused_group_topk_routing_with_aux_score,
    moe_permute,
    moe_unpermute,
    swiglu_with_probs,
    swiglu_with_probs_fp8,
)

__all__ = ["FP8_RECIPES", "MOE_LAYOUTS", "SCORE_FUNCTIONS", "DemoConfig", "TurboDecoder", "fp8_recipe"]

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


#: :attr:`DemoConfig.moe_layers` choices: MoE blocks on the odd layers (dense on the even ones), on
#: every layer, or on none.
MOE_LAYOUTS = ("odd", "all", "none")
SCORE_FUNCTIONS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class DemoConfig:
    """Model size and layout. The defaults are the tiny CPU config of ``turbo demo`` (about 0.2 M
    parameters: 2 layers, multi-head attention, a dense and an MoE layer, softmax top-2 of 4).

    Fields beyond the sizes (each default keeps the demo's layout):

    * ``kv_heads``: key/value heads ``g`` (``None``: ``heads``; fewer: grouped-query attention,
      ``heads % kv_heads == 0``); ``head_dim``: ``None`` means ``d_model // heads``.
    * ``moe_layers``: ``"odd"``, ``"all"`` or ``"none"`` (:data:`MOE_LAYOUTS`); ``attention``:
      False drops the attention half of every layer.
    * routing: ``score_function`` ``"softmax"`` (probs: the softmax values at the chosen experts)
      or ``"sigmoid"`` (probs: the sigmoid values normalized over the top-k);
      ``expert_groups``/``selected_groups``: group-limited routing (each group scores the sum of
      its ``topk // selected_groups`` best scores, the ``selected_groups`` best groups are kept);
      ``norm_topk``: softmax probs divided by their top-k sum; ``route_scale`` multiplies the probs.
    * ``local_experts``: experts this rank holds (``None``: all ``experts``), the first ones; the
      router still scores all ``experts``.
    * ``shared_ffn``: width of a dense shared expert added to the MoE block's output (0: none).
    """

    vocab: int = 256
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    experts: int = 4
    topk: int = 2
    expert_ffn: int = 64
    kv_heads: int | None = None
    head_dim: int | None = None
    moe_layers: str = "odd"
    attention: bool = True
    score_function: str = "softmax"
    expert_groups: int = 1
    selected_groups: int = 1
    norm_topk: bool = False
    route_scale: float = 1.0
    local_experts: int | None = None
    shared_ffn: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "layers", "heads", "ffn", "experts", "topk", "expert_ffn", "expert_groups",
                     "selected_groups"):
            _positive(name, getattr(self, name))
        for name in ("kv_heads", "head_dim", "local_experts"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if isinstance(self.shared_ffn, bool) or not isinstance(self.shared_ffn, int) or self.shared_ffn < 0:
            raise ValueError(f"shared_ffn: expected an int >= 0, got {self.shared_ffn!r}")
        if self.head_dim is None and self.d_model % self.heads:
            raise ValueError(f"heads: must divide d_model={self.d_model} (or give head_dim), got {self.heads}")
        if self.heads % self.n_kv_heads:
            raise ValueError(f"kv_heads: must divide heads={self.heads}, got {self.kv_heads}")
        if self.topk > self.experts:
            raise ValueError(f"topk: must be <= experts={self.experts}, got {self.topk}")
        if self.moe_layers not in MOE_LAYOUTS:
            raise ValueError(f"moe_layers: expected one of {', '.join(MOE_LAYOUTS)}, got {self.moe_layers!r}")
        if self.score_function not in SCORE_FUNCTIONS:
            raise ValueError(f"score_function: expected one of {', '.join(SCORE_FUNCTIONS)}, got {self.score_function!r}")
        if self.experts % self.expert_groups:
            raise ValueError(f"expert_groups: must divide experts={self.experts}, got {self.expert_groups}")
        if self.selected_groups > self.expert_groups:
            raise ValueError(f"selected_groups: must be <= expert_groups={self.expert_groups}, got {self.selected_groups}")
        per_group = self.topk // self.selected_groups
        if not 1 <= per_group <= self.experts // self.expert_groups:
            raise ValueError(f"selected_groups: topk // selected_groups = {per_group} experts score a group; expected "
                             f"1 .. experts / expert_groups = {self.experts // self.expert_groups}")
        if self.local_experts is not None and self.local_experts > self.experts:
            raise ValueError(f"local_experts: must be <= experts={self.experts}, got {self.local_experts}")
        if not self.attention and self.moe_layers != "all":
            raise ValueError(f"attention: False needs moe_layers='all' (a layer is its MoE block alone), "
                             f"got moe_layers={self.moe_layers!r}")
        if isinstance(self.route_scale, bool) or not isinstance(self.route_scale, (int, float)) or self.route_scale <= 0:
            raise ValueError(f"route_scale: expected a positive number, got {self.route_scale!r}")

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads (``kv_heads``, else ``heads``)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_head(self) -> int:
        """Head dimension (``head_dim``, else ``d_model // heads``)."""
        return self.d_model // self.heads if self.head_dim is None else self.head_dim

    @property
    def n_local_experts(self) -> int:
        """Experts held here (``local_experts``, else ``experts``)."""
        return self.experts if self.local_experts is None else self.local_experts

    def is_moe(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has an MoE FFN (:attr:`moe_layers`)."""
        return self.moe_layers == "all" or (self.moe_layers == "odd" and layer % 2 == 1)


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _linear(fp8: Float8QuantConfig | None, n_in: int, n_out: int) -> torch.nn.Linear:
    if fp8 is None:
        return Linear(n_in, n_out, bias=False)
    return Float8Linear(n_in, n_out, bias=False, config=fp8)


class SelfAttention(torch.nn.Module):
    """Causal self-attention, grouped-query when ``kv_heads < heads``: ``x [b, s, d] -> [b, s, d]``."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.n_kv_heads, cfg.d_head
        self.qkv = _linear(fp8, cfg.d_model, (cfg.heads + 2 * cfg.n_kv_heads) * cfg.d_head)
        self.attn = Attention(causal=True)
        self.out = _linear(fp8, cfg.heads * cfg.d_head, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h, g, hd = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(x).split((h * hd, g * hd, g * hd), dim=-1)
        o = self.attn(q.view(b, s, h, hd), k.view(b, s, g, hd), v.view(b, s, g, hd))
        return self.out(o.reshape(b, s, h * hd))


class DenseFFN(torch.nn.Module):
    """SwiGLU: ``down(silu(gate) * up)`` with ``[gate | up] = gate_up(x)``; ``[..., d] -> [..., d]``;
    width ``ffn`` (default ``cfg.ffn``).

    When ``down`` is a ``Float8Linear`` with a ROWWISE, BLOCKWISE or MX recipe, the SwiGLU's output
    comes out quantized for it (``swiglu_with_probs_fp8``, with the column copy when ``down``'s
    weight gets a gradient): outputs and gradients are bit for bit those of ``down`` quantizing
    ``swiglu_with_probs``' output itself. Not while ``torch.compile`` traces (a ``QuantizedTensor``
    made inside a graph cannot be read by ``gemm_fp8`` there), nor with :attr:`fuse_fp8` off.
    """

    #: Quantize the SwiGLU's output in the activation's pass (row-local FP8 recipes); ``False``: ``down``
    #: quantizes it.
    fuse_fp8: bool = True

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None, ffn: int | None = None) -> None:
        super().__init__()
        ffn = cfg.ffn if ffn is None else ffn
        self.gate_up = _linear(fp8, cfg.d_model, 2 * ffn)
        self.down = _linear(fp8, ffn, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gate_up(x)
        ones = torch.ones(h.shape[:-1].numel(), dtype=torch.float32, device=x.device)
        down = self.down
        if (self.fuse_fp8 and isinstance(down, Float8Linear) and down.config.granularity in ROW_LOCAL
                and not torch.compiler.is_compiling()):
            wgrad = torch.is_grad_enabled() and down.weight.requires_grad
            return down(swiglu_with_probs_fp8(h, ones, config=down.config, with_trans=wgrad)).view(x.shape)
        return down(swiglu_with_probs(h, ones)).view(x.shape)


class MoEFFN(torch.nn.Module):
    """Top-k routed SwiGLU experts (and an optional shared expert): ``[..., d] -> [..., d]`` (see the
    module docstring)."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None) -> None:
        super().__init__()
        self.cfg = cfg
        self.experts, self.topk, self.local = cfg.experts, cfg.topk, cfg.n_local_experts
        self.router = torch.nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.gate_up = GroupedLinear(self.local, cfg.d_model, 2 * cfg.expert_ffn, config=fp8)
        self.down = GroupedLinear(self.local, cfg.expert_ffn, cfg.d_model, config=fp8)
        self.shared = DenseFFN(cfg, fp8, cfg.shared_ffn) if cfg.shared_ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        x2d = x.reshape(-1, x.shape[-1])
        logits = self.router(x2d).float()
        _scores, probs, routing_map = fused_group_topk_routing_with_aux_score(
            logits, self.topk, groups=cfg.expert_groups, selected_groups=cfg.selected_groups,
            score_function=cfg.score_function, scaling_factor=cfg.route_scale)
        if cfg.norm_topk and cfg.score_function == "softmax":  # sigmoid probs are normalized by the op
            probs = probs / probs.sum(dim=-1, keepdim=True)
        if self.local < self.experts:  # this rank's experts only: copies routed elsewhere are dropped
            routing_map, probs = routing_map[:, :self.local], probs[:, :self.local]
        perm = moe_permute(x2d, routing_map, num_local_experts=self.local, probs=probs,
                           probs_layout="routing_map")
        lens = perm.tokens_per_expert
        h = self.gate_up(perm.permuted_tokens, lens)
        h = self.down(swiglu_with_probs(h, perm.permuted_probs.float()), lens)
        out, _ = moe_unpermute(h, perm.row_id_map, perm.num_dispatched_tokens, restore_shape=tuple(x2d.shape),
                               num_local_experts=self.local)
        if self.shared is not None:
            out = out + self.shared(x2d)
        return out.view(x.shape)


class Block(torch.nn.Module):
    """``x + attn(norm1(x))`` (unless ``cfg.attention`` is False), then ``+ ffn(norm2(x))``;
    ``[b, s, d] -> [b, s, d]``."""

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None, moe: bool) -> None:
        super().__init__()
        self.has_attention = cfg.attention
        if cfg.attention:
            self.norm1 = RMSNorm(cfg.d_model)
            self.attn = SelfAttention(cfg, fp8)
        self.norm2 = RMSNorm(cfg.d_model)
        self.ffn = MoEFFN(cfg, fp8) if moe else DenseFFN(cfg, fp8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.has_attention:
            x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class TurboDecoder(torch.nn.Module):
    """The demo decoder: ``tokens int64 [b, s] -> logits [b, s, vocab]`` in the parameters' dtype.

    The state_dict keys (``embed.weight``, ``layers.<i>.{norm1,attn.qkv,attn.out}.weight`` when the
    layers have attention, ``layers.<i>.norm2.weight``, ``layers.<i>.ffn.{gate_up,down}.weight`` and,
    on MoE layers, ``layers.<i>.ffn.router.weight`` and ``layers.<i>.ffn.shared.{gate_up,down}.weight``
    with a shared expert, ``norm.weight``, ``head.weight``) have ``torch.nn`` shapes, so a
    plain-PyTorch twin with the same names loads them directly (the parity test does).
    """

    def __init__(self, cfg: DemoConfig, fp8: Float8QuantConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = torch.nn.ModuleList(Block(cfg, fp8, moe=cfg.is_moe(i)) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = _linear(fp8, cfg.d_model, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
