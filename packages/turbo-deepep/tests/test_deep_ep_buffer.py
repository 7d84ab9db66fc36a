"""turbo_deepep.deep_ep in one process: the Buffer without a group against the DeepEP oracle
(``deep_ep_oracle``), argument errors named before anything runs, Config, the events, and the
package's lazy attributes. The multi-rank cases are in test_deep_ep_buffer_distributed."""

from __future__ import annotations

import subprocess
import sys

import deep_ep_oracle as oracle
import pytest
import torch

from turbo_deepep.deep_ep import Buffer, Config, DispatchHandle, EventHandle, EventOverlap, topk_idx_t

F64 = torch.float64
FP8 = getattr(torch, "float8_e4m3fn", None)


def _inputs(t=7, k=3, e=5, h=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, e, (t, k), generator=g)
    idx[torch.rand((t, k), generator=g) < 0.3] = -1
    idx[1] = -1  # a token routed nowhere
    x = torch.randint(-16, 16, (t, h), generator=g).to(F64) / 8
    w = torch.randint(1, 9, (t, k), generator=g).to(F64) / 8
    return x, idx, w


def _dispatch(buf, x, idx, w, **kw):
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, 5)
    return buf.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                        topk_idx=None if w is None else idx, topk_weights=None if w is None else w.float(), **kw)


@pytest.mark.parametrize("worst", [0, 9])
def test_one_process_matches_oracle(worst):
    x, idx, w = _inputs()
    buf = Buffer(None)
    per_rank, per_rdma, per_expert, in_rank, event = buf.get_dispatch_layout(idx, 5)
    want_rank, want_expert, want_in = oracle.layout(idx, 5, 1)
    assert torch.equal(per_rank.long(), want_rank) and torch.equal(per_expert.long(), want_expert)
    assert torch.equal(in_rank, want_in) and per_rdma is None and isinstance(event, EventOverlap)
    recv, recv_idx, recv_w, counts, handle, _ = _dispatch(buf, x.float(), idx, w, num_worst_tokens=worst,
                                                          expert_alignment=2)
    rows, rx, ri, rw = oracle.received([(x, idx, w)], [want_in], 0, 1, 5)
    n = worst or len(rows)
    assert recv.shape[0] == n == handle.num_recv_tokens
    assert torch.equal(recv[:len(rows)].double(), rx) and not recv[len(rows):].any()
    assert torch.equal(recv_idx[:len(rows)], ri) and (recv_idx[len(rows):] == -1).all()
    assert torch.equal(recv_w[:len(rows)].double(), rw) and not recv_w[len(rows):].any()
    assert counts == ([] if worst else oracle.recv_counts([want_expert], 0, 1, 2))
    again, *_ = buf.dispatch(x.float() * 3, handle=handle)
    assert torch.equal(again[:len(rows)].double(), rx * 3) and not again[len(rows):].any()
    bias = torch.full_like(x, 0.5).float()
    combined, cw, _ = buf.combine(recv * 2, handle, topk_weights=recv_w, bias=bias)
    sent = want_in[:, 0].double()[:, None]
    assert torch.equal(combined.double(), x * 2 * sent + 0.5)
    valid = (idx >= 0).double()
    assert torch.equal(cw.double(), w * valid)


def test_one_process_bf16_without_topk_and_fp8():
    x, idx, _ = _inputs()
    buf = Buffer(None)
    recv, recv_idx, recv_w, counts, handle, _ = _dispatch(buf, x.bfloat16(), idx, None)
    assert recv_idx is None and recv_w is None and recv.dtype == torch.bfloat16
    combined, cw, _ = buf.combine(recv, handle)
    assert cw is None and torch.equal(combined.double(), x * (idx >= 0).any(dim=1, keepdim=True))
    if FP8 is None:
        return
    raw = torch.arange(7 * 4, dtype=torch.uint8).reshape(7, 4)
    scales = torch.arange(7 * 2, dtype=torch.float32).reshape(7, 2)
    (rx, rs), *_ = _dispatch(buf, (raw.view(FP8), scales), idx, None)
    keep = (idx >= 0).any(dim=1)
    assert torch.equal(rx.view(torch.uint8), raw[keep]) and torch.equal(rs, scales[keep])


def _layout_kwargs(buf, idx, e=5):
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, e)
    return {"num_tokens_per_rank": per_rank, "is_token_in_rank": in_rank, "num_tokens_per_expert": per_expert}


def test_errors_name_the_argument():
    x, idx, w = _inputs()
    buf = Buffer(None)
    lay = _layout_kwargs(buf, idx)
    with pytest.raises(ValueError, match="topk_weights: pass topk_idx and topk_weights together"):
        buf.dispatch(x.float(), topk_idx=idx, **lay)
    with pytest.raises(TypeError, match="topk_weights: expected dtype in"):
        buf.dispatch(x.float(), topk_idx=idx, topk_weights=w, **lay)
    with pytest.raises(ValueError, match="is_token_in_rank: expected shape"):
        buf.dispatch(x.float()[:3], topk_idx=idx[:3], topk_weights=w[:3].float(), **lay)
    with pytest.raises(ValueError, match="num_tokens_per_expert: required for a fresh dispatch"):
        buf.dispatch(x.float(), is_token_in_rank=lay["is_token_in_rank"], num_tokens_per_rank=lay["num_tokens_per_rank"])
    with pytest.raises(ValueError, match="topk_idx: expert id 9 out of range"):
        buf.get_dispatch_layout(torch.full((2, 1), 9), 5)
    with pytest.raises(ValueError, match="allocate_on_comm_stream: True needs a previous_event"):
        buf.dispatch(x.float(), allocate_on_comm_stream=True, **lay)
    with pytest.raises(TypeError, match="previous_event: expected None or an EventOverlap"):
        buf.get_dispatch_layout(idx, 5, previous_event=object())
    with pytest.raises(TypeError, match="config: expected None or a Config"):
        buf.dispatch(x.float(), config={}, **lay)
    with pytest.raises(ValueError, match="expert_alignment: expected an int >= 1"):
        buf.dispatch(x.float(), expert_alignment=0, **lay)
    _, _, _, _, handle, _ = buf.dispatch(x.float(), **lay)
    with pytest.raises(ValueError, match="topk_idx: must be None for a cached dispatch"):
        buf.dispatch(x.float(), handle=handle, topk_idx=idx)
    with pytest.raises(TypeError, match="handle: expected the handle returned by Buffer.dispatch"):
        buf.combine(x.float(), (1, 2))
    with pytest.raises(ValueError, match="handle: made by a dispatch on another process group"):
        buf.combine(x.float(), handle._replace(group_name="other"))
    with pytest.raises(ValueError, match=f"x: expected {handle.num_recv_tokens} rows"):
        buf.combine(x.float(), handle)
    with pytest.raises(ValueError, match=r"bias\[0\]: expected shape"):
        buf.combine(torch.zeros(handle.num_recv_tokens, 4), handle, bias=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="low_latency_mode: expected False"):
        Buffer(None, low_latency_mode=True)
    with pytest.raises(TypeError, match="group: expected None or a torch.distributed.ProcessGroup"):
        Buffer("world")
    with pytest.raises(ValueError, match="comm: expected None"):
        Buffer(None, comm=object())
    with pytest.raises(ValueError, match="new_num_sms: expected an even number"):
        Buffer.set_num_sms(21)


def test_static_helpers_destroy_and_configs():
    saved = Buffer.num_sms
    try:
        Buffer.set_num_sms(24)
        assert Buffer.get_dispatch_config(8).num_sms == 24 and Buffer.get_combine_config(3).num_sms == 24
    finally:
        Buffer.num_sms = saved
    assert topk_idx_t is torch.int64
    with pytest.raises(RuntimeError, match="explicitly_destroy"):
        Buffer(None).destroy()
    buf = Buffer(None, 1 << 20, 0, explicitly_destroy=True)
    assert (buf.rank, buf.group_size, buf.num_nvl_bytes, buf.num_rdma_bytes) == (0, 1, 1 << 20, 0)
    buf.destroy()
    with pytest.raises(RuntimeError, match="dispatch: this Buffer was destroyed"):
        buf.dispatch(torch.zeros(1, 4), **_layout_kwargs(Buffer(None), torch.zeros(1, 1, dtype=torch.int64)))
    cfg = Config(20, 6, 256, 6, 128)
    assert cfg.get_rdma_buffer_size_hint(1024, 8) == 0 < cfg.get_rdma_buffer_size_hint(1024, 16)
    small, big = cfg.get_nvl_buffer_size_hint(1024, 8), cfg.get_nvl_buffer_size_hint(4096, 8)
    assert 0 < small < big and small % 128 == 0
    with pytest.raises(ValueError, match="num_max_nvl_chunked_send_tokens: expected fewer"):
        Config(20, 256, 256)
    with pytest.raises(ValueError, match="num_max_rdma_chunked_send_tokens: expected at most half"):
        Config(20, 6, 256, 128, 100)


def test_events_on_the_cpu():
    handle = EventHandle()
    assert handle.event is None or torch.cuda.is_initialized()
    handle.current_stream_wait()  # nothing to wait for on the CPU
    overlap = Buffer.capture()
    overlap.current_stream_wait()
    with overlap as inside:
        assert inside is overlap
    with pytest.raises(RuntimeError, match="holds no event"):
        EventOverlap().current_stream_wait()
    with pytest.raises(TypeError, match="event: expected None or an EventHandle"):
        EventOverlap(object())
    assert isinstance(DispatchHandle._fields, tuple)


def test_import_is_lazy():
    """``import turbo_deepep`` imports neither torch nor the Buffer; the names come on first access."""
    code = "import sys, turbo_deepep; assert 'turbo_deepep.deep_ep' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    import turbo_deepep
    from turbo_deepep import deep_ep

    assert (turbo_deepep.Buffer, turbo_deepep.Config, turbo_deepep.EventOverlap, turbo_deepep.EventHandle) == (
        deep_ep.Buffer, deep_ep.Config, deep_ep.EventOverlap, deep_ep.EventHandle)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        turbo_deepep.Nope  # noqa: B018


@pytest.mark.gpu
def test_events_on_the_gpu():
    torch.cuda.init()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(1 << 20)
        handle = EventHandle()
    assert handle.event is not None
    handle.current_stream_wait()
    torch.cuda.current_stream().synchronize()
    assert handle.event.query()


def test_layout_past_one_nvlink_domain():
    """W = 16: the per-rank, per-expert and in-rank layout as the oracle's, plus the count per group
    of 8 ranks (DeepEP's RDMA ranks), which DeepEP returns only past 8 ranks."""
    from turbo_deepep.deep_ep.layout import dispatch_layout

    g = torch.Generator().manual_seed(3)
    idx = torch.randint(-1, 32, (20, 4), generator=g)
    per_rank, per_rdma, per_expert, in_rank = dispatch_layout(idx, 32, 16)
    want_rank, want_expert, want_in = oracle.layout(idx, 32, 16)
    assert torch.equal(per_rank.long(), want_rank) and torch.equal(per_expert.long(), want_expert)
    assert torch.equal(in_rank, want_in)
    want_rdma = [sum(bool(want_in[t, n * 8:(n + 1) * 8].any()) for t in range(20)) for n in range(2)]
    assert per_rdma.dtype == torch.int32 and per_rdma.tolist() == want_rdma
