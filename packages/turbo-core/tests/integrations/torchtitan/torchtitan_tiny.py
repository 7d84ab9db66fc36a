"""Tiny TorchTitan models for the converter's tests, and the references they are checked against.

Each builder returns a stock TorchTitan model config (dim 64, 2 layers, a few experts, vocab 128)
made with TorchTitan's own public config helpers. ``inner`` picks the inner attention: ``"sdpa"``
(causal, maskless: the reference TorchTitan runs fwd+bwd on the CPU) or ``"flex"`` (the LM default,
whose block-causal document mask the converter maps to turbo's varlen attention; FlexAttention has no
CPU backward, so a flex model is only ever run converted).

The reference model is the stock config with the routed experts' ``GroupedExperts`` replaced by
:class:`Float64Experts`: TorchTitan's experts round their operands to bf16 for
``torch._grouped_mm``; the float64 loop keeps an fp32 comparison meaningful.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torchtitan.models import deepseek_v3
from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import BaseAttention, FlexAttention, ScaledDotProductAttention
from torchtitan.models.common.config_utils import (
    make_ffn_config,
    make_gqa_config,
    make_moe_config,
    make_routed_experts_config,
    make_router_config,
)
from torchtitan.models.common.moe import GroupedExperts, MoE
from torchtitan.models.deepseek_v3.model import DeepSeekV3Model
from torchtitan.models.deepseek_v3.mtp import MTPTransformerBlock
from torchtitan.models.llama3.model import Llama3Model, Llama3TransformerBlock
from torchtitan.models.qwen3.model import Qwen3Model, Qwen3TransformerBlock

DIM, VOCAB, LAYERS = 64, 128, 2
LIN = {"weight": partial(nn.init.trunc_normal_, std=0.1), "bias": nn.init.zeros_}
NORM = {"weight": partial(nn.init.uniform_, a=0.5, b=1.5)}
EMB = {"weight": partial(nn.init.normal_, std=1.0)}
EXPERTS = {name: partial(nn.init.trunc_normal_, std=0.1) for name in ("w1_EFD", "w2_EDF", "w3_EFD")}


def _inner(kind: str):
    return {"sdpa": ScaledDotProductAttention.Config, "flex": FlexAttention.Config}[kind]()


def _moe(num_experts: int, top_k: int, hidden: int, *, score_func="softmax", route_norm=True, route_scale=1.0,
         groups=None, limited=None, shared: int = 0, load_balance=None) -> MoE.Config:
    return make_moe_config(
        num_experts=num_experts,
        load_balance_coeff=load_balance,
        router=make_router_config(dim=DIM, num_experts=num_experts, gate_param_init=LIN, top_k=top_k,
                                  score_func=score_func, route_norm=route_norm, route_scale=route_scale,
                                  num_expert_groups=groups, num_limited_groups=limited),
        routed_experts=make_routed_experts_config(dim=DIM, hidden_dim=hidden, num_experts=num_experts, top_k=top_k,
                                                  param_init=EXPERTS, comm_backend="standard"),
        shared_experts=(make_ffn_config(dim=DIM, hidden_dim=hidden * shared, w1_param_init=LIN, w2w3_param_init=LIN)
                        if shared else None),
    )


def llama3(inner: str = "sdpa") -> Llama3Model.Config:
    """Llama-3: grouped-query attention (4 query heads over 2 kv heads, fused wqkv), SwiGLU FFNs."""
    rope = ComplexRoPE.Config(dim=16, max_seq_len=64, theta=500000.0)
    layers = [Llama3TransformerBlock.Config(
        attention_norm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        ffn_norm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        attention=make_gqa_config(dim=DIM, n_heads=4, n_kv_heads=2, wqkv_param_init=LIN, wo_param_init=LIN,
                                  inner_attention=_inner(inner), fuse_qkv=True, rope=rope),
        feed_forward=make_ffn_config(dim=DIM, hidden_dim=96, w1_param_init=LIN, w2w3_param_init=LIN),
    ) for _ in range(LAYERS)]
    return Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB, layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=EMB),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=LIN))


def qwen3(inner: str = "sdpa", load_balance: float | None = 1e-3) -> Qwen3Model.Config:
    """Qwen3: GQA with q/k RMSNorm, separate wq/wk/wv, head_dim 32 (not dim / heads); layer 0 a dense
    FFN, layer 1 a Qwen3-MoE block (8 experts, softmax top-2 renormalized, no shared expert)."""
    rope = CosSinRoPE.Config(dim=32, max_seq_len=64, theta=1000000.0)
    layers = []
    for i in range(LAYERS):
        layers.append(Qwen3TransformerBlock.Config(
            attention_norm=RMSNorm.Config(normalized_shape=DIM, eps=1e-6, param_init=NORM),
            ffn_norm=RMSNorm.Config(normalized_shape=DIM, eps=1e-6, param_init=NORM),
            attention=make_gqa_config(dim=DIM, n_heads=4, n_kv_heads=2, head_dim=32, wqkv_param_init=LIN,
                                      wo_param_init=LIN, inner_attention=_inner(inner), fuse_qkv=False, rope=rope,
                                      qk_norm=RMSNorm.Config(normalized_shape=32, eps=1e-6, param_init=NORM)),
            feed_forward=(make_ffn_config(dim=DIM, hidden_dim=96, w1_param_init=LIN, w2w3_param_init=LIN)
                          if i == 0 else None),
            moe=_moe(8, 2, 32, load_balance=load_balance) if i == 1 else None,
        ))
    return Qwen3Model.Config(
        dim=DIM, vocab_size=VOCAB, layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=EMB),
        norm=RMSNorm.Config(normalized_shape=DIM, eps=1e-6, param_init=NORM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=LIN))


def deepseek_v3_tiny(inner: str = "sdpa", load_balance: float | None = 1e-3, mtp: bool = True
                     ) -> DeepSeekV3Model.Config:
    """DeepSeek-V3: multi-head latent attention (q LoRA 32, kv LoRA 32, qk 16 + 8 rope, v 16, yarn
    RoPE scale), layer 0 dense, layer 1 MoE (8 experts in 4 groups, 2 groups kept, sigmoid top-2
    normalized, route_scale 2.5, one shared expert), and a multi-token-prediction layer."""
    layers = deepseek_v3.build_mla_moe_layers(
        n_layers=LAYERS, n_dense_layers=1, dim=DIM, n_heads=4, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, mscale=0.7, dense_hidden_dim=96, moe_hidden_dim=32,
        num_experts=8, num_shared_experts=1, router_top_k=2, router_score_func="sigmoid",
        router_num_expert_groups=4, router_num_limited_groups=1, router_route_scale=2.5, router_route_norm=True,
        attn_backend="flex", moe_comm_backend="standard", non_blocking_capacity_factor=None,
        linear_init=LIN, norm_init=NORM, depth_init=lambda _: LIN, depth_experts_init=lambda _: EXPERTS,
        rope=ComplexRoPE.Config(dim=8, max_seq_len=64, theta=10000.0, scaling="yarn", rope_factor=4.0,
                                original_seq_len=32))
    for layer in layers:
        layer.attention.inner_attention = _inner(inner)
        if layer.moe is not None:
            layer.moe.load_balance_coeff = load_balance
    last = layers[-1]
    mtp_layers = [MTPTransformerBlock.Config(
        attention=copy.deepcopy(last.attention), moe=copy.deepcopy(last.moe),
        attention_norm=copy.deepcopy(last.attention_norm), ffn_norm=copy.deepcopy(last.ffn_norm),
        enorm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        hnorm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        eh_proj=Linear.Config(in_features=2 * DIM, out_features=DIM, param_init=LIN),
        mtp_norm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM))] if mtp else []
    return DeepSeekV3Model.Config(
        dim=DIM, vocab_size=VOCAB, layers=layers, mtp_layers=mtp_layers,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=EMB),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=NORM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=LIN))


BUILDERS = {"llama3": llama3, "qwen3": qwen3, "deepseek_v3": deepseek_v3_tiny}


class Float64Experts(GroupedExperts):
    """``GroupedExperts`` computed expert by expert in float64: ``W2_e(silu(W1_e x) * W3_e x)`` for
    the rows of each expert (rows arrive sorted by expert, ``num_tokens_per_expert_E`` of each)."""

    @dataclass(kw_only=True, slots=True)
    class Config(GroupedExperts.Config):
        pass

    def forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
        out, start = [], 0
        for e, n in enumerate(num_tokens_per_expert_E.tolist()):
            x = x_RD[start:start + int(n)].double()
            w1, w2, w3 = (w[e].double() for w in (self.w1_EFD, self.w2_EDF, self.w3_EFD))
            out.append((torch.nn.functional.silu(x @ w1.T) * (x @ w3.T)) @ w2.T)
            start += int(n)
        return torch.cat(out).to(x_RD.dtype)


def float64_experts(config):
    """A copy of ``config`` whose routed experts are :class:`Float64Experts`."""
    config = copy.deepcopy(config)
    for _, moe, _, _ in config.traverse(MoE.Config):
        e = moe.routed_experts.inner_experts
        moe.routed_experts.inner_experts = Float64Experts.Config(dim=e.dim, hidden_dim=e.hidden_dim,
                                                                 num_experts=e.num_experts, param_init=e.param_init)
    return config


def with_inner(config, kind: str):
    """A copy of ``config`` with every layer's inner attention ``kind`` (``"sdpa"`` / ``"flex"``)."""
    config = copy.deepcopy(config)
    for _, attn, _, _ in config.traverse(BaseAttention.Config):
        attn.inner_attention = _inner(kind)
    return config


def build(config, seed: int = 0) -> nn.Module:
    """The model of ``config``, fp32 on the CPU, initialized from ``seed``, in training mode."""
    torch.manual_seed(seed)
    model = config.build()
    model.init_states()
    return model.train()


def copy_params(src: nn.Module, dst: nn.Module) -> None:
    """``dst``'s parameters set to ``src``'s (same names: the converter keeps TorchTitan's)."""
    mine = dict(dst.named_parameters())
    theirs = dict(src.named_parameters())
    assert mine.keys() == theirs.keys()
    with torch.no_grad():
        for name, p in mine.items():
            p.copy_(theirs[name])


def batch(seed: int = 1, b: int = 2, seq: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [b, seq], labels [b, seq])``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (b, seq), generator=gen), torch.randint(0, VOCAB, (b, seq), generator=gen)


def step(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor, **forward_kwargs):
    """Forward + cross-entropy (over every output of a multi-token-prediction model) + backward.
    Returns ``(logits list, {param name: grad})``."""
    model.zero_grad(set_to_none=True)
    out = model(tokens, **forward_kwargs)
    outs = out if isinstance(out, list) else [out]
    loss = sum(torch.nn.functional.cross_entropy(o.flatten(0, 1), labels.flatten()) for o in outs)
    loss.backward()
    return [o.detach() for o in outs], {n: p.grad for n, p in model.named_parameters()}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max|a - b| / max|b|`` (0 when both are zero)."""
    scale = b.abs().max().item()
    diff = (a.double() - b.double()).abs().max().item()
    return diff / scale if scale else diff
