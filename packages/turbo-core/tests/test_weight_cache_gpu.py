"""The weight-quantization cache on the GPU (``@pytest.mark.gpu``), on the backends the dispatcher
picks there: gradient accumulation with and without the cache gives the same outputs, gradients
and weights bit for bit (dense and grouped, every FP8 granularity, bf16), and CUDA-graph capture
neither reads nor fills the cache, so a replay after the weight changes multiplies by the new
weight."""

from __future__ import annotations

import copy

import pytest
import torch

from turbo_core import Float8QuantConfig
from turbo_core.modules import Float8Linear, GroupedLinear
from turbo_core.ops.weight_cache import weight_cache_disabled

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

CONFIGS = {
    "TENSORWISE": Float8QuantConfig(),
    "ROWWISE": Float8QuantConfig(granularity="ROWWISE"),
    "BLOCKWISE": Float8QuantConfig(granularity="BLOCKWISE", block_size=128),
    "MX_BLOCKWISE": Float8QuantConfig(granularity="MX_BLOCKWISE"),
}
LENS = (200, 0, 311, 101)  # unaligned groups, an empty one, 12 rows past the last


def _make(grouped: bool, gran: str):
    torch.manual_seed(0)
    if grouped:
        return GroupedLinear(4, 512, 384, config=CONFIGS[gran], device="cuda", dtype=torch.bfloat16)
    return Float8Linear(512, 384, bias=False, config=CONFIGS[gran], device="cuda", dtype=torch.bfloat16)


def _train(mod, grouped: bool):
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    lens = torch.tensor(LENS, device="cuda")
    seen = []
    for _ in range(2):
        for _ in range(4):
            x = torch.randn(636, 512, device="cuda", generator=gen).bfloat16().requires_grad_()
            out = mod(x, lens) if grouped else mod(x)
            out.backward(torch.randn(out.shape, device="cuda", generator=gen).bfloat16())
            seen += [out.detach(), x.grad]
        seen.append(mod.weight.grad.clone())
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    return seen + [mod.weight.detach().clone()]


@pytest.mark.parametrize("gran", list(CONFIGS))
@pytest.mark.parametrize("grouped", [False, True], ids=["dense", "grouped"])
def test_accumulation_is_bit_identical(grouped, gran):
    cached = _make(grouped, gran)
    plain = copy.deepcopy(cached)
    plain.weight_cache = None
    got, want = _train(cached, grouped), _train(plain, grouped)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"tensor {i} differs"
    assert (cached.weight_cache.misses, cached.weight_cache.hits) == (2, 6)


@pytest.mark.parametrize("gran", list(CONFIGS))
def test_capture_neither_reads_nor_fills_the_cache(gran):
    mod = _make(False, gran)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            mod(x)  # warm-up outside the capture: selection, compilation, a cache entry
    torch.cuda.current_stream().wait_stream(side)
    counts = (mod.weight_cache.misses, mod.weight_cache.hits)
    assert counts == (1, 1)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = mod(x)
    assert (mod.weight_cache.misses, mod.weight_cache.hits) == counts
    with torch.no_grad():
        mod.weight.mul_(-0.75)
    graph.replay()
    with torch.no_grad(), weight_cache_disabled():
        want = mod(x)
    torch.cuda.synchronize()
    assert torch.equal(out, want)
