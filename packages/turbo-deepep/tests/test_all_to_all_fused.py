"""The fused path's kernels (turbo_deepep.all_to_all.fused, in Triton's interpreter on the CPU)
against the torch path's functions on the same inputs, bit for bit, including the edge cases the
distributed tests do not reach: a slot smaller than a rank's count (tokens not sent), fewer result
rows than valid received rows (rows dropped), out-of-range and repeated expert ids, fp8 rows with
scales, and random (not dyadic) values summed in the combine."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the fused path's kernels are Triton kernels")  # interpreted: conftest.py

from turbo_deepep.all_to_all import fused, layout  # noqa: E402
from turbo_deepep.all_to_all.combine import sum_rows  # noqa: E402
from turbo_deepep.all_to_all.dispatch import _format  # noqa: E402
from turbo_deepep.all_to_all.payload import RowFormat  # noqa: E402

FP8 = getattr(torch, "float8_e4m3fn", None)
# The compiled kernels where a GPU is, Triton's interpreter on the CPU otherwise (conftest.py)
DEV = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


@pytest.fixture(autouse=True)
def _fused_on_cpu(monkeypatch):
    monkeypatch.setenv("TURBO_DEEPEP_FUSED", "1")


def _routing(t, k, e, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(-2, e + 2, (t, k), generator=g)  # -2, -1, e, e+1: no expert
    idx[: max(1, t // 5), 1 % k] = idx[: max(1, t // 5), 0]  # repeated ids
    return idx


@pytest.mark.parametrize("t,k,world,slot", [(13, 4, 2, 13), (29, 3, 4, 5), (1, 1, 2, 1), (40, 8, 3, 40)])
def test_route_matches_the_torch_layout(t, k, world, slot):
    e = 4 * world
    idx = _routing(t, k, e, seed=t)
    slot_tok, pos, counts = (v.cpu() for v in fused.route(idx.to(DEV), e, world, slot))
    in_rank = layout.token_in_rank(idx, e, world)
    assert torch.equal(counts, in_rank.sum(dim=0))
    assert torch.equal(slot_tok.view(-1), layout.slot_rows(in_rank, slot))
    for d in range(world):  # pos is the inverse of the slot table
        sent = slot_tok[d][slot_tok[d] >= 0]
        want = torch.full((t,), -1, dtype=torch.int32)
        want[sent] = torch.arange(sent.shape[0], dtype=torch.int32)
        assert torch.equal(pos[:, d], want)


def test_route_carries_counts_across_steps(monkeypatch):
    """Tokens walked in several steps (a step of 8 tokens here; 2048 on a GPU): each step's rows
    continue the previous steps' count, and a slot shorter than the count stops the list."""
    monkeypatch.setattr(fused, "_SCAN", 8)
    t, k, world = 37, 3, 2
    e = 4 * world
    idx = _routing(t, k, e, seed=5)
    in_rank = layout.token_in_rank(idx, e, world)
    for slot in (t, 11):
        slot_tok, pos, counts = (v.cpu() for v in fused.route(idx.to(DEV), e, world, slot))
        assert torch.equal(counts, in_rank.sum(dim=0))
        assert torch.equal(slot_tok.view(-1), layout.slot_rows(in_rank, slot))
        for d in range(world):
            sent = slot_tok[d][slot_tok[d] >= 0]
            want = torch.full((t,), -1, dtype=torch.int32)
            want[sent] = torch.arange(sent.shape[0], dtype=torch.int32)
            assert torch.equal(pos[:, d], want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32] + ([FP8] if FP8 is not None else []))
def test_pack_matches_the_torch_gather(dtype):
    t, k, e, world, h = 11, 3, 8, 2, 16
    idx = _routing(t, k, e, seed=3)
    x = (torch.randn(t, h) * 3).to(dtype)
    scales = torch.rand(t, 2) if dtype == FP8 else None
    probs = torch.rand(t, k)
    fmt = _format(x, scales, k)
    valid = (idx >= 0) & (idx < e)
    torch_tensors = {"x": x, "scales": scales, "probs": probs, "idx": torch.where(valid, idx, -1).to(torch.int32)}
    fused_tensors = {"x": x, "scales": scales, "probs": probs, "idx": idx}
    rows = torch.tensor([3, -1, 0, 10, 7, -1, 5])
    got, _ = fused.pack(fmt, fused_tensors, rows.shape[0], t, rows=rows, num_experts=e)
    want = fmt.gather(torch_tensors, rows, t)
    real = rows >= 0
    _same_fields(fmt, got[real], want[real])
    ids = fmt.view(got, "idx")
    assert torch.equal(ids[~real], torch.full_like(ids[~real], -1))  # padding rows: ids -1, values 0
    assert not fmt.view(got, "x")[~real].view(torch.uint8).any()
    # slotted mode: rank-major rows from a slot table, and the send order it reports
    slot_tok, _, counts = fused.route(idx, e, world, t)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    got, order = fused.pack(fmt, fused_tensors, int(offs[-1]), t, slots=slot_tok, offs=offs, num_experts=e)
    in_rank = layout.token_in_rank(idx, e, world)
    ordered = layout.ordered_rows(in_rank, int(offs[-1]))
    assert torch.equal(order, ordered)
    _same_fields(fmt, got, fmt.gather(torch_tensors, ordered, t))


def _same_fields(fmt, a, b):
    """Every field's bytes equal (the alignment gaps between fields are never written or read)."""
    for name in fmt.fields:
        assert torch.equal(fmt.view(a, name).view(torch.uint8), fmt.view(b, name).view(torch.uint8)), name


@pytest.mark.parametrize("rows_out", [3, 9, 20])
def test_compact_and_unpack_match_the_torch_path(rows_out):
    n, k, e, world, h, rank = 17, 4, 8, 2, 8, 1
    e_l = e // world
    idx = _routing(n, k, e, seed=5)
    valid = (idx >= 0) & (idx < e)
    x = torch.randn(n, h).to(torch.bfloat16)
    probs = torch.rand(n, k)
    fmt = _format(x, None, k)
    buf = fmt.pack({"x": x, "probs": probs, "idx": torch.where(valid, idx, -1).to(torch.int32)}, n, x.device)
    recv_from, to_recv = fused.compact(buf, fmt, rank, e_l, rows_out)
    local_all = layout.local_indices(fmt.unpack(buf, "idx"), rank, e_l)
    want_from, want_to = layout.compact_rows((local_all >= 0).any(dim=1), rows_out)
    assert torch.equal(recv_from, want_from) and torch.equal(to_recv, want_to)
    rx, rs, local, rp, tpe = fused.unpack(buf, fmt, rows_out, recv_from, rank=rank, num_local=e_l)
    padded = torch.cat([buf, fmt.pad_row(x.device)])
    want_local = layout.local_indices(fmt.unpack(padded, "idx", recv_from), rank, e_l)
    assert rs is None
    assert torch.equal(rx, fmt.unpack(padded, "x", recv_from))
    assert torch.equal(local, want_local.long())
    want_p = fmt.unpack(padded, "probs", recv_from)
    assert torch.equal(rp, torch.where(want_local >= 0, want_p, torch.zeros_like(want_p)))
    assert torch.equal(tpe, layout.count_pairs(want_local, e_l))


@pytest.mark.parametrize("world,t,nw", [(2, 7, 14), (3, 9, 5), (3, 9, 40), (4, 6, 3), (2, 5, 9)])
@pytest.mark.parametrize("dtype", [torch.bfloat16] + ([FP8] if FP8 is not None else []))
def test_compacted_symmetric_worst_mode_matches_compact_then_unpack(world, t, nw, dtype):
    """The symmetric transport's worst mode (route storing the counts into every header, the packing
    kernel storing each row at its compacted place, this rank's own rows straight into the results,
    then the unpacking kernel) against the collective order of the same kernels (slots, one
    all-to-all, compact, unpack), for every rank of ``world`` simulated in one process: the same
    results and the same layout, bit for bit. Covers a slot smaller than a rank's count
    (``nw < t``), rows dropped past ``nw``, padding, and ranks sending others nothing."""
    from turbo_deepep.all_to_all import symm

    k, e, h = 3, 4 * world, 16
    e_l, slot = e // world, min(t, nw)
    g = torch.Generator().manual_seed(world * 100 + t + nw)
    data = []
    for r in range(world):
        idx = _routing(t, k, e, seed=r + 10 * world + nw)
        if r == world - 1:
            idx[:, :] = torch.randint(0, e_l, (t, k), generator=g)  # the last rank sends only to rank 0
        x = (torch.randn(t, h, generator=g) * 3).to(dtype)
        scales = torch.rand(t, 2, generator=g) if dtype == FP8 else None
        data.append(tuple(None if v is None else v.to(DEV) for v in (x, scales, torch.rand(t, k, generator=g), idx)))
    fmt = _format(data[0][0], data[0][1], k)
    tensors = [{"x": x, "scales": sc, "probs": p, "idx": idx} for x, sc, p, idx in data]
    # reference: slots through one (simulated) all-to-all, then compact and unpack
    sent = []
    for r in range(world):
        slot_tok, _, _ = fused.route(data[r][3], e, world, slot)
        buf, _ = fused.pack(fmt, tensors[r], world * slot, t, rows=slot_tok.view(-1), num_experts=e)
        sent.append(buf.view(world, slot, fmt.row_bytes))
    want = []
    for d in range(world):
        recv = torch.cat([sent[s][d] for s in range(world)])
        recv_from, to_recv = fused.compact(recv, fmt, d, e_l, nw)
        want.append((fused.unpack(recv, fmt, nw, recv_from, rank=d, num_local=e_l), recv_from, to_recv))
    # the symmetric transport's order, every rank's step before any rank's next one (the barriers)
    hdr = symm.header_bytes(world)
    bufs = [torch.full((hdr + world * slot * fmt.row_bytes,), 0xA5, dtype=torch.uint8, device=DEV)
            for _ in range(world)]
    peers = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64, device=DEV)
    slots = [fused.route(data[r][3], e, world, slot, put_counts=(peers, r))[0] for r in range(world)]
    put = fused.Put(peers, torch.zeros(world, dtype=torch.int64, device=DEV), hdr // 4)
    got = [fused.pack_compacted(fmt, tensors[r], slots[r], t, e, put, r, nw, e_l) for r in range(world)]
    for d in range(world):
        rows = bufs[d][hdr:].view(world * slot, fmt.row_bytes)
        res = fused.unpack(rows, fmt, nw, None, rank=d, num_local=e_l, into=got[d])
        (wx, ws, wl, wp, wt), wfrom, wto = want[d]
        assert torch.equal(res[0].view(torch.uint8), wx.view(torch.uint8)), f"rank {d}: x"
        assert (res[1] is None and ws is None) or torch.equal(res[1], ws), f"rank {d}: scales"
        for a, b, what in ((res[2], wl, "ids"), (res[3], wp, "probs"), (res[4], wt, "tokens per expert"),
                           (got[d].recv_from, wfrom, "recv_from"), (got[d].to_recv, wto, "to_recv")):
            assert torch.equal(a, b), f"rank {d}: {what}\n{a}\n{b}"
        n_valid = int((wfrom < world * slot).sum())
        assert got[d].offs[-1].item() == n_valid


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("acc", [torch.float32, torch.float64])
def test_reduce_matches_sum_rows(dtype, acc):
    t, k, world, slot, h = 9, 3, 3, 4, 24
    g = torch.Generator().manual_seed(7)
    pos = torch.randint(-1, slot, (t, world), generator=g).to(torch.int32)
    send_token = torch.full((world * slot,), -1, dtype=torch.int64)
    for tok in range(t):
        for d in range(world):
            if pos[tok, d] >= 0:
                if send_token[d * slot + pos[tok, d]] >= 0:  # one token per row: drop the clash
                    pos[tok, d] = -1
                else:
                    send_token[d * slot + pos[tok, d]] = tok
    fmt = RowFormat([("x", dtype, h), ("probs", torch.float32, k)])
    values = (torch.randn(world * slot, h, generator=g) * 100).to(dtype)
    probs = torch.rand(world * slot, k, generator=g)
    back = fmt.pack({"x": values, "probs": probs}, world * slot, values.device)
    got, gotp = fused.reduce(back, fmt, pos, t, acc, slot=slot)
    runs = [(d * slot, (d + 1) * slot) for d in range(world)]
    want = sum_rows(fmt.view(back, "x"), send_token, t, runs, acc).to(dtype)
    wantp = sum_rows(fmt.view(back, "probs"), send_token, t, runs, acc).to(torch.float32)
    assert torch.equal(got, want)
    assert torch.equal(gotp, wantp)


def test_enabled_follows_the_switch_and_the_row_format(monkeypatch):
    cpu = torch.device("cpu")
    fmt = RowFormat([("x", torch.bfloat16, 8)])
    assert fused.enabled(fmt, cpu)  # forced by the fixture
    assert not fused.enabled(RowFormat([("x", torch.bfloat16, 7)]), cpu)  # 14-byte rows: not whole words
    monkeypatch.setenv("TURBO_DEEPEP_FUSED", "0")
    assert not fused.enabled(fmt, cpu)
    monkeypatch.delenv("TURBO_DEEPEP_FUSED")
    assert not fused.enabled(fmt, cpu)  # the CPU takes the torch path unless asked


def test_launch_keeps_the_compiled_kernel_per_specialization(monkeypatch):
    """The lean launch path (turbo_deepep.all_to_all.launch), with a stand-in for Triton: the first
    call of a specialization goes through ``kernel[grid]``, later ones straight to the compiled
    kernel's launcher with every argument in the signature's order; a change of what Triton
    specializes on (an int's divisibility by 16, width or being 1, a tensor's alignment or dtype,
    a constexpr) goes through ``kernel[grid]`` again; without ``TURBO_DEEPEP_LAUNCH=lean`` (the
    default) every call does."""
    from types import SimpleNamespace

    from turbo_deepep.all_to_all import launch as lean

    calls = []

    class Compiled:
        function, packed_metadata = "function", "metadata"

        def launch_metadata(self, grid, stream, *args):
            return ("meta", grid, stream)

        def run(self, *a):
            calls.append(("fast", a))

    class Kernel:
        arg_names = ["a", "n", "B", "C"]

        def __getitem__(self, grid):
            def go(*args, **kw):
                calls.append(("slow", grid, args, kw))
                return Compiled()
            return go

    drv = SimpleNamespace(active=SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda dev: 77))
    knobs = SimpleNamespace(launch_enter_hook="enter", launch_exit_hook="exit")

    def fresh():
        lean.clear()
        lean._state.update(ok=True, driver=drv, knobs=knobs)

    fresh()
    k, t = Kernel(), torch.zeros(8)
    consts = {"C": 5, "B": 7}  # any order: passed on in the signature's (B, C)
    lean.launch(k, (3, 2), (t, 32), consts)
    assert calls[-1][0] == "slow" and calls[-1][2] == (t, 32) and calls[-1][3] == {**consts, "num_warps": 4}
    lean.launch(k, (4,), (t, 48), consts)
    kind, a = calls[-1]
    assert kind == "fast" and a[:9] == (4, 1, 1, 77, "function", "metadata", ("meta", (4,), 77), "enter", "exit")
    assert a[9] is t and a[10:] == (48, 7, 5)
    knobs.launch_enter_hook = SimpleNamespace(calls=[])  # Triton's empty hook chain: no launch metadata built
    lean.launch(k, (4,), (t, 48), consts)
    assert calls[-1][0] == "fast" and calls[-1][1][6] is None and calls[-1][1][7] is knobs.launch_enter_hook
    for args, why in (((t, 33), "not a multiple of 16"), ((t, 1), "1 is a constant"), ((t, 1 << 40), "i64"),
                      ((t[1:], 32), "misaligned"), ((t.double(), 32), "dtype")):
        n = len(calls)
        lean.launch(k, (4,), args, consts)
        assert calls[n][0] == "slow", why
        lean.launch(k, (4,), args, consts)
        assert calls[n + 1][0] == "fast", why  # kept from then on
    n = len(calls)
    lean.launch(k, (4,), (t, 48), {"C": 6, "B": 7})
    assert calls[n][0] == "slow"
    for value in ("triton", None):  # not opted in
        if value is None:
            monkeypatch.delenv(lean.ENV, raising=False)
        else:
            monkeypatch.setenv(lean.ENV, value)
        lean.clear()
        lean.launch(k, (4,), (t, 48), consts)
        lean.launch(k, (4,), (t, 48), consts)
        assert [c[0] for c in calls[-2:]] == ["slow", "slow"]
    monkeypatch.setenv(lean.ENV, "lean")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    lean.clear()
    try:
        from triton import knobs  # noqa: F401 - the Triton 3.4+ module the fast path reads its hooks from
        has_knobs = True
    except ImportError:
        has_knobs = False
    assert lean._available() is has_knobs  # opted in: on wherever this Triton has what it needs
    lean.clear()
