"""The turbo converter on tiny TorchTitan Llama-3, Qwen3 and DeepSeek-V3 models, fp32 on the CPU
(reference backend TORCH): logits and every parameter's gradient against TorchTitan's own model."""

from __future__ import annotations

import copy
import os

import pytest
import torch

if os.environ.get("TURBO_TORCHTITAN_TESTS") == "1":
    import torchtitan  # noqa: F401  (nox -s integrations-torchtitan: missing is an error, not a skip)
else:
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (nox -s integrations-torchtitan runs this)")

import torchtitan_tiny as tiny  # noqa: E402
from torchtitan.models.common.attention import VarlenMetadata  # noqa: E402
from torchtitan.models.common.linear import Linear  # noqa: E402
from torchtitan.models.common.moe import MoE, TokenChoiceTopKRouter  # noqa: E402
from torchtitan.models.common.nn_modules import RMSNorm  # noqa: E402

from turbo_core import dispatch  # noqa: E402
from turbo_core.integrations.torchtitan import TurboConverter  # noqa: E402
from turbo_core.integrations.torchtitan_layers import (  # noqa: E402
    TurboCausalAttention,
    TurboDocumentAttention,
    TurboFloat8Linear,
    TurboLinear,
    TurboRMSNorm,
)
from turbo_core.integrations.torchtitan_moe import TurboMoE  # noqa: E402

#: fp32 against a float64-accumulated reference (turbo_core.testing.numerics' fp32 tolerance).
FP32_TOL = 1e-4
#: Against TorchTitan's stock experts, which round their operands to bf16.
BF16_TOL = 2e-2

CASES = [("llama3", None), ("qwen3", 1e-3), ("qwen3", None), ("deepseek_v3", 1e-3), ("deepseek_v3", None)]
IDS = ["llama3", "qwen3-torchtitan-router", "qwen3-turbo-router", "deepseek_v3-torchtitan-router",
       "deepseek_v3-turbo-router"]


def _config(name: str, load_balance, inner: str = "sdpa"):
    if name == "llama3":
        return tiny.llama3(inner)
    return tiny.BUILDERS[name](inner, load_balance=load_balance)


def _convert(config, **options):
    converter = TurboConverter.Config(**options).build()
    return converter.convert(copy.deepcopy(config)), converter.report


def _check_modules(model: torch.nn.Module, turbo_routing: bool) -> None:
    """Every linear (but the routers' gates), RMSNorm, inner attention and MoE is turbo's."""
    gates = {id(m.gate) for m in model.modules() if isinstance(m, TokenChoiceTopKRouter)}
    for fqn, m in model.named_modules():
        if isinstance(m, Linear):
            assert isinstance(m, (TurboLinear, TurboFloat8Linear)) != (id(m) in gates), fqn
        if isinstance(m, RMSNorm):
            assert isinstance(m, TurboRMSNorm), fqn
        if fqn.endswith("inner_attention"):
            assert isinstance(m, (TurboCausalAttention, TurboDocumentAttention)), fqn
        if isinstance(m, MoE):
            assert isinstance(m, TurboMoE) and m.turbo_routing == turbo_routing, fqn


@pytest.mark.parametrize("name,load_balance", CASES, ids=IDS)
def test_logits_and_gradients_match_torchtitan(name, load_balance):
    stock_cfg = _config(name, load_balance)
    turbo_cfg, report = _convert(stock_cfg)
    ref = tiny.build(tiny.float64_experts(stock_cfg))
    stock = tiny.build(stock_cfg, seed=1)
    model = tiny.build(turbo_cfg, seed=2)
    tiny.copy_params(ref, stock)
    tiny.copy_params(ref, model)
    moe = name != "llama3"
    turbo_routing = moe and load_balance is None
    _check_modules(model, turbo_routing)
    assert model.state_dict().keys() == stock.state_dict().keys()

    tokens, labels = tiny.batch()
    ref_logits, ref_grads = tiny.step(ref, tokens, labels)
    stock_logits, _ = tiny.step(stock, tokens, labels)
    logits, grads = tiny.step(model, tokens, labels)

    assert len(logits) == len(ref_logits) == (2 if name == "deepseek_v3" else 1)  # + the MTP layer's
    for got, want, theirs in zip(logits, ref_logits, stock_logits, strict=True):
        assert tiny.rel_err(got, want) < FP32_TOL
        assert tiny.rel_err(got, theirs) < (BF16_TOL if moe else FP32_TOL)
    assert grads.keys() == ref_grads.keys()
    for fqn, want in ref_grads.items():
        assert want is not None and grads[fqn] is not None, fqn
        assert tiny.rel_err(grads[fqn], want) < FP32_TOL, fqn

    ran = {prim for prim, backend, _ in dispatch.stats() if backend == "TORCH"}
    assert {"gemm", "rmsnorm_fwd", "rmsnorm_bwd", "attention_fwd", "attention_bwd"} <= ran
    moe_prims = {"moe_permute", "moe_unpermute", "grouped_gemm", "grouped_gemm_variable_k", "swiglu_fwd"}
    assert (moe_prims <= ran) == moe and ("moe_routing_fwd" in ran) == turbo_routing
    assert ("moe_routing" in report.counts()) == turbo_routing
    assert report.counts()["attention"] == tiny.LAYERS + (1 if name == "deepseek_v3" else 0)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "deepseek_v3"])
def test_packed_documents_attend_within_their_document(name):
    """A flex-attention model converted: the masks TorchTitan builds from positions (varlen
    metadata) keep attention causal inside each packed document, so each document's logits and the
    summed gradients are the stock model's run on every document alone."""
    stock_cfg = _config(name, None)
    turbo_cfg, _ = _convert(tiny.with_inner(stock_cfg, "flex"))
    ref = tiny.build(tiny.float64_experts(stock_cfg))
    model = tiny.build(turbo_cfg, seed=2)
    tiny.copy_params(ref, model)
    tokens, labels = tiny.batch(b=2, seq=16)
    positions = torch.stack([torch.cat([torch.arange(10), torch.arange(6)]), torch.arange(16)])
    masks = model.get_attention_masks(positions)
    assert isinstance(masks, VarlenMetadata) and masks.cu_seq_q.tolist() == [0, 10, 16, 32]

    def loss_of(outs, lab):
        outs = outs if isinstance(outs, list) else [outs]
        return outs, sum(torch.nn.functional.cross_entropy(o.flatten(0, 1), lab.flatten(), reduction="sum")
                         for o in outs)

    outs, loss = loss_of(model(tokens, positions, masks), labels)
    loss.backward()
    docs = [(0, 0, 10), (0, 10, 16), (1, 0, 16)]
    ref_loss = 0
    for row, a, b in docs:
        ref_outs, doc_loss = loss_of(ref(tokens[row:row + 1, a:b]), labels[row:row + 1, a:b])
        ref_loss = ref_loss + doc_loss
        for got, want in zip(outs, ref_outs, strict=True):
            assert tiny.rel_err(got[row, a:b].detach(), want[0].detach()) < FP32_TOL, (row, a, b)
    ref_loss.backward()
    ref_grads = dict(ref.named_parameters())
    for fqn, p in model.named_parameters():
        assert tiny.rel_err(p.grad, ref_grads[fqn].grad) < FP32_TOL, fqn


def _snr_db(got: torch.Tensor, want: torch.Tensor) -> float:
    noise = (got.double() - want.double()).pow(2).sum()
    return float(10 * torch.log10(want.double().pow(2).sum() / noise))


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_fp8_recipe_runs_linears_and_experts_in_fp8(recipe):
    stock_cfg = tiny.qwen3("sdpa", load_balance=None)
    turbo_cfg, report = _convert(stock_cfg, fp8=recipe)
    ref = tiny.build(tiny.float64_experts(stock_cfg))
    model = tiny.build(turbo_cfg, seed=2)
    tiny.copy_params(ref, model)
    _check_modules(model, turbo_routing=True)
    fp8 = [m for m in model.modules() if isinstance(m, TurboFloat8Linear)]
    assert not [m for m in model.modules() if isinstance(m, TurboLinear)] and "linear" not in report.replaced
    assert all(m.config.granularity.value == recipe.upper() for m in fp8)
    assert report.replaced["moe_fp8"] == ["layers.1.moe.routed_experts.inner_experts"]
    tokens, labels = tiny.batch()
    (want,), ref_grads = tiny.step(ref, tokens, labels)
    (got,), grads = tiny.step(model, tokens, labels)
    # E4M3 operands in every GEMM of the forward and the backward, through two layers: the logits
    # keep about 24 dB, all gradients together about 20 dB on this model.
    assert _snr_db(got, want) > 20
    assert grads.keys() == ref_grads.keys()
    flat = [torch.cat([g[n].flatten() for n in ref_grads]) for g in (grads, ref_grads)]
    assert _snr_db(*flat) > 17
    ran = {prim for prim, _, _ in dispatch.stats()}
    assert {"gemm_fp8", "grouped_gemm_fp8"} <= ran and "grouped_gemm" not in ran
