"""A subset of the parity tests on TRITON's kernels, run on the CPU by Triton's interpreter
(``TRITON_INTERPRET=1``, which the ``integrations-hf`` nox session sets; without it the tests
skip): a dense (Llama) and an MoE (Qwen3-MoE) tiny model, and DeepSeek-V3 (its attention's q/k and
v head dims differ), every turbo primitive they call pinned to TRITON, forward and backward, the
logits and every gradient against the unpatched model in float64. One sequence of 4 tokens keeps
the interpreter fast."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("transformers", minversion="5")

from hf_tiny import assert_grads_close, build, loss_and_grads, max_rel, tokens, twin  # noqa: E402

from turbo_core.dispatch import stats, use_backend  # noqa: E402
from turbo_core.integrations.transformers import apply_turbo  # noqa: E402
from turbo_core.plugins.host import get_host  # noqa: E402
from turbo_core.testing import tolerance  # noqa: E402

RTOL = tolerance(torch.float32)[0]
MUST_RUN = {"gemm", "attention_fwd", "attention_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "swiglu_fwd", "swiglu_bwd"}
MOE_MUST_RUN = {"moe_permute", "moe_unpermute", "grouped_gemm", "grouped_gemm_variable_k"}
ROUTER_MUST_RUN = {"moe_routing_fwd", "moe_routing_bwd"}


@pytest.fixture
def triton_primitives(use_plugins) -> tuple[str, ...]:
    pytest.importorskip("turbo_triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON's kernels on CPU tensors need TRITON_INTERPRET=1 (set before triton is imported)")
    use_plugins("turbo_triton.plugin")
    host = get_host()
    host.ensure_loaded()
    record = host.registry.backend("TRITON")
    assert record is not None, "turbo_triton.plugin did not register TRITON"
    reason = record.unavailable_reason()
    if reason:
        pytest.skip(f"TRITON unavailable here: {reason}")
    return tuple(sorted(host.registry.primitives_of("TRITON")))


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
def test_triton_logits_and_grads_match_unpatched_float64(arch, triton_primitives):
    model = build(arch)
    oracle = twin(model).double()
    ids = tokens(batch=1, seq=4)
    ref_logits, ref_grads = loss_and_grads(oracle, ids)
    apply_turbo(model)
    # the backward runs on this thread on the CPU, so the pin (a context variable) reaches it too
    with use_backend("TRITON", primitives=triton_primitives):
        logits, grads = loss_and_grads(model, ids)
    assert max_rel(logits, ref_logits) <= RTOL
    assert_grads_close(grads, ref_grads, RTOL)
    calls = {(prim, backend) for (prim, backend, _how), n in stats().items() if n}
    assert {backend for _, backend in calls} == {"TRITON"}, sorted(calls)
    want = MUST_RUN | (MOE_MUST_RUN if arch != "llama" else set()) | (ROUTER_MUST_RUN if arch == "qwen3_moe" else set())
    assert want <= {prim for prim, _ in calls}, sorted(want - {prim for prim, _ in calls})
