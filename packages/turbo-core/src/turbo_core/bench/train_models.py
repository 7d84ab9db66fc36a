"""The models of ``turbo bench train``: real widths at few layers (:data:`MODELS`), and a tiny
version of each for ``--quick`` (:data:`QUICK_MODELS`), as demo-decoder configs
(:class:`turbo_core.demo.DemoConfig`).

Where each number comes from (the Hugging Face ``config.json`` of the model named; the suite keeps
the widths and cuts the depth):

* ``llama3.1-8b`` (``meta-llama/Llama-3.1-8B``): ``hidden_size`` 4096, ``num_attention_heads`` 32,
  ``num_key_value_heads`` 8 (grouped-query attention), head dim 4096 / 32 = 128,
  ``intermediate_size`` 14336 (SwiGLU), ``vocab_size`` 128256; 2 of its 32 layers. Sequence 8192,
  the context Llama 3 is pre-trained at before its long-context stage; batch 1.
* ``mixtral-8x7b`` (``mistralai/Mixtral-8x7B-v0.1``): ``hidden_size`` 4096, 32 query / 8 key-value
  heads of 128, ``num_local_experts`` 8, ``num_experts_per_tok`` 2 (softmax over the experts, the
  two chosen probabilities renormalized to sum to 1), expert ``intermediate_size`` 14336,
  ``vocab_size`` 32000; 2 of its 32 layers, every layer MoE. Sequence 4096 (the token count of
  the ``moe`` suite's Mixtral cases; Mixtral's context is 32768); batch 1.
* ``deepseek-v3-ep8`` (``deepseek-ai/DeepSeek-V3``): one MoE layer as one GPU of an 8-way
  expert-parallel job holds it: ``hidden_size`` 7168, ``n_routed_experts`` 256 scored by sigmoid,
  ``num_experts_per_tok`` 8 within ``topk_group`` 4 of ``n_group`` 8 groups (a group scores the
  sum of its best 8 / 4 = 2 scores), ``norm_topk_prob`` (the 8 probabilities normalized) times
  ``routed_scaling_factor`` 2.5, ``moe_intermediate_size`` 2048, ``n_shared_experts`` 1 (width
  2048). The rank holds 256 / 8 = 32 experts (the first 32); a token's copies routed to the other
  224 are dropped, as other ranks compute them, so the rank computes on average
  ``tokens * 8 * 32 / 256 = tokens`` expert rows. No attention. Sequence 4096 tokens a rank (the
  pre-training sequence of the DeepSeek-V3 report); batch 1. An embedding of the synthetic data's
  256-token vocabulary feeds the layer and a 256-way head reads it, so the step has a loss; both
  together are about 2% of the step's FLOPs.
* ``qwen3-30b-a3b`` (``Qwen/Qwen3-30B-A3B``): ``hidden_size`` 2048, ``num_attention_heads`` 32,
  ``num_key_value_heads`` 4, ``head_dim`` 128 (so q is 4096 wide), ``num_experts`` 128,
  ``num_experts_per_tok`` 8 (softmax, ``norm_topk_prob``), ``moe_intermediate_size`` 768,
  ``vocab_size`` 151936; 2 of its 48 layers, every layer MoE. Sequence 4096 (Qwen3's first
  pre-training stage); batch 1.

Left out in every provider alike: rotary position embeddings (the attention's cost does not
depend on them, and the synthetic data is first-order Markov), Qwen3's per-head RMSNorm of q and
k, DeepSeek-V3's expert-bias term of the selection (a buffer that starts at zero and that load
balancing, not the gradient step, updates) and every auxiliary loss. Norms use eps 1e-6 (the demo
decoder's). Parameters are bf16 (see :mod:`turbo_core.bench.suites.train`).
"""

from __future__ import annotations

from dataclasses import dataclass

from turbo_core.demo.model import DemoConfig

__all__ = ["MODELS", "QUICK_MODELS", "TrainModel"]


@dataclass(frozen=True)
class TrainModel:
    """One model of the suite: its name, the decoder config, the sequence length and batch of a
    step (``batch x seq`` tokens), and the model card its numbers come from."""

    name: str
    config: DemoConfig
    seq: int
    batch: int
    source: str

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


#: Real widths (the module docstring gives each number's source).
MODELS: dict[str, TrainModel] = {m.name: m for m in (
    TrainModel("llama3.1-8b", DemoConfig(vocab=128256, d_model=4096, layers=2, heads=32, kv_heads=8, head_dim=128,
                                         ffn=14336, moe_layers="none"),
               seq=8192, batch=1, source="meta-llama/Llama-3.1-8B"),
    TrainModel("mixtral-8x7b", DemoConfig(vocab=32000, d_model=4096, layers=2, heads=32, kv_heads=8, head_dim=128,
                                          experts=8, topk=2, expert_ffn=14336, moe_layers="all", norm_topk=True),
               seq=4096, batch=1, source="mistralai/Mixtral-8x7B-v0.1"),
    TrainModel("deepseek-v3-ep8", DemoConfig(vocab=256, d_model=7168, layers=1, attention=False, moe_layers="all",
                                             experts=256, topk=8, expert_groups=8, selected_groups=4,
                                             score_function="sigmoid", route_scale=2.5, local_experts=32,
                                             expert_ffn=2048, shared_ffn=2048),
               seq=4096, batch=1, source="deepseek-ai/DeepSeek-V3, one rank of 8-way expert parallelism"),
    TrainModel("qwen3-30b-a3b", DemoConfig(vocab=151936, d_model=2048, layers=2, heads=32, kv_heads=4, head_dim=128,
                                           experts=128, topk=8, expert_ffn=768, moe_layers="all", norm_topk=True),
               seq=4096, batch=1, source="Qwen/Qwen3-30B-A3B"),
)}

#: ``--quick``: each model's layout at CPU sizes (width 32, 16 tokens), keeping what makes it that
#: model: the query/key-value head ratio, a head dim other than ``d / heads`` for Qwen3, the routing
#: (softmax top-2 renormalized; sigmoid top-8 within 4 of 8 groups, scaled by 2.5, 4 of 32 experts
#: held, a shared expert; softmax top-4 of 16 renormalized).
QUICK_MODELS: dict[str, TrainModel] = {m.name: m for m in (
    TrainModel("llama3.1-8b", DemoConfig(vocab=128, d_model=32, layers=2, heads=8, kv_heads=2, head_dim=4, ffn=64,
                                         moe_layers="none"),
               seq=16, batch=1, source="meta-llama/Llama-3.1-8B (tiny)"),
    TrainModel("mixtral-8x7b", DemoConfig(vocab=128, d_model=32, layers=2, heads=8, kv_heads=2, head_dim=4,
                                          experts=8, topk=2, expert_ffn=32, moe_layers="all", norm_topk=True),
               seq=16, batch=1, source="mistralai/Mixtral-8x7B-v0.1 (tiny)"),
    TrainModel("deepseek-v3-ep8", DemoConfig(vocab=128, d_model=32, layers=1, attention=False, moe_layers="all",
                                             experts=32, topk=8, expert_groups=8, selected_groups=4,
                                             score_function="sigmoid", route_scale=2.5, local_experts=4,
                                             expert_ffn=16, shared_ffn=16),
               seq=16, batch=1, source="deepseek-ai/DeepSeek-V3, one rank of 8-way expert parallelism (tiny)"),
    TrainModel("qwen3-30b-a3b", DemoConfig(vocab=128, d_model=32, layers=2, heads=16, kv_heads=2, head_dim=4,
                                           experts=16, topk=4, expert_ffn=16, moe_layers="all", norm_topk=True),
               seq=16, batch=1, source="Qwen/Qwen3-30B-A3B (tiny)"),
)}
