"""End-to-end parity of ``turbo demo``'s model on the TRITON backend, on the CPU through Triton's
interpreter (``TRITON_INTERPRET=1``, set by this package's conftest).

The turbo decoder (``turbo_core.demo.TurboDecoder``) is trained with every primitive it calls that
TRITON serves pinned to TRITON (gemm, grouped gemm and its variable-K wgrad, attention, RMSNorm,
SwiGLU, the MoE router and permutation; with FP8 also quantize and the FP8 GEMMs), forward and
backward. The oracle is the same model in plain PyTorch (``turbo_core.demo.PlainDecoder``) in
float64, loaded with the same initial weights and fed the same Markov-chain batches, trained with
the same AdamW. A tiny config and three steps keep the interpreter under ~40 s on two cores.

Variants (the interpreter's ``tl.dot`` on two bf16 operands is wrong, so bf16 is not one of them;
fp32, fp16 and fp8 operands are right):

* fp32 model: every loss within ``tolerance(float32)`` (rtol 1e-4) of the float64 oracle;
  measured ~1e-7. The losses are fp32 means of fp32 cross-entropies, so fp32 rounding of the
  kernels' outputs (and of three AdamW updates) is all that separates them.
* fp16 compute, fp32 master weights: within ``tolerance(float16)`` (rtol 1e-2); measured ~1.4e-5.
  Every primitive sees fp16 tensors (the fp16 kernel paths: fp32 accumulation, fp16 rounding of
  outputs), the optimizer updates fp32 parameters (AdamW on fp16 parameters is NaN by step 2 in
  plain PyTorch too: its eps 1e-8 rounds to 0 in fp16).
* FP8 E4M3 tensorwise (fp32 model): within 2e-2 of the float64 oracle, the FP8 band of
  turbo-core's reference parity test (``test_demo_parity.py``); measured ~4e-3.
"""

from __future__ import annotations

import pytest
import torch

from turbo_core.demo import DemoConfig, PlainDecoder, TurboDecoder, fp8_recipe, train
from turbo_core.dispatch import use_backend
from turbo_core.plugins.host import get_host
from turbo_core.testing import tolerance

# Tiny on purpose: the interpreter runs each program instance in numpy. Two layers still give one
# dense and one MoE block; head dim 8; 16 tokens x top-2 over 4 experts.
CFG = DemoConfig(vocab=32, d_model=16, layers=2, heads=2, ffn=32, experts=4, topk=2, expert_ffn=16)
RUN = {"steps": 3, "batch": 2, "seq": 8}
FP8_BAND = 2e-2  # the FP8 band of turbo-core's test_demo_parity.py; measured ~4e-3 here
# What the demo must have run on TRITON, backward primitives included (the pin must reach them).
MUST_RUN = ("gemm", "attention_fwd", "attention_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "swiglu_fwd", "swiglu_bwd",
            "moe_routing_fwd", "moe_routing_bwd", "moe_permute", "moe_unpermute", "grouped_gemm",
            "grouped_gemm_variable_k")


def _triton_primitives() -> tuple[str, ...]:
    host = get_host()
    host.ensure_loaded()
    record = host.registry.backend("TRITON")
    if record is None:
        pytest.skip("backend TRITON is not installed")
    reason = record.unavailable_reason()
    if reason:
        pytest.skip(f"TRITON unavailable here: {reason}")
    return tuple(sorted(host.registry.primitives_of("TRITON")))


class MixedPrecision(torch.nn.Module):
    """Runs ``module`` with ``dtype`` copies of its fp32 parameters (``torch.func.functional_call``):
    the forward and backward are in ``dtype``, the gradients flow through the casts into the fp32
    parameters, which the optimizer updates (what autocast does for a plain-PyTorch model)."""

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.module, self.compute = module, dtype

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        params = {name: p.to(self.compute) for name, p in self.module.named_parameters()}
        return torch.func.functional_call(self.module, params, (tokens,))


def _twins(fp8: str = "none") -> tuple[TurboDecoder, PlainDecoder]:
    torch.manual_seed(0)
    turbo = TurboDecoder(CFG, fp8_recipe(fp8))
    plain = PlainDecoder(CFG)
    plain.load_state_dict(turbo.state_dict(), strict=True)  # the same initial weights
    return turbo, plain


@pytest.fixture(scope="module")
def oracle_losses() -> list[float]:
    _, plain = _twins()
    losses = train(CFG, model=plain, dtype=torch.float64, **RUN).losses
    assert losses[-1] < 0.97 * losses[0], losses  # the compared curve really moves
    return losses


def _train_on_triton(model: torch.nn.Module):
    # Pin every primitive TRITON registers; any the demo calls that it would decline raises with
    # TRITON's reason (never a silent fallback). use_backend's pin is a context variable of this
    # thread: on the CPU autograd runs the backward on the calling thread, so the pin holds for
    # the backward primitives too (on a GPU autograd would use a device worker thread; there, wrap
    # the backward in torch.autograd.set_multithreading_enabled(False)). The calls table checks it.
    with use_backend("TRITON", primitives=_triton_primitives()):
        return train(CFG, model=model, **RUN)


def _max_rel(actual: list[float], reference: list[float]) -> float:
    return max(abs(a - r) / abs(r) for a, r in zip(actual, reference, strict=True))


def _check_calls(calls: dict[tuple[str, str], int], must_run: tuple[str, ...]) -> None:
    assert {backend for _, backend in calls} == {"TRITON"}, sorted(calls)
    for prim in must_run:
        assert calls.get((prim, "TRITON"), 0) > 0, (prim, sorted(calls))


def test_fp32_triton_matches_plain_pytorch(oracle_losses):
    turbo, _ = _twins()
    result = _train_on_triton(turbo)
    rtol, _ = tolerance(torch.float32)
    rel = _max_rel(result.losses, oracle_losses)
    assert rel < rtol, (rel, result.losses, oracle_losses)
    _check_calls(result.calls, MUST_RUN)


def test_fp16_compute_triton_matches_plain_pytorch(oracle_losses):
    turbo, _ = _twins()
    result = _train_on_triton(MixedPrecision(turbo, torch.float16))
    rtol, _ = tolerance(torch.float16)
    rel = _max_rel(result.losses, oracle_losses)
    assert rel < rtol, (rel, result.losses, oracle_losses)
    _check_calls(result.calls, MUST_RUN)
    assert all(p.dtype == torch.float32 for p in turbo.parameters())  # fp32 masters, updated
    assert result.losses[-1] < result.losses[0]


def test_fp8_tensorwise_triton_stays_in_band(oracle_losses):
    turbo, _ = _twins("tensorwise")
    result = _train_on_triton(turbo)
    rel = _max_rel(result.losses, oracle_losses)
    assert rel < FP8_BAND, (rel, result.losses, oracle_losses)
    fp8_prims = tuple(p for p in MUST_RUN if p not in ("gemm", "grouped_gemm", "grouped_gemm_variable_k"))
    _check_calls(result.calls, (*fp8_prims, "quantize_fp8", "gemm_fp8", "grouped_gemm_fp8",
                                "grouped_gemm_fp8_variable_k"))
    assert ("gemm", "TRITON") not in result.calls  # every projection went through FP8
