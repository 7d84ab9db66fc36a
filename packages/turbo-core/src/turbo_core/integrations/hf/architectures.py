"""The architectures ``apply_turbo`` patches, by the class names transformers 5 gives their modules.

Every listed RMSNorm computes ``weight * (x * rsqrt(mean(x^2) + eps))`` with its epsilon in the
attribute ``variance_epsilon`` (none of them uses the ``(1 + weight)`` gain of Gemma-style norms);
every gated MLP computes ``down(act(gate(x)) * up(x))`` from three ``nn.Linear`` children named
``gate_proj``, ``up_proj``, ``down_proj``; every experts class stores ``gate_up_proj [E, 2I, H]``
(gate rows first) and ``down_proj [E, H, I]`` and is decorated with transformers'
``use_experts_implementation``; every attention class calls transformers' attention interface.

Routers:

* Mixtral (``MixtralTopKRouter``): softmax over the fp32 logits, top-k, the k weights divided by
  their sum, returned in fp32;
* Qwen3-MoE (``Qwen3MoeTopKRouter``): the same, divided only with ``norm_topk_prob``, returned in
  the logits' dtype;
* DeepSeek-V3 (``DeepseekV3TopkRouter``): sigmoid scores plus ``e_score_correction_bias`` choose
  the experts (a group scores the sum of its best two), the weights are the unbiased scores.
  turbo's router takes no bias, so this router is left alone (its experts still go through turbo).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "Architecture", "supported_names"]


@dataclass(frozen=True)
class Architecture:
    """One supported architecture: its ``config.model_type``, its causal-LM class name (for
    messages), and the class names of the modules replaced (``routers``: the softmax top-k routers
    turbo's router computes exactly, with ``router_weights_in_logits_dtype`` telling whether the
    router casts its top-k weights back to the logits' dtype; ``kept_routers``: class name ->
    why it is left alone)."""

    model_type: str
    causal_lm: str
    norms: tuple[str, ...]
    mlps: tuple[str, ...]
    attentions: tuple[str, ...]
    experts: tuple[str, ...] = ()
    routers: tuple[str, ...] = ()
    router_weights_in_logits_dtype: bool = False
    kept_routers: tuple[tuple[str, str], ...] = ()


_DEEPSEEK_ROUTER = ("selection adds e_score_correction_bias to sigmoid scores and ranks groups by their top-2 sum; "
                    "turbo's router takes no bias")

ARCHITECTURES: dict[str, Architecture] = {a.model_type: a for a in (
    Architecture("llama", "LlamaForCausalLM", ("LlamaRMSNorm",), ("LlamaMLP",), ("LlamaAttention",)),
    Architecture("mistral", "MistralForCausalLM", ("MistralRMSNorm",), ("MistralMLP",), ("MistralAttention",)),
    Architecture("qwen2", "Qwen2ForCausalLM", ("Qwen2RMSNorm",), ("Qwen2MLP",), ("Qwen2Attention",)),
    Architecture("qwen3", "Qwen3ForCausalLM", ("Qwen3RMSNorm",), ("Qwen3MLP",), ("Qwen3Attention",)),
    Architecture("mixtral", "MixtralForCausalLM", ("MixtralRMSNorm",), (), ("MixtralAttention",),
                 experts=("MixtralExperts",), routers=("MixtralTopKRouter",)),
    Architecture("qwen3_moe", "Qwen3MoeForCausalLM", ("Qwen3MoeRMSNorm",), ("Qwen3MoeMLP",), ("Qwen3MoeAttention",),
                 experts=("Qwen3MoeExperts",), routers=("Qwen3MoeTopKRouter",), router_weights_in_logits_dtype=True),
    Architecture("deepseek_v3", "DeepseekV3ForCausalLM", ("DeepseekV3RMSNorm",), ("DeepseekV3MLP",),
                 ("DeepseekV3Attention",), experts=("DeepseekV3Experts",),
                 kept_routers=(("DeepseekV3TopkRouter", _DEEPSEEK_ROUTER),)),
)}


def supported_names() -> str:
    """The supported architectures for messages: ``LlamaForCausalLM (llama), ...``."""
    return ", ".join(f"{a.causal_lm} ({a.model_type})" for a in ARCHITECTURES.values())
