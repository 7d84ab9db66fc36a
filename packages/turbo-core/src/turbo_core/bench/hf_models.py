"""The Hugging Face Transformers models of ``turbo bench train --hf``: real widths at 2 layers
(:data:`HF_MODELS`) and a tiny version of each for ``--quick`` (:data:`QUICK_HF_MODELS`), as
transformers 5 config arguments. Importing this module does not import transformers;
:meth:`HFTrainModel.config` does.

Where each number comes from (the Hugging Face ``config.json`` of the model named; the widths are
kept, the depth cut to 2 layers):

* ``llama3.1-8b`` (``meta-llama/Llama-3.1-8B``, ``LlamaForCausalLM``): ``hidden_size`` 4096,
  ``intermediate_size`` 14336, ``num_attention_heads`` 32, ``num_key_value_heads`` 8,
  ``vocab_size`` 128256, ``rms_norm_eps`` 1e-5, ``rope_theta`` 500000 (the plain rotary
  embedding: Llama 3.1's frequency rescaling changes no cost); sequence 8192, batch 1.
* ``qwen3-30b-a3b`` (``Qwen/Qwen3-30B-A3B``, ``Qwen3MoeForCausalLM``): ``hidden_size`` 2048,
  ``num_attention_heads`` 32, ``num_key_value_heads`` 4, ``head_dim`` 128, ``num_experts`` 128,
  ``num_experts_per_tok`` 8, ``moe_intermediate_size`` 768, ``norm_topk_prob`` true,
  ``vocab_size`` 151936, ``rms_norm_eps`` 1e-6, ``rope_theta`` 1000000, every layer MoE;
  sequence 4096 (as the ``train`` suite's Qwen3 model), batch 1.

Untied embeddings; no dropout; the router's auxiliary loss is off (transformers' default).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HF_MODELS", "QUICK_HF_MODELS", "HFTrainModel"]


@dataclass(frozen=True)
class HFTrainModel:
    """One model of ``train --hf``: its name, the transformers ``model_type`` and config arguments,
    the sequence length and batch of a step, and the model card its numbers come from."""

    name: str
    model_type: str
    kwargs: dict = field(hash=False)
    seq: int
    batch: int
    source: str

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def moe(self) -> bool:
        return "num_experts" in self.kwargs or "num_local_experts" in self.kwargs

    def config(self):
        """The transformers config (imports transformers)."""
        from transformers import AutoConfig

        return AutoConfig.for_model(self.model_type, **self.kwargs)

    def with_seq(self, seq: int) -> HFTrainModel:
        return HFTrainModel(self.name, self.model_type, self.kwargs, seq, self.batch, self.source)


_LLAMA = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
              vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072)
_QWEN3_MOE = dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                  num_experts_per_tok=8, moe_intermediate_size=768, intermediate_size=6144, norm_topk_prob=True,
                  vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                  decoder_sparse_step=1, mlp_only_layers=[])
_COMMON = dict(num_hidden_layers=2, tie_word_embeddings=False, attention_dropout=0.0)

#: Real widths (the module docstring gives each number's source).
HF_MODELS: dict[str, HFTrainModel] = {m.name: m for m in (
    HFTrainModel("llama3.1-8b", "llama", {**_LLAMA, **_COMMON}, seq=8192, batch=1, source="meta-llama/Llama-3.1-8B"),
    HFTrainModel("qwen3-30b-a3b", "qwen3_moe", {**_QWEN3_MOE, **_COMMON}, seq=4096, batch=1,
                 source="Qwen/Qwen3-30B-A3B"),
)}

#: ``--quick``: each model's layout at CPU sizes (width 32, 16 tokens), keeping the query/key-value
#: head ratio, Qwen3's head dim other than ``d / heads`` and its softmax top-k renormalized routing.
QUICK_HF_MODELS: dict[str, HFTrainModel] = {m.name: m for m in (
    HFTrainModel("llama3.1-8b", "llama", {**_LLAMA, **_COMMON, "hidden_size": 32, "intermediate_size": 64,
                                          "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 128,
                                          "max_position_embeddings": 64},
                 seq=16, batch=1, source="meta-llama/Llama-3.1-8B (tiny)"),
    HFTrainModel("qwen3-30b-a3b", "qwen3_moe", {**_QWEN3_MOE, **_COMMON, "hidden_size": 32, "num_attention_heads": 16,
                                                "num_key_value_heads": 2, "head_dim": 4, "num_experts": 16,
                                                "num_experts_per_tok": 4, "moe_intermediate_size": 16,
                                                "intermediate_size": 64, "vocab_size": 128,
                                                "max_position_embeddings": 64},
                 seq=16, batch=1, source="Qwen/Qwen3-30B-A3B (tiny)"),
)}
