"""TRITON sparse MLA under the CPU interpreter, beyond the conformance cases and property tests
(which run it through ``test_conformance_triton.py`` / ``test_properties_triton.py``): every token
selecting the same few rows (the fp32 atomics that sum ``dkv`` collide on every slot), strided
``out`` / ``dout`` / ``lse`` at the primitive, the capability check's reasons, and the tile override."""

from __future__ import annotations

import pytest
import torch

from turbo_core import BackendError, use_backend
from turbo_core.dispatch import call
from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs
from turbo_core.ops import sparse_mla_func
from turbo_core.testing import assert_close_normwise, assert_close_to_reference
from turbo_core.testing.cases.sparse_mla import reference


def _leaves(*tensors):
    return [t.detach().double().requires_grad_() if t is not None else None for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_colliding_rows_sum_every_contribution(dtype):
    g = torch.Generator().manual_seed(3)
    t, h, d, rank, num_kv = 19, 5, 24, 16, 7
    q = torch.randn(t, h, d, generator=g).to(dtype)
    kv = torch.randn(num_kv, d, generator=g).to(dtype)
    idx = torch.tensor([[2, 5, 2, -1, 5, 2, 9, 5, 2, 2, 5, -1, 2, 5, 2, 5, 2]], dtype=torch.int32).expand(t, -1)
    sink = torch.randn(h, generator=g)
    dout = torch.randn(t, h, rank, generator=g).to(dtype)
    q64, kv64, s64 = _leaves(q, kv, sink)
    out64, lse64 = reference(q64, kv64, idx.long(), s64, rank, d ** -0.5)
    out64.backward(dout.double())

    leaves = [x.clone().requires_grad_() for x in (q, kv, sink)]
    with use_backend("TRITON"):
        out, lse = sparse_mla_func(leaves[0], leaves[1], idx.contiguous(), leaves[2], kv_lora_rank=rank,
                                   return_lse=True)
        out.backward(dout)
    assert_close_to_reference(out, out64, dtype=dtype, what="out")
    assert_close_to_reference(lse, lse64, dtype=dtype, what="lse")
    gate = assert_close_to_reference if dtype == torch.float32 else assert_close_normwise
    for what, got, want in (("dq", leaves[0].grad, q64.grad), ("dkv", leaves[1].grad, kv64.grad),
                            ("dsink", leaves[2].grad, s64.grad)):
        gate(got, want, dtype=dtype, what=what)
    assert torch.equal(leaves[1].grad[[0, 1, 3, 4, 6]], torch.zeros(5, d, dtype=dtype))  # rows nobody selects


def test_strided_out_dout_and_lse_at_the_primitive():
    g = torch.Generator().manual_seed(4)
    t, h, d, rank, num_kv = 6, 3, 20, 16, 9
    q = torch.randn(t, h, d, generator=g)
    kv = torch.randn(num_kv, 1, d, generator=g)
    idx = torch.randint(-1, num_kv, (t, 5), generator=g, dtype=torch.int64)
    fwd = SparseMlaFwdArgs(q, kv, idx, kv_lora_rank=rank)
    with use_backend("TRITON"):
        out, lse = call("sparse_mla_fwd", fwd)
    dout = torch.randn(t, h, rank, generator=g)
    wide = [torch.zeros(h, t, rank + 4), torch.zeros(h, t, rank + 4), torch.zeros(h, t + 3)]
    wide[0][:, :, :rank] = out.transpose(0, 1)
    wide[1][:, :, :rank] = dout.transpose(0, 1)
    wide[2][:, :t] = lse.t()
    s_out, s_dout, s_lse = wide[0][:, :, :rank].transpose(0, 1), wide[1][:, :, :rank].transpose(0, 1), \
        wide[2][:, :t].t()
    args = [SparseMlaBwdArgs(d_, q, kv, o, l_, idx, kv_lora_rank=rank) for d_, o, l_ in
            ((dout, out, lse), (s_dout, s_out, s_lse))]
    with use_backend("TRITON"):
        plain, strided = (call("sparse_mla_bwd", a) for a in args)
    for a, b in zip(plain[:2], strided[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_capability_check_names_what_it_does_not_serve(monkeypatch):
    q = torch.zeros(2, 1, 700)
    kv = torch.zeros(3, 700)
    idx = torch.zeros(2, 4, dtype=torch.int32)
    with use_backend("TRITON"), pytest.raises(BackendError, match="kv_lora_rank up to 512.*got 600 and 100"):
        call("sparse_mla_fwd", SparseMlaFwdArgs(q, kv, idx, kv_lora_rank=600))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with use_backend("TRITON"), pytest.raises(BackendError, match="CPU tensors need TRITON_INTERPRET=1"):
        call("sparse_mla_fwd", SparseMlaFwdArgs(q, kv, idx, kv_lora_rank=512))


def test_tile_override(monkeypatch):
    from turbo_triton.sparse_mla import launch

    assert launch._tile("fwd", "interpreter", 128, 2).block_m == 16
    assert launch._tile("fwd", "sm90", 128, 2) == launch._GPU["fwd"]
    assert launch._tile("fwd", "sm90", 3, 2).block_m == 16  # at most the next power of two of the heads
    assert launch._tile("bwd", "sm90", 128, 4).block_m == launch._GPU["bwd"].block_m // 2  # fp32
    monkeypatch.setenv(launch.TILES_ENV, "fwd=32,16,4,3;bwd=16,64,4,1")
    assert launch._tile("fwd", "sm90", 128, 2) == launch.Tile(32, 16, 4, 3)
    assert launch._tile("bwd", "gfx942", 128, 2) == launch.Tile(16, 64, 4, 1)
    monkeypatch.setenv(launch.TILES_ENV, "fwd=32,16")
    with pytest.raises(ValueError, match="TURBO_TRITON_SPARSE_MLA_TILES: fwd= needs 4 ints"):
        launch._tile("fwd", "sm90", 128, 2)
