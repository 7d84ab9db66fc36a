"""The all-to-all backend's building blocks in one process, against loops written from the spec:
which rank each token goes to, the send order (rank-major, tokens ascending), the fixed slots of
the worst-case mode, the compaction of received slots, local ids, per-expert counts, the packed
byte rows (bit-exact for every dtype, fp8 included), and the one-process dispatch/combine."""

import pytest
import torch

from turbo_core import use_backend
from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs, MoeDispatchHandle
from turbo_core.ops import moe_combine, moe_dispatch
from turbo_deepep.all_to_all import combine as a2a_combine
from turbo_deepep.all_to_all import dispatch as a2a_dispatch
from turbo_deepep.all_to_all.exchange import group_reason
from turbo_deepep.all_to_all.layout import (
    compact_rows,
    count_pairs,
    local_indices,
    ordered_rows,
    slot_rows,
    token_in_rank,
)
from turbo_deepep.all_to_all.payload import RowFormat

FP8 = getattr(torch, "float8_e4m3fn", None)


def _routing(t, k, e, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, e, (t, k), generator=g)
    idx[torch.rand((t, k), generator=g) < 0.3] = -1
    if t:
        idx[0] = -1  # a token routed nowhere
    return idx


def _dest_sets(idx, e, world):
    per = e // world
    return [{int(v) // per for v in row if 0 <= int(v) < e} for row in idx]


# Shapes: T=0 and 1 (edges), 13 tokens over 2 and 4 ranks with top-1..3.
@pytest.mark.parametrize("t,k,world", [(0, 2, 2), (1, 1, 2), (13, 3, 2), (13, 2, 4), (9, 3, 4)])
def test_layout_against_loops(t, k, world):
    e = 2 * world
    idx = _routing(t, k, e, seed=t * 10 + k + world)
    dests = _dest_sets(idx, e, world)
    in_rank = token_in_rank(idx, e, world)
    assert in_rank.tolist() == [[d in s for d in range(world)] for s in dests]
    want_order = [tok for d in range(world) for tok in range(t) if d in dests[tok]]
    assert ordered_rows(in_rank, len(want_order)).tolist() == want_order
    for slot in (0, 2, t):
        got = slot_rows(in_rank, slot).tolist()
        want = []
        for d in range(world):
            mine = [tok for tok in range(t) if d in dests[tok]][:slot]
            want += mine + [-1] * (slot - len(mine))
        assert got == want


def test_compact_rows():
    valid = torch.tensor([False, True, True, False, True, False])
    recv_from, to_recv = compact_rows(valid, 4)
    assert recv_from.tolist() == [1, 2, 4, 6]  # 6 = N: a padding row
    assert to_recv.tolist() == [4, 0, 1, 4, 2, 4]  # 4 = R: goes nowhere
    recv_from, to_recv = compact_rows(valid, 2)  # a bound too small drops the third valid row
    assert recv_from.tolist() == [1, 2] and to_recv.tolist() == [2, 0, 1, 2, 2, 2]
    recv_from, to_recv = compact_rows(torch.zeros(0, dtype=torch.bool), 3)
    assert recv_from.tolist() == [0, 0, 0] and to_recv.tolist() == []


def test_local_ids_and_counts():
    ids = torch.tensor([[4, 5, -1], [7, 4, 4], [0, 1, 2], [-1, -1, -1]])
    local = local_indices(ids, rank=2, num_local_experts=2)
    assert local.tolist() == [[0, 1, -1], [-1, 0, 0], [-1, -1, -1], [-1, -1, -1]]
    # an id repeated in a row counts once; expert 1 has one row
    assert count_pairs(local, 2).tolist() == [2, 1]
    assert count_pairs(local[:0], 3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16] + ([FP8] if FP8 else []))
def test_packed_rows_are_bit_exact(dtype):
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, 256, (5, 6 * torch.empty((), dtype=dtype).element_size()), generator=g, dtype=torch.uint8)
    x = raw.view(dtype)  # every bit pattern, NaNs included
    scales = torch.randn(5, 2, generator=g)
    ids = torch.tensor([[1, -1], [0, 3], [-1, -1], [2, 2], [3, 0]], dtype=torch.int32)
    fmt = RowFormat([("x", dtype, 6), ("scales", torch.float32, 2), ("idx", torch.int32, 2)], pad_fill={"idx": 0xFF})
    rows = fmt.pack({"x": x, "scales": scales, "idx": ids}, 5, x.device, pad_row=True)
    assert rows.dtype == torch.uint8 and rows.shape == (6, fmt.row_bytes)
    assert torch.equal(fmt.unpack(rows[:5], "x").view(torch.uint8), raw)
    assert torch.equal(fmt.unpack(rows[:5], "scales"), scales)
    assert torch.equal(fmt.unpack(rows[:5], "idx"), ids)
    pad = rows[5:]
    assert not fmt.unpack(pad, "x").view(torch.uint8).any() and not fmt.unpack(pad, "scales").any()
    assert fmt.unpack(pad, "idx").tolist() == [[-1, -1]]
    assert torch.equal(fmt.pad_row(x.device), pad)


def test_gather_writes_rows_and_fills_padding_ids():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g).to(torch.bfloat16)  # 10-byte rows: 2-byte words
    probs = torch.rand(4, 3, generator=g)
    ids = torch.randint(-1, 6, (4, 3), generator=g, dtype=torch.int32)
    fmt = RowFormat([("x", torch.bfloat16, 5), ("probs", torch.float32, 3), ("idx", torch.int32, 3)],
                    pad_fill={"idx": 0xFF})
    assert fmt.row_bytes % 16 == 0 and all(f.start % 16 == 0 for f in fmt.fields.values())
    index = torch.tensor([2, -1, 0, 3, 3, -1])
    rows = fmt.gather({"x": x, "probs": probs, "idx": ids}, index, 4)
    keep = index >= 0
    assert torch.equal(fmt.unpack(rows, "x")[keep], x[index[keep]])
    assert torch.equal(fmt.view(rows, "probs")[keep], probs[index[keep]])
    assert fmt.unpack(rows, "idx")[~keep].eq(-1).all()
    assert torch.equal(fmt.unpack(rows, "idx")[keep], ids[index[keep]])
    pick = torch.tensor([3, 0])  # unpack a subset of rows in one pass
    assert torch.equal(fmt.unpack(rows, "x", pick), x[index[pick]])
    assert fmt.gather({"x": x, "probs": probs, "idx": ids}, index[:0], 4).shape == (0, fmt.row_bytes)


def test_one_process_matches_the_spec_layout():
    # group=None: R = max(T, num_worst_tokens), row t = token t (a token with no expert included)
    idx = torch.tensor([[0, 2], [1, -1], [3, 3], [-1, -1], [2, 0]])
    x = torch.arange(20, dtype=torch.float32).reshape(5, 4).requires_grad_()
    p = (torch.arange(10, dtype=torch.float32).reshape(5, 2) / 8).requires_grad_()
    with use_backend("DEEP_EP"):
        recv_x, recv_idx, recv_p, tpe, handle = moe_dispatch(x, idx, p, 4, None, num_worst_tokens=7)
        assert handle.backend == "DEEP_EP" and handle.num_recv == 7
        assert torch.equal(recv_x[:5], x.detach()) and not recv_x[5:].any()
        assert recv_idx.tolist() == idx.tolist() + [[-1, -1]] * 2
        assert torch.equal(recv_p[:5], torch.where(idx >= 0, p.detach(), 0)) and not recv_p[5:].any()
        assert tpe.tolist() == [2, 1, 2, 1]
        out = moe_combine(recv_x * 2, None, handle)
        assert torch.equal(out, 2 * x.detach())
        (out.sum() + (recv_p * 3).sum()).backward()
    assert torch.equal(x.grad, torch.full((5, 4), 2.0))
    assert torch.equal(p.grad, torch.where(idx >= 0, 3.0, 0.0))


def test_declines_foreign_handles():
    idx = torch.tensor([[0, 1]])
    x, p = torch.ones(1, 4), torch.ones(1, 2)
    with use_backend("TORCH"):
        handle = moe_dispatch(x, idx, p, 2).handle
    reason = a2a_combine.can_handle(MoeCombineArgs(x, handle))
    assert reason == "the handle was made by backend TORCH, not DEEP_EP"
    assert a2a_dispatch.can_handle(MoeDispatchArgs(x, None, None, None, 0, None, handle)) == reason
    compiled = MoeDispatchHandle("", None, 1, 1, 2, (torch.zeros(1, dtype=torch.int64),))
    assert "(compiled region)" in a2a_combine.can_handle(MoeCombineArgs(x, compiled))


def test_declines_cpu_tensors_on_a_gpu_only_group(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    reason = group_reason(object(), torch.device("cpu"))
    assert reason.startswith("the process group's backend nccl moves GPU tensors only")
    assert group_reason(object(), torch.device("cuda")) is None
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    assert group_reason(object(), torch.device("cpu")) is None
