"""``moe_dispatch`` / ``moe_combine`` inside ``torch.compile`` in one process with DEEP_EP selected
(the GPU default where turbo-deepep is installed; set here): DEEP_EP serves eager single-process dispatch, but a compiled region carries the handle as its
source-token tensor, so the region's dispatch must still give the eager results (in one process
row t is token t, so dispatch, doubling and combine give 2x exactly)."""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch import GlobalBackendManager, stats
from turbo_core.ops import moe_combine, moe_dispatch


def _roundtrip(x, idx, probs):
    recv_x, recv_idx, recv_probs, tpe, handle = moe_dispatch(x, idx, probs, 4)
    return moe_combine(recv_x * 2.0, None, handle), recv_idx, recv_probs, tpe


@pytest.fixture
def deep_ep_selected():
    GlobalBackendManager.set_moe_dispatch_combine_backend("DEEP_EP")
    yield
    GlobalBackendManager.set_moe_dispatch_combine_backend(None)


def test_compiled_dispatch_and_combine_match_eager_in_one_process(deep_ep_selected):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=gen, dtype=torch.float32)
    idx = torch.tensor([[0, 1], [2, -1], [3, 0], [1, 2], [-1, -1], [0, 3]])
    probs = torch.rand(6, 2, generator=gen, dtype=torch.float32)
    before = stats()
    eager = _roundtrip(x, idx, probs)
    served = {b for (p, b, _how), n in stats().items() if p == "moe_dispatch" and n > before.get((p, b, _how), 0)}
    assert served == {"DEEP_EP"}  # what runs eagerly here
    compiled = torch.compile(_roundtrip, backend="aot_eager", fullgraph=True)(x, idx, probs)
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(eager[0], 2.0 * x, rtol=0, atol=0)  # every row is its token's one copy
