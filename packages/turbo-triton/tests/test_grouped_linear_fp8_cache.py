"""``GroupedLinear`` with a ROWWISE FP8 config on TRITON (interpreter): a weight quantized once into its
cache, its dgrad copy K-major, trains bit for bit like the same layer quantizing per call (both copies
in the stored layout); three micro-batches a step, two steps."""

from __future__ import annotations

import copy

import pytest
import torch

from turbo_core import use_backend
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.modules import GroupedLinear

LENS = (5, 0, 11)


def _train(mod: GroupedLinear) -> list[torch.Tensor]:
    opt = torch.optim.SGD(mod.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    lens = torch.tensor(LENS, dtype=torch.int64)
    seen = []
    for _ in range(2):
        for _ in range(3):
            x = torch.randn(sum(LENS) + 2, mod.in_features, generator=gen).to(torch.bfloat16).requires_grad_()
            out = mod(x, lens)
            out.backward(torch.randn(out.shape, generator=gen).to(torch.bfloat16))
            seen += [out.detach(), x.grad]
        seen.append(mod.weight.grad.clone())
        opt.step()
        opt.zero_grad()
    return seen + [mod.weight.detach().clone()]


@pytest.mark.parametrize("fmt", ["E4M3", "HYBRID"])
def test_cached_k_major_dgrad_copy_trains_like_the_stored_layout(fmt):
    torch.manual_seed(0)
    cached = GroupedLinear(3, 32, 48, dtype=torch.bfloat16, config=Float8QuantConfig(granularity="ROWWISE", format=fmt))
    plain = copy.deepcopy(cached)
    plain.weight_cache = None
    with use_backend("TRITON"):
        got, want = _train(cached), _train(plain)
    assert cached.weight_cache.misses == 2 and cached.weight_cache.hits == 4
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
