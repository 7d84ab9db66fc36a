"""apply_turbo on tiny random models of every supported architecture, on the reference backend
TORCH in fp32: the logits and every parameter's gradient of the LM loss against the unpatched
model run in float64 (SDPA attention, transformers' per-expert ``"eager"`` loop), and the turbo
primitives each architecture must have run. FP8 tensorwise on a dense and an MoE model: the
logits' SNR against the same oracle."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5")

from hf_tiny import ARCHS, MOE_ARCHS, assert_grads_close, build, loss_and_grads, max_rel, tokens, twin  # noqa: E402

from turbo_core.dispatch import stats  # noqa: E402
from turbo_core.integrations.transformers import apply_turbo  # noqa: E402
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity  # noqa: E402
from turbo_core.testing import tolerance  # noqa: E402
from turbo_core.testing.numerics import SNR_DB, snr_db  # noqa: E402

RTOL = tolerance(torch.float32)[0]  # of the largest reference magnitude; measured ~1e-6

#: The primitives every patched model runs (forward and backward), by architecture family.
DENSE_PRIMS = {"gemm", "rmsnorm_fwd", "rmsnorm_bwd", "attention_fwd", "attention_bwd", "swiglu_fwd", "swiglu_bwd",
               "cross_entropy_fwd", "cross_entropy_bwd"}
MOE_PRIMS = {"moe_permute", "moe_unpermute", "grouped_gemm", "grouped_gemm_variable_k"}
ROUTER_PRIMS = {"moe_routing_fwd", "moe_routing_bwd"}


def _ran() -> set[str]:
    return {prim for (prim, backend, _how), n in stats().items() if n and backend == "TORCH"}


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_grads_match_unpatched_float64(arch):
    model = build(arch)
    oracle = twin(model).double()
    ids = tokens()
    ref_logits, ref_grads = loss_and_grads(oracle, ids)
    report = apply_turbo(model)
    assert report.count("attention") == model.config.num_hidden_layers
    logits, grads = loss_and_grads(model, ids)
    err = max_rel(logits, ref_logits)
    assert err <= RTOL, f"logits: max error {err:.2e} of max |logit|"
    assert_grads_close(grads, ref_grads, RTOL)
    want = DENSE_PRIMS | (MOE_PRIMS if arch in MOE_ARCHS else set())
    if arch in ("mixtral", "qwen3_moe"):
        want |= ROUTER_PRIMS
    assert want <= _ran(), sorted(want - _ran())


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe"])
def test_fp8_tensorwise_logits_snr(arch):
    model = build(arch)
    oracle = twin(model).double()
    ids = tokens()
    with torch.no_grad():
        ref = oracle(ids).logits
    recipe = Float8QuantConfig(granularity=ScalingGranularity.TENSORWISE)
    report = apply_turbo(model, fp8=recipe)
    assert report.count("float8_linear") > 0 and report.count("linear") == 0
    with torch.no_grad():
        got = model(ids).logits
    ran = {prim for (prim, _b, _h) in stats()}
    assert {"gemm_fp8", "quantize_fp8"} <= ran
    if arch == "qwen3_moe":
        assert "grouped_gemm_fp8" in ran
    assert snr_db(ref, got) >= SNR_DB["E4M3"]
