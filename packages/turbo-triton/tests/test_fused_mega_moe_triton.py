"""turbo_core's ``fused_mega_moe`` with every primitive it calls pinned to TRITON (Triton's
interpreter on the CPU; the compiled kernels on a GPU), forward and backward in bf16, against the
float64 loop over experts (``turbo_core.testing.mega_moe_reference``): routing with -1 slots and a
repeated id, an expert that gets no token."""

from __future__ import annotations

import torch

from turbo_core import dispatch, use_backend
from turbo_core.ops import fused_mega_moe
from turbo_core.testing import assert_close_normwise
from turbo_core.testing.mega_moe_reference import mega_moe_reference

F64 = torch.float64
T, H, INTER, E, K = 16, 32, 32, 4, 2


def _run(fn, data, dtype, dev):
    x, idx, w, w1, w2, gy = data
    ins = [x.detach().to(dev, dtype), idx.to(dev), w.detach().to(dev, F64 if dtype == F64 else torch.float32),
           w1.detach().to(dev, dtype), w2.detach().to(dev, dtype)]
    for i in (0, 2, 3, 4):
        ins[i].requires_grad_()
    y = fn(*ins)
    y.backward(gy.to(dev, dtype))
    return [t.detach().cpu() for t in (y, ins[0].grad, ins[2].grad, ins[3].grad, ins[4].grad)]


def test_all_primitives_on_triton():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(-1, E - 1, (T, K), generator=g)  # expert E - 1: no token
    idx[3] = 1  # a repeated id
    data = (torch.randn((T, H), generator=g, dtype=F64), idx, torch.rand((T, K), generator=g, dtype=F64),
            torch.randn((E, 2 * INTER, H), generator=g, dtype=F64) * H ** -0.5,
            torch.randn((E, H, INTER), generator=g, dtype=F64) * INTER ** -0.5,
            torch.randn((T, H), generator=g, dtype=F64))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    want = _run(mega_moe_reference, data, F64, "cpu")
    before = dispatch.stats()
    with use_backend("TRITON"):
        got = _run(lambda *a: fused_mega_moe(None, *a), data, torch.bfloat16, dev)
    ran = {key[:2] for key, n in dispatch.stats().items() if n > before.get(key, 0)}
    assert ran == {(p, "TRITON") for p in ("moe_permute_preprocess", "moe_permute", "tokens_per_expert_to_mask",
                                           "grouped_gemm", "grouped_gemm_variable_k", "swiglu_fwd", "swiglu_bwd",
                                           "moe_unpermute")}, ran
    for name, a, b in zip(("y", "grad x", "grad topk_weights", "grad w1", "grad w2"), got, want, strict=True):
        assert_close_normwise(a, b, dtype=torch.bfloat16, what=name)
