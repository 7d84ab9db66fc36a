"""The demo decoder's dense SwiGLU blocks hand ``down`` the activation's output already quantized
(``swiglu_with_probs_fp8``) under a row-local FP8 recipe: training gives the losses of the same
model with that fusion off, bit for bit, and the fused primitive runs (CPU, the reference backend,
the tiny demo config with a dense layer, an MoE layer and a shared expert). Eval forwards (no
column copy) give the same logits too; TENSORWISE keeps the unfused path."""

from __future__ import annotations

import pytest
import torch

from turbo_core.demo import DemoConfig, TurboDecoder, fp8_recipe, train
from turbo_core.demo.model import DenseFFN

CFG = DemoConfig(shared_ffn=32)


def _model(recipe: str, fused: bool) -> TurboDecoder:
    torch.manual_seed(0)
    model = TurboDecoder(CFG, fp8_recipe(recipe))
    for m in model.modules():
        if isinstance(m, DenseFFN):
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
