"""turbo_deepep.deep_ep.Buffer across gloo processes (2 and 4 ranks) against what DeepEP returns
(``deep_ep_oracle``: loops over every rank's inputs), and turbo_core's DeepEPTokenDispatcher
(``deepep_dispatcher_cases``) against one float64 MoE holding every expert.

Token values, weights and multipliers are small dyadic rationals: every movement and every sum is
exact, so results must equal the oracle bit for bit (bf16 ones after the oracle's own rounding).
Each world size runs all its cases in one group of forked processes; every rank rebuilds every
rank's inputs from one seed, so each computes its own expectations.
"""

from __future__ import annotations

import os

import deep_ep_oracle as oracle
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_cases import join_group, routed_inputs, token_counts, two_gpu_reason

F64 = torch.float64
FP8 = getattr(torch, "float8_e4m3fn", None)
H = 8


def _eq(got, want, what: str) -> None:
    got = torch.as_tensor(got).detach().cpu()
    want = torch.as_tensor(want)
    if got.dtype.is_floating_point or want.dtype.is_floating_point:
        got, want = got.double(), want.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}: max |diff| {(got - want).abs().max().item()}\n{got}\n{want}"


def _pad(t: torch.Tensor, rows: int, value) -> torch.Tensor:
    out = torch.full((rows, *t.shape[1:]), value, dtype=t.dtype)
    out[:t.shape[0]] = t
    return out


def _custom_in_rank(in_rank: torch.Tensor, src: int) -> torch.Tensor:
    """A layout unlike the one the ids give: some tokens also go to a rank holding none of their
    experts, some lose a rank that holds one."""
    out = in_rank.clone()
    world = out.shape[1]
    for t in range(out.shape[0]):
        if t % 3 == 1:
            out[t, (t + src) % world] = True
        if t % 4 == 2:
            out[t, (t + 1) % world] = False
    return out


# -- the Buffer cases -----------------------------------------------------------------------------

def _topk_case(rank, world, group, dev, *, dtype, seed, alignment=1, custom=False, worst=False,
               idx_dtype=torch.int64):
    """get_dispatch_layout, fresh dispatch (with the stream arguments), cached dispatch, combine
    with weights and two biases, each against the oracle."""
    from turbo_deepep.deep_ep import Buffer

    e, k = 2 * world, 3
    tokens = token_counts(world, worst)
    data = routed_inputs(world, seed, tokens, k, e, H, idx_dtype)
    layouts = [oracle.layout(idx, e, world) for _, idx, _ in data]
    in_ranks = [_custom_in_rank(lay[2], s) if custom else lay[2] for s, lay in enumerate(layouts)]
    buf = Buffer(group)
    x64, idx, w64 = data[rank]
    idx = idx.to(dev)
    per_rank, per_rdma, per_expert, in_rank, event = buf.get_dispatch_layout(idx, e)
    _eq(per_rank, layouts[rank][0], "num_tokens_per_rank")
    _eq(per_expert, layouts[rank][1], "num_tokens_per_expert")
    _eq(in_rank, layouts[rank][2], "is_token_in_rank")
    assert per_rank.dtype == per_expert.dtype == torch.int32 and per_rdma is None
    event.current_stream_wait()
    nwt = tokens[0] * world if worst else 0
    recv, recv_idx, recv_w, counts, handle, event = buf.dispatch(
        x64.to(dtype).to(dev), num_tokens_per_rank=per_rank, is_token_in_rank=in_ranks[rank].to(dev),
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w64.float().to(dev), expert_alignment=alignment, num_worst_tokens=nwt,
        previous_event=buf.capture(), async_finish=True, allocate_on_comm_stream=True)
    event.current_stream_wait()
    rows, rx, ri, rw = oracle.received(data, in_ranks, rank, world, e)
    n = nwt or len(rows)
    _eq(recv, _pad(rx, n, 0.0).to(dtype), "recv_x")
    assert recv.dtype == dtype and recv_idx.dtype == idx_dtype and recv_w.dtype == torch.float32
    _eq(recv_idx, _pad(ri, n, -1), "recv_topk_idx")
    _eq(recv_w, _pad(rw, n, 0.0), "recv_topk_weights")
    want_counts = [] if worst else oracle.recv_counts([lay[1] for lay in layouts], rank, world, alignment)
    assert counts == want_counts, (counts, want_counts)
    # cached dispatch: other rows along the same layout
    data2 = [(x * 2 + 0.125, i, w) for x, i, w in data]
    again, *rest, _ = buf.dispatch(data2[rank][0].to(dtype).to(dev), handle=handle)
    assert all(r is None for r in rest[:4]), rest
    _eq(again, _pad(oracle.received(data2, in_ranks, rank, world, e)[1], n, 0.0).to(dtype), "cached recv_x")
    # combine: rank d returns x * (d + 1) for each row, and the weights it received
    g = torch.Generator().manual_seed(seed + 100 + rank)
    t = x64.shape[0]
    biases = [torch.randint(-8, 8, (t, H), generator=g).to(F64) / 4 for _ in range(2)]
    combined, cw, event = buf.combine(recv * (rank + 1), handle, topk_weights=recv_w,
                                      bias=tuple(b.to(dtype).to(dev) for b in biases))
    event.current_stream_wait()
    x_rows, w_rows = [], []
    for d in range(world):
        rows_d, rx_d, _, rw_d = oracle.received(data, in_ranks, d, world, e)
        x_rows.append({st: rx_d[i] * (d + 1) for i, st in enumerate(rows_d)})
        w_rows.append({st: rw_d[i] for i, st in enumerate(rows_d)})
    want = oracle.combined(x_rows, in_ranks[rank], rank, H) + biases[0].to(dtype).double() + biases[1].to(dtype).double()
    _eq(combined, want.to(dtype), "combined_x")
    assert combined.dtype == dtype
    _eq(cw, oracle.combined(w_rows, in_ranks[rank], rank, k), "combined_topk_weights")


def _no_topk_case(rank, world, group, dev, *, seed):
    """bf16 rows without top-k: the layout alone decides; no ids or weights come back."""
    from turbo_deepep.deep_ep import Buffer

    e = 4 * world
    data = routed_inputs(world, seed, token_counts(world, False), 2, e, H)
    layouts = [oracle.layout(idx, e, world) for _, idx, _ in data]
    in_ranks = [lay[2] for lay in layouts]
    buf = Buffer(group)
    x64, idx, _ = data[rank]
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx.to(dev), e)
    recv, recv_idx, recv_w, counts, handle, _ = buf.dispatch(
        x64.bfloat16().to(dev), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        expert_alignment=3)
    bare = [(x, None, None) for x, _, _ in data]
    rows, rx, _, _ = oracle.received(bare, in_ranks, rank, world, e)
    _eq(recv, rx.bfloat16(), "recv_x (no top-k)")
    assert recv_idx is None and recv_w is None
    assert counts == oracle.recv_counts([lay[1] for lay in layouts], rank, world, 3)
    combined, cw, _ = buf.combine(recv, handle)
    assert cw is None
    n_ranks = in_ranks[rank].sum(dim=1).double()
    _eq(combined, (x64 * n_ranks[:, None]).bfloat16(), "combined_x (no top-k)")


def _fp8_case(rank, world, group, dev, *, seed, worst):
    """FP8 rows and their scales travel as (x, x_scales), bit-exact, fresh and cached."""
    from turbo_deepep.deep_ep import Buffer

    e, k = 2 * world, 2
    tokens = token_counts(world, worst)
    data = routed_inputs(world, seed, tokens, k, e, H)
    layouts = [oracle.layout(idx, e, world) for _, idx, _ in data]
    in_ranks = [lay[2] for lay in layouts]
    g = torch.Generator().manual_seed(seed + 1)
    raw = [torch.randint(0, 256, (tokens[r], H), generator=g, dtype=torch.uint8) for r in range(world)]
    scl = [torch.randn((tokens[r], 2), generator=g) for r in range(world)]
    nwt = tokens[0] * world if worst else 0
    buf = Buffer(group)
    _, idx, w64 = data[rank]
    idx = idx.to(dev)
    per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, e)
    (rx8, rs), _, _, _, handle, _ = buf.dispatch(
        (raw[rank].to(dev).view(FP8), scl[rank].to(dev)), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w64.float().to(dev), num_worst_tokens=nwt)
    rows, *_ = oracle.received(data, in_ranks, rank, world, e)
    n = nwt or len(rows)
    want_raw = torch.zeros((n, H), dtype=torch.uint8)
    want_s = torch.zeros((n, 2))
    for i, (s, t) in enumerate(rows):
        want_raw[i], want_s[i] = raw[s][t], scl[s][t]
    assert rx8.dtype == FP8
    _eq(rx8.view(torch.uint8), want_raw, "recv_x bytes (fp8)")
    _eq(rs, want_s, "recv_x_scales")
    (again, again_s), *_ = buf.dispatch(((raw[rank] ^ 0x5A).to(dev).view(FP8), -scl[rank].to(dev)), handle=handle)
    want2 = want_raw ^ 0x5A
    want2[len(rows):] = 0
    _eq(again.view(torch.uint8), want2, "cached recv_x bytes (fp8)")
    _eq(again_s, -want_s, "cached recv_x_scales")


# -- Megatron's fused_a2a usage: autograd around the Buffer ---------------------------------------

def _buffer(group):
    """A fresh Buffer per call (Megatron re-creates its buffer when it needs more bytes): a handle
    stays valid across Buffers of one group."""
    from turbo_deepep.deep_ep import Buffer

    return Buffer(group, 1 << 20, 0)


class _FusedDispatch(torch.autograd.Function):
    """Dispatch as Megatron-LM's DeepEP path drives it; its backward is a combine of the gradients
    of the rows and of the probs."""

    @staticmethod
    def forward(ctx, x, idx, probs, num_experts, group):
        from turbo_deepep.deep_ep import EventHandle, EventOverlap

        buf = _buffer(group)
        per_rank, per_rdma, per_expert, in_rank, event = buf.get_dispatch_layout(
            idx, num_experts, previous_event=EventOverlap(EventHandle()), async_finish=True,
            allocate_on_comm_stream=True)
        recv_x, recv_idx, recv_probs, counts, handle, after = buf.dispatch(
            x, topk_idx=idx, topk_weights=probs, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma,
            is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, previous_event=event, async_finish=True,
            allocate_on_comm_stream=True)
        after.current_stream_wait()
        ctx.group, ctx.handle = group, handle
        return recv_x, recv_idx, recv_probs, torch.tensor(counts), handle

    @staticmethod
    def backward(ctx, grad_x, _idx, grad_probs, _counts, _handle):
        from turbo_deepep.deep_ep import EventHandle, EventOverlap

        gx, gprobs, after = _buffer(ctx.group).combine(
            grad_x.contiguous(), ctx.handle, topk_weights=grad_probs.float(),
            previous_event=EventOverlap(EventHandle()), async_finish=True, allocate_on_comm_stream=True)
        after.current_stream_wait()
        return gx, None, gprobs, None, None


class _FusedCombine(torch.autograd.Function):
    """Combine; its backward is a cached dispatch of the gradient."""

    @staticmethod
    def forward(ctx, x, group, handle):
        combined, _, after = _buffer(group).combine(x, handle=handle, async_finish=True,
                                                    previous_event=_buffer(group).capture())
        after.current_stream_wait()
        ctx.group, ctx.handle = group, handle
        return combined

    @staticmethod
    def backward(ctx, grad):
        gx, *_ = _buffer(ctx.group).dispatch(grad.contiguous(), handle=ctx.handle)
        return gx, None, None


def _c(s: int, t: int, j: int) -> float:
    return (s + 1) + t / 4 + j / 8


def _autograd_case(rank, world, group, dev, *, seed):
    """dispatch -> y = recv_x * (the row's local probs summed) -> combine; loss = <combined, G> +
    <local recv probs, C>: the output and the gradients of x and the probs, exactly."""
    e, k = 2 * world, 3
    data = routed_inputs(world, seed, token_counts(world, False), k, e, H)
    x64, idx, w64 = data[rank]
    x = x64.float().to(dev).requires_grad_()
    p = w64.float().to(dev).requires_grad_()
    recv_x, recv_idx, recv_p, counts, handle = _FusedDispatch.apply(x, idx.to(dev), p, e, group)
    assert counts.dtype == torch.int64
    local = recv_idx >= 0
    lp = recv_p * local
    combined = _FusedCombine.apply(recv_x * lp.sum(dim=1, keepdim=True), group, handle)
    rows = oracle.received(data, [oracle.layout(i, e, world)[2] for _, i, _ in data], rank, world, e)[0]
    cmat = torch.tensor([[_c(s, t, j) for j in range(k)] for s, t in rows], dtype=torch.float32).reshape(len(rows), k)
    cmat = cmat.to(dev)
    valid = ((idx >= 0) & (idx < e)).double()
    scale = (valid * w64).sum(dim=1)
    _eq(combined, x64 * scale[:, None], "combined (autograd)")
    g64 = torch.randint(-4, 5, tuple(x64.shape), generator=torch.Generator().manual_seed(seed + rank)).to(F64) / 4
    ((combined * g64.float().to(dev)).sum() + (lp * cmat).sum()).backward()
    _eq(x.grad, g64 * scale[:, None], "grad x")
    t = x64.shape[0]
    own_c = torch.tensor([[_c(rank, tt, j) for j in range(k)] for tt in range(t)], dtype=F64).reshape(t, k)
    _eq(p.grad, valid * ((g64 * x64).sum(dim=1, keepdim=True) + own_c), "grad probs")


# -- runner ---------------------------------------------------------------------------------------

def _run_cases(rank, world, group, dev):
    import deepep_dispatcher_cases as dispatcher

    cases = [
        ("fp32 top-k", lambda: _topk_case(rank, world, group, dev, dtype=torch.float32, seed=1)),
        ("bf16 top-k, int32 ids, alignment 4", lambda: _topk_case(rank, world, group, dev, dtype=torch.bfloat16, seed=2,
                                                                   alignment=4, idx_dtype=torch.int32)),
        ("fp32 custom is_token_in_rank", lambda: _topk_case(rank, world, group, dev, dtype=torch.float32, seed=3,
                                                            custom=True)),
        ("fp32 num_worst_tokens", lambda: _topk_case(rank, world, group, dev, dtype=torch.float32, seed=4, worst=True)),
        ("bf16 without top-k", lambda: _no_topk_case(rank, world, group, dev, seed=5)),
        ("megatron autograd", lambda: _autograd_case(rank, world, group, dev, seed=6)),
        *dispatcher.cases(rank, world, group, dev, seed=20),
    ]
    if FP8 is not None:
        cases += [("fp8", lambda: _fp8_case(rank, world, group, dev, seed=7, worst=False)),
                  ("fp8 num_worst_tokens", lambda: _fp8_case(rank, world, group, dev, seed=8, worst=True))]
    for name, run in cases:
        try:
            run()
        except Exception as exc:
            raise AssertionError(f"rank {rank}/{world}, case {name!r}: {exc}") from exc


def _worker(rank: int, world: int, store: str, backend: str) -> None:
    dev = join_group(rank, world, store, backend)
    try:
        _run_cases(rank, world, dist.group.WORLD, dev)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _launch(world: int, tmp_path, backend: str) -> None:
    method = "fork" if backend == "gloo" else "spawn"  # forked children skip the imports (CPU only)
    mp.start_processes(_worker, args=(world, str(tmp_path / f"store-{backend}-{world}"), backend), nprocs=world,
                       join=True, start_method=method)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo(world, tmp_path):
    _launch(world, tmp_path, "gloo")


# The same cases on two GPUs: turbo's fused all-to-all path (symmetric memory between GPUs of one host).
@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(two_gpu_reason() is not None, reason=two_gpu_reason() or "")
def test_nccl(tmp_path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    _launch(2, tmp_path, "nccl")
