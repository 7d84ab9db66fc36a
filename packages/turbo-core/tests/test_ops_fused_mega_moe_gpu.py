"""``fused_mega_moe`` on a GPU at a model-like shape (T=4096 tokens, H=2048, I=1408, top-8 of 8 or
32 experts, bf16), on the backends selection picks there: the output and the gradients of x,
topk_weights, w1 and w2 against the float64 loop over experts (``turbo_core.testing.mega_moe_reference``,
run on the GPU) by Primus-Turbo's gate for its bf16 mega MoE (SNR >= 40 dB, cosine >= 0.99) and the
normwise bf16 gate on the output; the whole forward and backward with no host sync
(``torch.cuda.set_sync_debug_mode("error")``, after a first call that loads the backends); the
FP8 recipes by SNR; the FP8 split form (``fused_mega_moe_fp8_stage1`` / ``_stage2``, MXFP8) with
Parameter weights, whose second call reuses the weights' FP8 copies. The CUDA-graph and compile-mode runs are the ``fused_mega_moe`` graph case."""

from __future__ import annotations

import pytest
import torch

from turbo_core import dispatch
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.ops import (
    advance_weight_generation,
    fused_mega_moe,
    fused_mega_moe_fp8,
    fused_mega_moe_fp8_stage1,
    fused_mega_moe_fp8_stage2,
)
from turbo_core.testing import assert_close_normwise, snr_db
from turbo_core.testing.host_sync import no_host_sync
from turbo_core.testing.mega_moe_reference import mega_moe_reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

NAMES = ("y", "grad x", "grad topk_weights", "grad w1", "grad w2")
T, H, INTER, K = 4096, 2048, 1408, 8


def _inputs(experts: int, tokens: int = T, seed: int = 0):
    """float64 on the GPU: softmax top-K routing of random logits (distinct ids), x, weights, grad_y."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn((tokens, experts), generator=g, device="cuda")
    w, idx = torch.topk(logits.softmax(-1), K, dim=-1)
    x = torch.randn((tokens, H), generator=g, device="cuda", dtype=torch.float64)
    w1 = torch.randn((experts, 2 * INTER, H), generator=g, device="cuda", dtype=torch.float64) * H ** -0.5
    w2 = torch.randn((experts, H, INTER), generator=g, device="cuda", dtype=torch.float64) * INTER ** -0.5
    gy = torch.randn((tokens, H), generator=g, device="cuda", dtype=torch.float64)
    return x, idx, w.double(), w1, w2, gy


def _leaves(data, dtype):
    x, idx, w, w1, w2, _ = data
    w = w.detach().to(torch.float64 if dtype == torch.float64 else torch.float32)
    return [x.detach().to(dtype).requires_grad_(), idx, w.requires_grad_(), w1.detach().to(dtype).requires_grad_(),
            w2.detach().to(dtype).requires_grad_()]


def _grads(y, ins, gy):
    y.backward(gy)
    return [y.detach()] + [ins[i].grad for i in (0, 2, 3, 4)]


def _reference(data):
    ins = _leaves(data, torch.float64)
    return _grads(mega_moe_reference(*ins), ins, data[5])


def _cosine(a, b):
    return torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


@pytest.mark.parametrize("experts", [8, 32])
def test_bf16_against_float64_and_no_host_sync(experts):
    data = _inputs(experts)
    warm = _leaves(data, torch.bfloat16)  # the first call loads the plugins, compiles and tunes kernels
    _grads(fused_mega_moe(None, *warm), warm, data[5].bfloat16())
    ins = _leaves(data, torch.bfloat16)
    gy = data[5].bfloat16()
    with no_host_sync():
        got = _grads(fused_mega_moe(None, *ins), ins, gy)
    want = _reference(data)
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert snr_db(b, a) >= 40.0 and _cosine(a, b) >= 0.99, (name, snr_db(b, a), _cosine(a, b))
    assert_close_normwise(got[0], want[0], what="y")


_FP8 = {
    "tensorwise": Float8QuantConfig(),
    "rowwise": Float8QuantConfig(granularity=ScalingGranularity.ROWWISE),
    "blockwise": Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128),
    "mx": Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE),
}


@pytest.mark.parametrize("recipe", list(_FP8))
def test_fp8_recipes(recipe):
    data = _inputs(8, tokens=1024, seed=1)
    ins = _leaves(data, torch.bfloat16)
    got = _grads(fused_mega_moe_fp8(None, *ins, config=_FP8[recipe]), ins, data[5].bfloat16())
    want = _reference(data)
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert snr_db(b, a) >= 20.0, (name, snr_db(b, a))  # E4M3, two chained FP8 GEMMs (see the CPU test)


def _weight_quantizations():
    return sum(n for (prim, _b, _h), n in dispatch.stats().items() if prim == "quantize_fp8_with_trans")


def test_fp8_stages_reuse_the_weights_fp8_copies():
    data = _inputs(8, tokens=1024, seed=2)
    x, idx, w, w1, w2, gy = data
    w1p, w2p = torch.nn.Parameter(w1.bfloat16()), torch.nn.Parameter(w2.bfloat16())
    advance_weight_generation()
    runs = []
    for _ in range(2):
        before = _weight_quantizations()
        ins = [x.bfloat16().requires_grad_(), idx, w.float().requires_grad_(), w1p, w2p]
        l1_out, dispatch_weights, handle, state = fused_mega_moe_fp8_stage1(*ins[:4], None)
        y = fused_mega_moe_fp8_stage2(l1_out, dispatch_weights, handle, state, idx, ins[2], w2p, None)
        runs.append((_grads(y, ins, gy.bfloat16()), _weight_quantizations() - before))
        w1p.grad = w2p.grad = None
    assert [n for _, n in runs] == [2, 0]  # MX: one call per weight (row and column copies), first call only
    want = _reference(data)
    for got, _ in runs:
        for name, a, b in zip(NAMES, got, want, strict=True):
            assert snr_db(b, a) >= 20.0, (name, snr_db(b, a))
    advance_weight_generation()
