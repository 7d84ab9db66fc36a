"""The converted tiny models with every turbo primitive pinned to TRITON (the Triton interpreter on
the CPU, ``TRITON_INTERPRET=1``): logits and gradients against TorchTitan's own model."""

from __future__ import annotations

import copy
import os

import pytest
import torch

_REQUIRED = os.environ.get("TURBO_TORCHTITAN_TESTS") == "1"
if _REQUIRED:
    import torchtitan  # noqa: F401  (nox -s integrations-torchtitan: missing is an error, not a skip)

    import turbo_triton  # noqa: F401
else:
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (nox -s integrations-torchtitan runs this)")
    pytest.importorskip("turbo_triton", reason="turbo-triton is not installed (nox -s integrations-torchtitan runs this)")

import torchtitan_tiny as tiny  # noqa: E402

from turbo_core import dispatch, use_backend  # noqa: E402
from turbo_core.integrations.torchtitan import TurboConverter  # noqa: E402

FP32_TOL = 1e-4


def _interpretable() -> str | None:
    """Why the Triton kernels cannot run on the CPU in this process, or None. torchtitan imports
    triton itself, so TRITON_INTERPRET=1 must be set before the process starts."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "TRITON_INTERPRET=1 is not set (torchtitan imported triton for a GPU)"
    return None


@pytest.fixture
def triton(use_plugins):
    why = _interpretable()
    if why is not None:
        if _REQUIRED:
            pytest.fail(why)
        pytest.skip(why)
    use_plugins("turbo_triton.plugin")


@pytest.mark.parametrize("name", ["llama3", "qwen3", "deepseek_v3"])
def test_triton_backend_matches_torchtitan(triton, name):
    """Llama-3 dense causal; Qwen3 with turbo routing over packed documents (varlen attention);
    DeepSeek-V3 MLA (v head dim != qk) with group-limited sigmoid routing and a shared expert."""
    if name == "llama3":
        stock_cfg = tiny.llama3()
    elif name == "qwen3":
        stock_cfg = tiny.qwen3(load_balance=None)
    else:
        stock_cfg = tiny.deepseek_v3_tiny(load_balance=None, mtp=False)
    turbo_cfg = TurboConverter.Config().build().convert(tiny.with_inner(copy.deepcopy(stock_cfg), "flex"))
    ref = tiny.build(tiny.float64_experts(stock_cfg))
    model = tiny.build(turbo_cfg, seed=2)
    tiny.copy_params(ref, model)
    tokens, labels = tiny.batch(b=1, seq=8)
    kwargs = {}
    if name == "qwen3":  # two documents: 5 and 3 tokens
        positions = torch.cat([torch.arange(5), torch.arange(3)])[None]
        kwargs = {"positions": positions, "attention_masks": model.get_attention_masks(positions)}
        ref_logits = torch.cat([ref(tokens[:, :5]), ref(tokens[:, 5:])], dim=1)
        loss = torch.nn.functional.cross_entropy(ref_logits.flatten(0, 1), labels.flatten())
        ref.zero_grad()
        loss.backward()
        ref_logits, ref_grads = [ref_logits.detach()], {n: p.grad for n, p in ref.named_parameters()}
    else:
        ref_logits, ref_grads = tiny.step(ref, tokens, labels)
    with use_backend("TRITON"):
        logits, grads = tiny.step(model, tokens, labels, **kwargs)
    for got, want in zip(logits, ref_logits, strict=True):
        assert tiny.rel_err(got, want) < FP32_TOL
    for fqn, want in ref_grads.items():
        assert tiny.rel_err(grads[fqn], want) < FP32_TOL, fqn
    backends = {backend for _, backend, _ in dispatch.stats()}
    prims = {prim for prim, _, _ in dispatch.stats()}
    assert backends == {"TRITON"}
    assert {"gemm", "rmsnorm_fwd", "rmsnorm_bwd", "attention_fwd", "attention_bwd"} <= prims
    if name != "llama3":
        assert {"moe_routing_fwd", "moe_permute", "grouped_gemm", "swiglu_fwd", "moe_unpermute"} <= prims
