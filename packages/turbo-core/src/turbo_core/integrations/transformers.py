"""turbo in Hugging Face Transformers (5.x) models: ``apply_turbo(model)`` patches an instantiated
model in place; ``AutoTurboModelForCausalLM.from_pretrained(...)`` loads one and patches it.
Needs ``pip install turbo-core[hf]``; importing this module imports transformers.

```python
from turbo_core.integrations.transformers import AutoTurboModelForCausalLM, apply_turbo

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen3-30B-A3B", dtype=torch.bfloat16)
report = apply_turbo(model)               # or fp8=Float8QuantConfig(granularity=ROWWISE)
print(report)
```

Supported architectures (:data:`ARCHITECTURES`): Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE
and DeepSeek-V3, any head (``*ForCausalLM``, ``*Model``, ...). Every turbo op runs on the backend
turbo's dispatcher chooses (``use_backend``, ``TURBO_*_BACKEND``, the defaults).
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedModel

from turbo_core.integrations.hf import patch as _patch
from turbo_core.integrations.hf.architectures import ARCHITECTURES, Architecture
from turbo_core.integrations.hf.attention import fallbacks as attention_fallbacks
from turbo_core.integrations.hf.auto import AutoTurboModelForCausalLM, turbo_report
from turbo_core.integrations.hf.experts import fallbacks as experts_fallbacks
from turbo_core.integrations.hf.report import KINDS, LeftAlone, TurboReport
from turbo_core.low_precision import Float8QuantConfig

__all__ = ["ARCHITECTURES", "KINDS", "Architecture", "AutoTurboModelForCausalLM", "LeftAlone", "TurboReport",
           "apply_turbo", "attention_fallbacks", "experts_fallbacks", "turbo_report"]


def apply_turbo(model: PreTrainedModel, *, fp8: Float8QuantConfig | None = None, linear: bool = True,
                norm: bool = True, attention: bool = True, mlp: bool = True, moe: bool = True, loss: bool = True,
                exclude: Sequence[str] = ("lm_head",)) -> TurboReport:
    """Patch ``model`` (a supported transformers model, already built) in place to run turbo's ops.

    What is replaced (each kind switched off by its argument; see :data:`KINDS`):

    * ``linear``: every ``torch.nn.Linear`` becomes turbo's ``Linear`` (``gemm``) or, with ``fp8``,
      ``Float8Linear`` with that recipe where both dims are multiples of 16 (others stay turbo
      ``Linear`` in their dtype). A class swap: the same module and Parameter objects, so the
      state_dict, ``save_pretrained`` checkpoints, tied weights and optimizer state are unchanged.
    * ``norm``: the architecture's RMSNorm modules become turbo ``RMSNorm`` (``rmsnorm``) holding
      the same weight Parameter, with the epsilon read from ``variance_epsilon``.
    * ``attention``: the model's attention implementation becomes ``"turbo"``
      (:mod:`~turbo_core.integrations.hf.attention`: ``flash_attn_func`` with grouped-query heads
      as they are; a call with a padding mask runs SDPA, counted in ``attention_fallbacks()``).
    * ``mlp``: SiLU-gated MLP blocks compute ``[gate | up]`` in one GEMM, turbo's SwiGLU, then the
      down projection (:class:`~turbo_core.integrations.hf.layers.TurboGatedMLP`).
    * ``moe``: softmax top-k routers (Mixtral, Qwen3-MoE) run turbo's router; the experts run the
      ``"turbo"`` experts implementation (:mod:`~turbo_core.integrations.hf.experts`: ``moe_permute``,
      grouped GEMMs over the stored 3-D weights, ``moe_unpermute``), FP8 grouped GEMMs with ``fp8``.
      DeepSeek-V3's biased sigmoid router is left alone.
    * ``loss``: a causal LM's loss (``*ForCausalLM``, transformers' ``ForCausalLMLoss``) becomes
      turbo's fused ``cross_entropy`` (:func:`~turbo_core.integrations.hf.loss.causal_lm_loss`: the
      same shift, ``ignore_index`` and ``num_items_in_batch`` rules; the logits are read in their
      dtype, with fp32 math, instead of cast to an fp32 copy), set as ``model.loss_function``.

    Attention, norms, routers and embeddings stay in the model's dtype under ``fp8``.

    Args:
        model: a ``transformers.PreTrainedModel`` of a supported architecture.
        fp8: ``None`` (every GEMM in the weights' dtype) or a ``Float8QuantConfig``: the recipe of
            the linear layers, the fused gate/up GEMMs and the experts.
        linear, norm, attention, mlp, moe, loss: which kinds to replace.
        exclude: module-name patterns left untouched, with everything under them: a name
            (``"lm_head"``), a dotted suffix (``"self_attn.q_proj"``) or an ``fnmatch`` pattern
            (``"model.layers.0.*"``). The default keeps the LM head in its dtype. An excluded
            attention or experts module keeps computing through transformers' ``sdpa`` /
            ``grouped_mm`` (the model-wide implementation name is ``"turbo"``).

    Returns:
        a :class:`TurboReport`: the counts by kind, the modules left alone with their reasons, the
        attention and experts implementations now set; ``str(report)`` is a readable summary. The
        report stays on the model (:func:`turbo_report`).

    A second call on a patched model changes nothing and returns the first call's report with
    ``already_applied=True``. ``generate()`` (KV-cache decode steps), ``save_pretrained()``
    (a checkpoint plain transformers loads), gradient checkpointing and ``torch.compile`` keep
    working.

    Raises:
        TypeError: ``model`` not a ``PreTrainedModel``; a flag not a bool; ``fp8`` not a
            ``Float8QuantConfig``; ``exclude`` not a sequence of non-empty strings.
        ValueError: an unsupported architecture (the message names the supported ones).
        Nothing is changed when an error is raised.
    """
    return _patch.apply_turbo(model, fp8=fp8, linear=linear, norm=norm, attention=attention, mlp=mlp, moe=moe,
                              loss=loss, exclude=exclude)
