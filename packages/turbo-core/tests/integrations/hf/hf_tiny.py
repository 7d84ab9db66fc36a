"""Tiny random models of every architecture ``apply_turbo`` supports (2 layers, hidden 64, a few
experts), and the comparisons the tests share."""

from __future__ import annotations

import copy

import torch
import transformers
from transformers import AutoModelForCausalLM

VOCAB = 128
_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=96, vocab_size=VOCAB, max_position_embeddings=64, tie_word_embeddings=False)


def configs() -> dict[str, transformers.PreTrainedConfig]:
    """model_type -> a tiny config. Grouped-query attention (4 query, 2 key-value heads) except
    DeepSeek-V3 (MLA: q and kv LoRA ranks 32, qk head dim 16 + 8 rotary, v head dim 16); Qwen3's
    head dim 16 given explicitly (with its q/k norms); Mixtral 4 experts top-2; Qwen3-MoE a dense
    first layer then 4 experts top-2 renormalized; DeepSeek-V3 a dense first layer then 8 experts
    top-2 in 1 of 2 groups, sigmoid scores, a shared expert."""
    return {
        "llama": transformers.LlamaConfig(**_COMMON),
        "mistral": transformers.MistralConfig(**_COMMON, sliding_window=32),
        "qwen2": transformers.Qwen2Config(**_COMMON),
        "qwen3": transformers.Qwen3Config(**_COMMON, head_dim=16),
        "mixtral": transformers.MixtralConfig(**_COMMON, num_local_experts=4, num_experts_per_tok=2),
        "qwen3_moe": transformers.Qwen3MoeConfig(**_COMMON, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                                 moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[0],
                                                 norm_topk_prob=True),
        "deepseek_v3": transformers.DeepseekV3Config(**{**_COMMON, "num_key_value_heads": 4}, n_routed_experts=8,
                                                     num_experts_per_tok=2, moe_intermediate_size=32, n_group=2,
                                                     topk_group=1, first_k_dense_replace=1, q_lora_rank=32,
                                                     kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
                                                     v_head_dim=16, n_shared_experts=1),
    }


ARCHS = tuple(configs())
MOE_ARCHS = ("mixtral", "qwen3_moe", "deepseek_v3")


def build(arch: str, seed: int = 0) -> transformers.PreTrainedModel:
    """The tiny ``arch`` model (fp32, random init under ``seed``), experts on transformers' own
    ``"eager"`` loop (the per-expert reference), attention on SDPA."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(configs()[arch])
    if model.config._experts_implementation is not None:
        model.set_experts_implementation("eager")
    return model


def twin(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model)


def tokens(batch: int = 2, seq: int = 8, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=gen)


def loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    """The LM loss of ``ids`` (labels = ids), its logits, and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    return out.logits.detach(), {n: (p.grad.detach().clone() if p.grad is not None else None)
                                 for n, p in model.named_parameters()}


def max_rel(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """``max |actual - reference| / max |reference|`` in float64."""
    a, r = actual.detach().double(), reference.detach().double()
    return ((a - r).abs().max() / r.abs().max()).item()


def assert_grads_close(actual: dict, reference: dict, rtol: float) -> None:
    """The same parameters, a gradient in both or in neither, and each within ``rtol`` of the
    reference's largest magnitude (a gradient that is all zeros in the reference must be zero)."""
    assert actual.keys() == reference.keys()
    for name, ref in reference.items():
        got = actual[name]
        assert (got is None) == (ref is None), name
        if ref is None:
            continue
        if ref.abs().max() == 0:
            assert got.abs().max() == 0, name
            continue
        err = max_rel(got, ref)
        assert err <= rtol, f"{name}: max error {err:.2e} of max |grad|, tolerance {rtol:.0e}"
