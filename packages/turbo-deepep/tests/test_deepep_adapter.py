"""DEEP_EP_BUFFER's argument translation on the CPU, against a fake ``Buffer`` whose methods have
DeepEP's documented signatures (a wrong keyword name fails to bind) and which behaves like one rank
whose peers send nothing (a loopback): tokens that have an expert on this rank come back to it.
No DeepEP here: the real library is never imported by these tests."""

from __future__ import annotations

import inspect
import sys
import types

import pytest
import torch

from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs, MoeDispatchHandle
from turbo_deepep import deepep_adapter as ad

FP8 = getattr(torch, "float8_e4m3fn", None)
F64 = torch.float64
GARBAGE = 0x7B  # what the fake leaves in padding rows (DeepEP leaves them uninitialised)


class FakeGroup:
    def __init__(self, rank: int, size: int, name: str = "ep0") -> None:
        self._rank, self._size, self.group_name = rank, size, name

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


class FakeEvent:
    def __init__(self, log: list) -> None:
        self.log = log

    def current_stream_wait(self) -> None:
        self.log.append("wait")


class FakeConfig:
    def __init__(self, per: int) -> None:
        self.per = per

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return self.per * hidden_bytes * num_ranks

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return hidden_bytes if num_ranks > 8 else 0


class FakeBuffer:
    """DeepEP's normal-mode Buffer API (names and argument lists from its documentation)."""

    num_sms = 20
    created: list = []
    log: list = []

    def __init__(self, group, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0, low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24, allow_nvlink_for_low_latency_mode: bool = True,
                 allow_mnnvl: bool = False, explicitly_destroy: bool = False) -> None:
        self.group, self.rank, self.group_size = group, group.rank(), group.size()
        self.num_nvl_bytes, self.num_rdma_bytes = num_nvl_bytes, num_rdma_bytes
        FakeBuffer.created.append((group.group_name, num_nvl_bytes, num_rdma_bytes))

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> FakeConfig:
        assert num_ranks in (2, 4, 8, 16), f"Unsupported number of EP ranks: {num_ranks}"
        return FakeConfig(10)

    @staticmethod
    def get_combine_config(num_ranks: int) -> FakeConfig:
        assert num_ranks in (2, 4, 8, 16), f"Unsupported number of EP ranks: {num_ranks}"
        return FakeConfig(12)

    @staticmethod
    def capture() -> FakeEvent:
        FakeBuffer.log.append("capture")
        return FakeEvent(FakeBuffer.log)

    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        assert topk_idx.dtype == torch.int64
        w, per = self.group_size, num_experts // self.group_size
        dest = torch.where(topk_idx >= 0, topk_idx // per, w)
        in_rank = torch.zeros((topk_idx.shape[0], w + 1), dtype=torch.bool).scatter_(1, dest, True)[:, :w]
        col = torch.where(topk_idx >= 0, topk_idx, num_experts).reshape(-1)
        per_expert = torch.zeros(num_experts + 1, dtype=torch.int32).index_add_(0, col, torch.ones_like(col, dtype=torch.int32))
        return in_rank.sum(0).int(), None, per_expert[:num_experts], in_rank, FakeEvent(self.log)

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None, topk_weights=None,
                 expert_alignment=1, num_worst_tokens=0, config=None, previous_event=None, async_finish=False,
                 allocate_on_comm_stream=False):
        if allocate_on_comm_stream:  # DeepEP's own precondition
            assert previous_event is not None and async_finish
        x, scales = x if isinstance(x, tuple) else (x, None)
        if handle is not None:
            assert topk_idx is None and topk_weights is None
            src, _ = handle
        else:
            assert num_tokens_per_rank is not None and is_token_in_rank is not None and num_tokens_per_expert is not None
            src = is_token_in_rank[:, self.rank].nonzero()[:, 0]
        n = src.numel()
        r = num_worst_tokens or n
        recv_x = torch.full((r, x.shape[1] * x.element_size()), GARBAGE, dtype=torch.uint8).view(x.dtype)
        recv_x[:n] = x[src]
        recv_s = None
        if scales is not None:
            recv_s = torch.full((r, scales.shape[1]), 9.0)
            recv_s[:n] = scales[src]
        out = (recv_x, recv_s) if scales is not None else recv_x
        if handle is not None:
            return out, None, None, None, None, FakeEvent(self.log)
        per = num_tokens_per_expert.numel() // self.group_size
        lo = self.rank * per
        ids = topk_idx[src]
        local = torch.where((ids >= lo) & (ids < lo + per), ids - lo, -1)
        recv_idx = torch.full((r, ids.shape[1]), -1, dtype=torch.int64)  # DeepEP sets padding ids to -1
        recv_idx[:n] = local
        recv_w = torch.full((r, ids.shape[1]), 5.0)
        recv_w[:n] = torch.where(local >= 0, topk_weights[src], 0.0)
        counts = [] if num_worst_tokens else [int((local == e).any(1).sum()) for e in range(per)]
        return out, recv_idx, recv_w, counts, (src, x.shape[0]), FakeEvent(self.log)

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish=False, allocate_on_comm_stream=False):
        assert x.dtype == torch.bfloat16
        src, t = handle
        n = src.numel()
        out = torch.zeros((t, x.shape[1]), dtype=torch.float32).index_add_(0, src, x[:n].float())
        w = None
        if topk_weights is not None:
            w = torch.zeros((t, topk_weights.shape[1])).index_add_(0, src, topk_weights[:n])
        return out.to(torch.bfloat16), w, FakeEvent(self.log)


@pytest.fixture
def fake_module(monkeypatch):
    mod = types.ModuleType("turbo_fake_deep_ep")
    mod.Buffer = FakeBuffer
    monkeypatch.setitem(sys.modules, "turbo_fake_deep_ep", mod)
    monkeypatch.setenv(ad.MODULE_ENV, "turbo_fake_deep_ep")
    monkeypatch.setattr(ad, "BUFFERS", ad.BufferCache())
    FakeBuffer.created.clear()
    FakeBuffer.log.clear()
    ad.clear_module_cache()
    yield mod
    ad.clear_module_cache()


def _binds(method, kwargs: dict) -> None:
    inspect.signature(method).bind(None, **kwargs)  # `None` stands for self


# -- pure translation ----------------------------------------------------------------------------

def test_keyword_arguments_are_deepeps():
    idx, w = torch.zeros((3, 2), dtype=torch.int64), torch.zeros(3, 2)
    x, s = torch.zeros(3, 256, dtype=torch.bfloat16), torch.zeros(3, 2)
    lay = ad.layout_kwargs(idx, 8)
    assert lay == {"topk_idx": idx, "num_experts": 8, "previous_event": None, "async_finish": False,
                   "allocate_on_comm_stream": False}
    _binds(FakeBuffer.get_dispatch_layout, lay)
    layout = ("per_rank", "per_rdma_rank", "per_expert", "in_rank")
    kw = ad.dispatch_kwargs(x, s, layout=layout, topk_idx=idx, topk_weights=w, num_worst_tokens=12,
                            previous_event="ev", run_async=True, alloc=True)
    assert kw["x"][0] is x and kw["x"][1] is s
    assert (kw["num_tokens_per_rank"], kw["num_tokens_per_rdma_rank"], kw["num_tokens_per_expert"],
            kw["is_token_in_rank"]) == ("per_rank", "per_rdma_rank", "per_expert", "in_rank")
    assert kw["topk_idx"] is idx and kw["topk_weights"] is w and "handle" not in kw
    assert (kw["num_worst_tokens"], kw["expert_alignment"], kw["previous_event"], kw["async_finish"],
            kw["allocate_on_comm_stream"]) == (12, 1, "ev", True, True)
    _binds(FakeBuffer.dispatch, kw)
    cached = ad.dispatch_kwargs(x, None, handle="h", num_worst_tokens=0)
    assert cached["x"] is x and cached["handle"] == "h"
    assert not {"topk_idx", "topk_weights", "is_token_in_rank"} & set(cached)
    _binds(FakeBuffer.dispatch, cached)
    comb = ad.combine_kwargs(x, "h", w)
    assert comb == {"x": x, "handle": "h", "topk_weights": w, "config": None, "previous_event": None,
                    "async_finish": False, "allocate_on_comm_stream": False}
    _binds(FakeBuffer.combine, comb)


def test_buffer_sizes_and_reuse_per_group():
    assert ad.hidden_bytes(torch.zeros(2, 7168, dtype=torch.bfloat16)) == 7168 * 2
    if FP8 is not None:  # fp8 rows are sized as bf16 (the combine sends bf16 back)
        assert ad.hidden_bytes(torch.zeros(2, 7168).to(FP8)) == 7168 * 2
    assert ad.buffer_sizes(FakeBuffer, 100, 4) == (12 * 100 * 4, 0)
    assert ad.buffer_sizes(FakeBuffer, 100, 16) == (12 * 100 * 16, 100)
    FakeBuffer.created.clear()
    cache = ad.BufferCache()
    g0, g1 = FakeGroup(0, 2, "a"), FakeGroup(0, 2, "b")
    b = cache.get(FakeBuffer, g0, 64)
    assert cache.get(FakeBuffer, g0, 32) is b  # big enough: reused
    assert cache.get(FakeBuffer, g1, 32) is not b  # another group: its own buffer
    bigger = cache.get(FakeBuffer, g0, 128)
    assert bigger is not b and bigger.num_nvl_bytes == 12 * 128 * 2
    assert FakeBuffer.created == [("a", 12 * 64 * 2, 0), ("b", 12 * 32 * 2, 0), ("a", 12 * 128 * 2, 0)]


def test_topk_idx_dtype():
    assert ad.topk_idx_dtype(types.SimpleNamespace()) == torch.int64
    assert ad.topk_idx_dtype(types.SimpleNamespace(topk_idx_t=torch.int32)) == torch.int32


def test_result_translation_zeroes_worst_case_padding():
    x = torch.full((4, 8), 3.0, dtype=torch.bfloat16)
    ids = torch.tensor([[0, -1], [-1, 1], [-1, -1], [-1, -1]])  # two received rows, two padding rows
    w = torch.tensor([[0.5, 7.0], [7.0, 0.25], [7.0, 7.0], [7.0, 7.0]])
    out = ad.from_dispatch_result((x, ids, w, [], "h", "ev"), fp8=False, indices_dtype=torch.int32,
                                  num_local_experts=2, worst=True)
    recv_x, recv_s, idx, probs, tpe, handle, valid, event = out
    assert recv_s is None and handle == "h" and event == "ev"
    assert valid.tolist() == [True, True, False, False]
    assert recv_x[:2].eq(3).all() and not recv_x[2:].float().any()
    assert idx.dtype == torch.int32 and idx.tolist() == ids.tolist()
    assert probs.tolist() == [[0.5, 0.0], [0.0, 0.25], [0.0, 0.0], [0.0, 0.0]]
    assert tpe.tolist() == [1, 1]


# -- the kernels, end to end through the fake --------------------------------------------------

def _expect(x64, idx, p64, rank, world, e, worst):
    per = e // world
    lo = rank * per
    rows = [t for t in range(idx.shape[0]) if any(lo <= int(v) < lo + per for v in idx[t])]
    r = worst or len(rows)
    k = idx.shape[1]
    rx = torch.zeros((r, x64.shape[1]), dtype=F64)
    ri = torch.full((r, k), -1, dtype=torch.int64)
    rp = torch.zeros((r, k), dtype=F64)
    for i, t in enumerate(rows):
        rx[i] = x64[t]
        for j in range(k):
            if lo <= int(idx[t, j]) < lo + per:
                ri[i, j], rp[i, j] = int(idx[t, j]) - lo, p64[t, j]
    tpe = [sum(1 for i in range(len(rows)) if (ri[i] == ex).any()) for ex in range(per)]
    return rows, rx, ri, rp, tpe


# rank 1 of 2 and rank 2 of 4; exact and worst-case; bf16 and fp8 tokens; synchronous and async hints
@pytest.mark.parametrize("rank,world,worst,fp8,hint", [(1, 2, 0, False, False), (2, 4, 12, False, True),
                                                       (1, 2, 9, True, False), (0, 4, 0, True, True)])
def test_dispatch_combine_cached_through_fake_buffer(fake_module, rank, world, worst, fp8, hint):
    if fp8 and FP8 is None:
        pytest.skip("this torch has no float8_e4m3fn")
    t, k, h, e = 9, 3, 128, 2 * world
    g = torch.Generator().manual_seed(rank + 10 * world)
    idx = torch.randint(0, e, (t, k), generator=g)
    idx[torch.rand((t, k), generator=g) < 0.3] = -1
    idx[0] = -1
    x64 = torch.randint(-16, 16, (t, h), generator=g).to(F64) / 4
    p64 = torch.randint(1, 9, (t, k), generator=g).to(F64) / 8
    group = FakeGroup(rank, world)
    x = x64.to(FP8 if fp8 else torch.bfloat16)
    scales = torch.rand((t, h // 128), generator=g) if fp8 else None
    args = MoeDispatchArgs(x, scales, idx.to(torch.int32), p64.float(), e, group, None, hint, hint, worst)
    recv_x, recv_s, ridx, rprobs, tpe, handle = ad.moe_dispatch(args, module=fake_module)
    rows, rx, ri, rp, want_tpe = _expect(x64, idx, p64, rank, world, e, worst)
    assert torch.equal(recv_x.double(), rx) and recv_x.dtype == x.dtype
    assert ridx.dtype == torch.int32 and ridx.tolist() == ri.tolist()
    assert torch.equal(rprobs.double(), rp) and tpe.tolist() == want_tpe
    if fp8:
        want_s = torch.zeros((rx.shape[0], 1))
        want_s[: len(rows)] = scales[rows]
        assert torch.equal(recv_s, want_s)
    assert isinstance(handle, MoeDispatchHandle) and handle.backend == "DEEP_EP_BUFFER"
    assert (handle.num_tokens, handle.num_recv, handle.num_local_experts) == (t, rx.shape[0], e // world)
    assert FakeBuffer.created == [("ep0", 12 * h * 2 * world, 0)]
    assert FakeBuffer.log.count("wait") == (1 if hint else 0) and FakeBuffer.log.count("capture") == int(hint)
    # combine: each token gets its returned row (a loopback has one per token), 0 if sent nowhere
    y = (rx * 2).to(torch.bfloat16)
    gp = torch.rand((rx.shape[0], k), generator=g)
    combined, cprobs = ad.moe_combine(MoeCombineArgs(y, handle, group, gp, hint, hint))
    want = torch.zeros((t, h), dtype=F64)
    want_p = torch.zeros((t, k), dtype=F64)
    for i, tok in enumerate(rows):
        want[tok], want_p[tok] = rx[i] * 2, gp[i].double()
    assert combined.dtype == torch.bfloat16 and torch.equal(combined.double(), want)
    assert torch.equal(cprobs.double(), want_p)
    # probs only (a dispatch backward without an x gradient): x of width 0
    empty, cprobs2 = ad.moe_combine(MoeCombineArgs(gp.new_zeros((rx.shape[0], 0)), handle, group, gp))
    assert empty.shape == (t, 0) and empty.dtype == torch.float32 and torch.equal(cprobs2, cprobs)
    # cached dispatch: other rows along the same layout, padding zeroed again
    z64 = torch.randint(-8, 8, (t, h), generator=g).to(F64) / 2
    z = z64.to(x.dtype)
    again, again_s, *rest = ad.moe_dispatch(MoeDispatchArgs(z, scales, None, None, 0, group, handle))
    want_z = torch.zeros_like(rx)
    want_z[: len(rows)] = z64[rows]
    assert torch.equal(again.double(), want_z) and rest == [None, None, None, handle]
    assert (again_s is None) == (not fp8)


# -- declines --------------------------------------------------------------------------------------

def _args(x, scales=None, world=2, worst=0, handle=None):
    idx = torch.zeros((x.shape[0], 2), dtype=torch.int64, device=x.device)
    probs = torch.zeros((x.shape[0], 2), device=x.device)
    return MoeDispatchArgs(x, scales, idx, probs, 2 * world, FakeGroup(0, world), handle, False, False, worst)


def test_declines_with_exact_reasons(fake_module):
    meta = torch.device("meta")
    bf = torch.zeros((4, 256), dtype=torch.bfloat16, device=meta)
    assert ad.can_handle_dispatch(_args(bf)) is None
    assert ad.can_handle_dispatch(_args(torch.zeros((4, 256), dtype=torch.bfloat16))) == (
        "DeepEP's Buffer moves GPU tensors only; these tensors are on the CPU")
    assert ad.can_handle_dispatch(_args(bf, world=1)) == (
        "DeepEP's Buffer needs a process group of 2 or more ranks (single process: TORCH)")
    assert ad.can_handle_dispatch(_args(bf, world=3)).startswith(
        "turbo_fake_deep_ep.Buffer.get_dispatch_config(3) failed: AssertionError: Unsupported number of EP ranks: 3")
    assert ad.can_handle_dispatch(_args(bf.float())) == (
        "DeepEP dispatches bf16 tokens or (float8_e4m3fn, fp32 scales); got float32")
    assert ad.can_handle_dispatch(_args(bf[:, :4])) == (
        "DeepEP needs hidden rows of a multiple of 16 bytes; got 4 x 2 bytes")
    assert ad.can_handle_dispatch(_args(bf, worst=64, world=16)) == (
        "DeepEP's num_worst_tokens mode is intranode only (<= 8 ranks); this group has 16")
    assert ad.can_handle_dispatch(_args(bf, worst=64, world=8)) is None
    if FP8 is not None:
        x8 = torch.zeros((4, 256), dtype=FP8, device=meta)
        assert ad.can_handle_dispatch(_args(x8, torch.zeros((4, 2), device=meta))) is None
        assert ad.can_handle_dispatch(_args(x8, torch.zeros((4, 1), device=meta))) == (
            "DeepEP's FP8 dispatch takes x_scales [T, H / 128] (one per 128 columns); got H=256, scales (4, 1)")
    other = MoeDispatchHandle("DEEP_EP", FakeGroup(0, 2), 4, 4, 2, ())
    assert ad.can_handle_dispatch(_args(bf, handle=other)) == "the handle was made by backend DEEP_EP, not DEEP_EP_BUFFER"
    mine = MoeDispatchHandle("DEEP_EP_BUFFER", FakeGroup(0, 2), 4, 4, 2, ())
    assert ad.can_handle_combine(MoeCombineArgs(bf, mine, mine.group)) is None
    assert ad.can_handle_combine(MoeCombineArgs(bf.float(), mine, mine.group)) == "DeepEP combines bf16 rows; got float32"
    assert ad.can_handle_combine(MoeCombineArgs(bf.float()[:, :0], mine, mine.group)) is None
    assert ad.can_handle_combine(MoeCombineArgs(bf, other, other.group)).startswith("the handle was made by backend DEEP_EP")


def test_no_module_reason(monkeypatch):
    monkeypatch.setenv(ad.MODULE_ENV, "turbo_no_such_ep_module, turbo_fake_without_buffer")
    monkeypatch.setitem(sys.modules, "turbo_fake_without_buffer", types.ModuleType("turbo_fake_without_buffer"))
    ad.clear_module_cache()
    try:
        reason = ad.probe()
        assert reason == (
            "no module with DeepEP's Buffer API is importable (turbo_no_such_ep_module: ModuleNotFoundError: "
            "No module named 'turbo_no_such_ep_module'; turbo_fake_without_buffer: no Buffer with "
            "get_dispatch_layout, dispatch, combine, get_dispatch_config, get_combine_config, capture)")
        meta = torch.zeros((4, 256), dtype=torch.bfloat16, device="meta")
        assert ad.can_handle_dispatch(_args(meta)) == reason
    finally:
        ad.clear_module_cache()


def test_default_candidates_and_probe_here(monkeypatch):
    monkeypatch.delenv(ad.MODULE_ENV, raising=False)
    assert ad.module_candidates() == ("deep_ep", "uccl.ep", "uccl_ep")
    ad.clear_module_cache()
    try:
        mod, reason = ad.load_module()
        if mod is None:  # this machine (no DeepEP): the reason names every candidate
            assert reason.startswith("no module with DeepEP's Buffer API is importable (deep_ep: ")
            assert "uccl.ep: " in reason and "uccl_ep: " in reason
    finally:
        ad.clear_module_cache()
