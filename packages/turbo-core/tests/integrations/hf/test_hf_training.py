"""Training through the patched models: gradient checkpointing (transformers' recompute of each
decoder layer in the backward) gives the gradients of the run without it, against the float64
unpatched oracle, for a dense and an MoE model, bf16-free (fp32) and with FP8's weight caches;
AdamW steps on one batch follow the unpatched model's losses."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5")

from hf_tiny import assert_grads_close, build, loss_and_grads, max_rel, tokens, twin  # noqa: E402

from turbo_core.dispatch import stats  # noqa: E402
from turbo_core.integrations.transformers import apply_turbo  # noqa: E402
from turbo_core.low_precision import Float8QuantConfig  # noqa: E402
from turbo_core.testing import tolerance  # noqa: E402

RTOL = tolerance(torch.float32)[0]


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_gradient_checkpointing_matches_unpatched(arch):
    model = build(arch)
    oracle = twin(model).double()
    ids = tokens()
    ref_logits, ref_grads = loss_and_grads(oracle.train(), ids)
    apply_turbo(model)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert model.is_activation_checkpointing
    logits, grads = loss_and_grads(model.train(), ids)
    # each layer's forward ran twice: once, then recomputed in the backward
    fwd = sum(n for (prim, _b, _h), n in stats().items() if prim == "attention_fwd")
    assert fwd == 2 * model.config.num_hidden_layers
    assert max_rel(logits, ref_logits) <= RTOL
    assert_grads_close(grads, ref_grads, RTOL)


def test_gradient_checkpointing_with_fp8_gives_the_same_gradients():
    recipe = Float8QuantConfig()
    plain = build("qwen3_moe")
    checkpointed = twin(plain)
    apply_turbo(plain, fp8=recipe)
    apply_turbo(checkpointed, fp8=recipe)
    checkpointed.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    ids = tokens()
    _, want = loss_and_grads(plain.train(), ids)
    _, got = loss_and_grads(checkpointed.train(), ids)
    assert_grads_close(got, want, 0.0)  # the recomputed forward quantizes exactly as the first did


@pytest.mark.parametrize("arch", ["qwen2", "mixtral"])
def test_adamw_steps_follow_the_unpatched_model(arch):
    model = build(arch).train()
    ref = twin(model).double().train()
    apply_turbo(model)
    losses = {}
    for name, net in (("turbo", model), ("ref", ref)):
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        losses[name] = []
        ids = tokens()
        for _ in range(4):
            loss = net(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[name].append(loss.item())
    assert losses["ref"][-1] < losses["ref"][0]
    for got, want in zip(losses["turbo"], losses["ref"], strict=True):
        assert abs(got - want) <= 10 * RTOL * abs(want), (losses["turbo"], losses["ref"])


def test_torch_compile_traces_the_patched_model_in_one_graph():
    """dynamo traces a patched MoE model whole (``fullgraph=True``: turbo's ops are custom ops, the
    permutation has a static size), AOT autograd builds its backward (``aot_eager``: no code
    generation on the CPU), and the result is the eager patched model's."""
    model = build("qwen3_moe")
    apply_turbo(model)
    ids = tokens()
    want_logits, want = loss_and_grads(model, ids)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    logits, got = loss_and_grads(compiled, ids)
    torch._dynamo.reset()
    assert max_rel(logits, want_logits) <= RTOL
    assert_grads_close({k.removeprefix("_orig_mod."): v for k, v in got.items()}, want, RTOL)
