"""GPU correctness of the TRITON sparse MLA at DeepSeek-V3.2's shapes (``@pytest.mark.gpu``; skipped
without a GPU; run with ``TRITON_INTERPRET=0``, see ``gpu_support``).

``q [T, H, 576]``, ``kv [num_kv, 1, 576]`` (values: the first 512 channels), top-2048 causal indices
(``testing.cases.sparse_mla.causal_topk_indices``: the first 2047 tokens pad with ``-1``), bf16, 64
and 128 heads at 4096 tokens, a sink; plus odd sizes (heads not a multiple of a tile, top-k not a
multiple of a tile, out-of-range and repeated indices, all-invalid rows) in bf16, fp16 and fp32.
The oracle is float64 math on the same GPU (``testing.cases.sparse_mla.gathered_reference``: token
blocks gathered by index, the spec's formula).
Before every launch the allocator's free memory is filled with NaN, so an element a kernel forgets
to write shows up. Gates: ``out`` element-wise at the dtype's tolerance, ``lse`` at 1e-4 (fp32 sums;
exact products), ``dq``/``dkv`` normwise (P and dS are rounded to the input dtype), ``dsink`` normwise
(it sums ``rowsum(dout * out)`` over the tokens, ``out`` rounded to the input dtype).
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, poison_free_memory

from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs
from turbo_core.testing import assert_close_normwise, assert_close_to_reference
from turbo_core.testing.cases.sparse_mla import causal_topk_indices, gathered_reference

pytestmark = [pytest.mark.gpu, COMPILED]

# name -> (T, H, num_kv, topk, d_qk, kv_lora_rank, sink, dtype, index pattern)
SHAPES = {
    "dsv32-h128-t4096-k2048": (4096, 128, 4096, 2048, 576, 512, False, torch.bfloat16, "causal"),
    "dsv32-h64-t4096-k2048-sink": (4096, 64, 4096, 2048, 576, 512, True, torch.bfloat16, "causal"),
    "dsv32-h16-t1000-kv9000-k2048": (1000, 16, 9000, 2048, 576, 512, False, torch.bfloat16, "causal"),
    "odd-h20-k777-bf16": (1000, 20, 3001, 777, 576, 512, True, torch.bfloat16, "mixed"),
    "odd-h20-k777-fp16": (513, 20, 3001, 777, 576, 512, False, torch.float16, "mixed"),
    "odd-h7-k300-d192x128-fp32": (257, 7, 1001, 300, 192, 128, True, torch.float32, "mixed"),
}


@pytest.fixture(scope="module")
def launch():
    from turbo_triton.sparse_mla import launch as module

    return module


def _indices(t, num_kv, topk, pattern, gen):
    if pattern == "causal":
        return causal_topk_indices(t, num_kv, topk, gen)
    idx = torch.randint(-3, num_kv + 3, (t, topk), generator=gen, device=DEV, dtype=torch.int32)
    idx[::7] = -1  # rows that select nothing
    idx[1::5, : topk // 2] = idx[1::5, topk // 2: 2 * (topk // 2)]  # repeated rows
    return idx


@pytest.mark.parametrize("name", list(SHAPES))
def test_forward_and_backward_against_float64(launch, name):
    t, h, num_kv, topk, d, rank, with_sink, dtype, pattern = SHAPES[name]
    gen = torch.Generator(device=DEV).manual_seed(0)
    q = torch.randn(t, h, d, generator=gen, device=DEV).to(dtype)
    kv = torch.randn(num_kv, 1, d, generator=gen, device=DEV).to(dtype)
    idx = _indices(t, num_kv, topk, pattern, gen)
    sink = torch.randn(h, generator=gen, device=DEV) if with_sink else None
    dout = torch.randn(t, h, rank, generator=gen, device=DEV).to(dtype)
    scale = d ** -0.5
    want_out, want_lse, want_dq, want_dkv, want_dsink = gathered_reference(q, kv[:, 0], idx, sink, dout, rank,
                                                                           scale)

    poison_free_memory()
    out, lse = launch.sparse_mla_fwd(SparseMlaFwdArgs(q, kv, idx, sink, rank))
    assert_close_to_reference(out, want_out, dtype=dtype, what="out")
    assert torch.equal(torch.isfinite(lse), torch.isfinite(want_lse)), "lse: the rows that see nothing differ"
    fin = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[fin].double(), want_lse[fin], rtol=1e-4, atol=1e-4, msg=lambda m: f"lse: {m}")

    poison_free_memory()
    dq, dkv, dsink = launch.sparse_mla_bwd(SparseMlaBwdArgs(dout, q, kv, out, lse, idx, sink, rank))
    assert dq.dtype == dtype and dkv.shape == kv.shape and dkv.dtype == dtype
    assert_close_normwise(dq, want_dq, dtype=dtype, what="dq")
    assert_close_normwise(dkv[:, 0], want_dkv, dtype=dtype, what="dkv")
    if with_sink:
        assert_close_normwise(dsink, want_dsink, dtype=dtype, what="dsink")
    else:
        assert dsink is None
