"""The demo decoder's dense SwiGLU blocks hand ``down`` the activation's output already quantized
(``swiglu_with_probs_fp8``) under a row-local FP8 recipe, and its MoE experts under ROWWISE: training
gives the losses and gradients of the same model with that fusion off, bit for bit, and the fused
primitive runs (CPU, the reference backend, the tiny demo config with a dense layer, an MoE layer and
a shared expert). Eval forwards (no column copy) give the same logits too; TENSORWISE keeps the
unfused path, and so do the experts under BLOCKWISE and with ``wgrad_fp8=False``."""

from __future__ import annotations

import pytest
import torch

from turbo_core.demo import DemoConfig, TurboDecoder, fp8_recipe, train
from turbo_core.demo.model import DenseFFN, MoEFFN
from turbo_core.dispatch.dispatcher import recording
from turbo_core.modules import GroupedLinear

CFG = DemoConfig(shared_ffn=32)


def _model(recipe: str, fused: bool) -> TurboDecoder:
    torch.manual_seed(0)
    model = TurboDecoder(CFG, fp8_recipe(recipe))
    for m in model.modules():
        if isinstance(m, (DenseFFN, MoEFFN)):
            m.fuse_fp8 = fused
    return model


@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
def test_fused_swiglu_trains_bit_for_bit_like_the_unfused_model(recipe):
    fused = train(CFG, steps=2, batch=2, seq=16, model=_model(recipe, True))
    plain = train(CFG, steps=2, batch=2, seq=16, model=_model(recipe, False))
    assert fused.losses == plain.losses
    assert fused.calls.get(("swiglu_fwd_fp8", "TORCH"), 0) > 0 and ("swiglu_fwd_fp8", "TORCH") not in plain.calls
    tokens = torch.randint(0, CFG.vocab, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(_model(recipe, True)(tokens), _model(recipe, False)(tokens))


def test_tensorwise_keeps_the_unfused_path():
    result = train(CFG, steps=1, batch=2, seq=16, model=_model("tensorwise", True))
    assert not any(p == "swiglu_fwd_fp8" for p, _ in result.calls)


def _expert_swiglu_calls(model: TurboDecoder, tokens: torch.Tensor) -> tuple[torch.Tensor, dict, list[str]]:
    """One forward + backward of ``model``: the logits, every parameter's gradient and the primitives
    the MoE experts' SwiGLU ran (the ``swiglu_fwd*`` calls whose activation is 2 x expert_ffn wide)."""
    with recording() as calls:
        logits = model(tokens)
        logits.float().square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    swiglu = [name for name, _, _, args in calls
              if name.startswith("swiglu_fwd") and args.x.shape[-1] == 2 * CFG.expert_ffn]
    return logits.detach(), grads, swiglu


@pytest.mark.parametrize("wgrad_fp8", [True, False])
def test_moe_experts_fuse_under_rowwise_with_the_unfused_bits(wgrad_fp8):
    tokens = torch.randint(0, CFG.vocab, (2, 16), generator=torch.Generator().manual_seed(2))
    runs = []
    for fused in (True, False):
        model = _model("rowwise", fused)
        for m in model.modules():
            if isinstance(m, GroupedLinear):
                m.wgrad_fp8 = wgrad_fp8
        runs.append(_expert_swiglu_calls(model, tokens))
    (logits_f, grads_f, calls_f), (logits_p, grads_p, calls_p) = runs
    assert torch.equal(logits_f, logits_p)
    assert grads_f.keys() == grads_p.keys() and all(torch.equal(grads_f[n], grads_p[n]) for n in grads_f)
    assert calls_p and set(calls_p) == {"swiglu_fwd"}
    assert set(calls_f) == ({"swiglu_fwd_fp8"} if wgrad_fp8 else {"swiglu_fwd"})


def test_moe_experts_keep_the_unfused_path_under_blockwise():
    tokens = torch.randint(0, CFG.vocab, (2, 16), generator=torch.Generator().manual_seed(3))
    _, _, calls = _expert_swiglu_calls(_model("blockwise", True), tokens)
    assert calls and set(calls) == {"swiglu_fwd"}
