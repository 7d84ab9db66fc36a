"""DEEP_EP's all-to-all dispatch/combine across processes (gloo on the CPU; NCCL on GPUs, marked),
forward and backward through ``turbo_core.ops``, against a float64 reference written here from the
spec: a token goes once to every rank holding one of its valid experts; a receiver gets its rows
grouped by source rank in order, tokens ascending, with local expert ids (-1 elsewhere) and the
probs of those slots (0 elsewhere); combine sums the rows returned for each token.

Values are small dyadic rationals, so every sum and product below is exact in fp32 (and in bf16
for the bf16 case): results must equal the float64 reference bit for bit, not within a tolerance.
The last cases train turbo_core's MoELayer (experts spread over the ranks) for three steps against
one float64 MoE holding every expert (fp32 tolerance: those go through GEMMs).

Each world size runs in one group of forked processes (spawned on GPUs), all cases in a row, so
process start-up is paid once per world size. Every rank rebuilds every rank's inputs from one
seed, so each computes its own expectations.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_cases import join_group, routed_inputs, token_counts, two_gpu_reason

F64 = torch.float64
FP8 = getattr(torch, "float8_e4m3fn", None)
H = 8


# -- inputs and the float64 reference --------------------------------------------------------------

def _expected(data, rank: int, world: int, e: int, worst: int = 0):
    """This rank's received rows ``[(src, t)]`` and ``(recv_x, recv_idx, recv_probs,
    tokens_per_expert)`` in float64 / int64, from loops over every rank's inputs."""
    per = e // world
    lo, hi = rank * per, (rank + 1) * per
    rows = [(s, t) for s, (_, idx, _) in enumerate(data) for t in range(idx.shape[0])
            if any(lo <= int(v) < hi for v in idx[t])]
    r = worst or len(rows)
    assert len(rows) <= r, "test setup: num_worst_tokens below the real count"
    k = data[0][1].shape[1]
    rx = torch.zeros((r, H), dtype=F64)
    ri = torch.full((r, k), -1, dtype=torch.int64)
    rp = torch.zeros((r, k), dtype=F64)
    tpe = [0] * per
    for i, (s, t) in enumerate(rows):
        x, idx, p = data[s]
        rx[i] = x[t]
        for slot in range(k):
            v = int(idx[t, slot])
            if lo <= v < hi:
                ri[i, slot] = v - lo
                rp[i, slot] = p[t, slot]
        for ex in {int(v) for v in ri[i] if v >= 0}:
            tpe[ex] += 1
    return rows, rx, ri, rp, tpe


def _c(s: int, t: int, k: int) -> float:
    """The weight of received prob (src rank s, token t, slot k) in the probs term of the loss."""
    return (s + 1) + t / 4 + k / 8


def _n_ranks(idx: torch.Tensor, e: int, world: int) -> torch.Tensor:
    """float64 ``[T]``: how many ranks each token is sent to."""
    per = e // world
    return torch.tensor([float(len({int(v) // per for v in row if 0 <= int(v) < e})) for row in idx], dtype=F64)


def _eq(got: torch.Tensor, want, what: str) -> None:
    got = got.detach().cpu()
    want = torch.as_tensor(want)
    if got.dtype.is_floating_point or want.dtype.is_floating_point:
        got, want = got.double(), want.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}: max |diff| {(got - want).abs().max().item()}\n{got}\n{want}"


# -- cases (each runs on every rank) ---------------------------------------------------------------

def _autograd_case(rank, world, group, dev, *, dtype, worst_kind, seed):
    """dispatch -> y = recv_x * (sum of the row's probs) -> combine, loss = <combined, G> +
    <recv_probs, C>; checks every output and both gradients."""
    from turbo_core.ops import moe_combine, moe_dispatch

    e, k = 2 * world, 3
    equal = worst_kind != "exact"
    data = routed_inputs(world, seed, token_counts(world, equal), k, e, H, idx_dtype=torch.int32 if dtype == torch.bfloat16 else torch.int64)
    worst = 0
    if worst_kind == "bound":
        worst = token_counts(world, True)[0] * world
    elif worst_kind == "tight":  # the largest real count over the ranks, plus one padding row
        worst = max(len(_expected(data, d, world, e)[0]) for d in range(world)) + 1
    rows, rx, ri, rp, tpe = _expected(data, rank, world, e, worst)
    x64, idx, p64 = data[rank]
    x = x64.to(dtype).to(dev).requires_grad_()
    p = p64.float().to(dev).requires_grad_()
    res = moe_dispatch(x, idx.to(dev), p, e, group, num_worst_tokens=worst)
    assert res.handle.backend == "DEEP_EP", res.handle.backend  # chosen without any setting
    fused = os.environ.get("TURBO_DEEPEP_FUSED") == "1" or dev.type == "cuda"
    assert (res.handle.state.pos is not None) == fused, "the fused path ran iff it was asked for (or on a GPU)"
    transport = os.environ.get("TURBO_DEEPEP_TRANSPORT")
    if transport in ("symm", "collective"):
        assert res.handle.state.transport == transport, (res.handle.state.transport, transport)
    _eq(res.recv_x, rx, "recv_x")
    assert res.recv_x.dtype == dtype and res.recv_token_indices.dtype == idx.dtype
    _eq(res.recv_token_indices, ri, "recv_token_indices")
    _eq(res.recv_token_probs, rp, "recv_token_probs")
    _eq(res.tokens_per_expert, tpe, "tokens_per_expert")
    assert res.tokens_per_expert.device.type == dev.type
    n_r = res.recv_x.shape[0]
    cmat = torch.zeros((n_r, k), dtype=F64)
    for i, (s, t) in enumerate(rows):
        cmat[i] = torch.tensor([_c(s, t, j) for j in range(k)])
    if dtype == torch.bfloat16:  # movement only: combined = x * (ranks the token went to)
        y = res.recv_x
    else:
        y = res.recv_x * res.recv_token_probs.sum(dim=1, keepdim=True)
    combined = moe_combine(y, group, res.handle)
    valid = ((idx >= 0) & (idx < e)).double()
    if dtype == torch.bfloat16:
        scale = _n_ranks(idx, e, world)
    else:
        scale = (valid * p64).sum(dim=1)  # each rank adds x * (its slots' probs): all valid slots
    _eq(combined, x64 * scale[:, None], "combined")
    assert combined.dtype == dtype
    g64 = torch.randint(-4, 5, tuple(x64.shape), generator=torch.Generator().manual_seed(seed + rank)).to(F64) / 4
    loss = (combined.float() * g64.float().to(dev)).sum() + (res.recv_token_probs * cmat.float().to(dev)).sum()
    loss.backward()
    _eq(x.grad, g64 * scale[:, None], "grad x")
    t = x64.shape[0]
    own_c = torch.tensor([[_c(rank, tt, j) for j in range(k)] for tt in range(t)], dtype=F64).reshape(t, k)
    gx_dot = (g64 * x64).sum(dim=1, keepdim=True) if dtype != torch.bfloat16 else torch.zeros((t, 1), dtype=F64)
    _eq(p.grad, valid * (gx_dot + own_c), "grad token_probs")


def _fp8_case(rank, world, group, dev, *, worst_kind, seed):
    """FP8 tokens travel as bytes with their fp32 scales: fresh dispatch, then a cached dispatch
    of other bytes and scales along the same handle."""
    from turbo_core.dispatch.launch.moe_dispatch import moe_dispatch_cached
    from turbo_core.ops import moe_dispatch

    e, k = 2 * world, 2
    equal = worst_kind != "exact"
    tokens = token_counts(world, equal)
    data = routed_inputs(world, seed, tokens, k, e, H)
    g = torch.Generator().manual_seed(seed + 1)
    raw = [torch.randint(0, 256, (tokens[r], H), generator=g, dtype=torch.uint8) for r in range(world)]
    scl = [torch.randn((tokens[r], 2), generator=g) for r in range(world)]
    worst = tokens[0] * world if equal else 0
    rows, _, ri, rp, tpe = _expected(data, rank, world, e, worst)
    n = worst or len(rows)
    want_raw = torch.zeros((n, H), dtype=torch.uint8)
    want_s = torch.zeros((n, 2), dtype=torch.float32)
    for i, (s, t) in enumerate(rows):
        want_raw[i], want_s[i] = raw[s][t], scl[s][t]
    _, idx, p64 = data[rank]
    x8 = raw[rank].to(dev).view(FP8)
    (recv_x, recv_s), recv_idx, recv_p, got_tpe, handle = moe_dispatch(
        (x8, scl[rank].to(dev)), idx.to(dev), p64.float().to(dev), e, group, num_worst_tokens=worst)
    assert recv_x.dtype == FP8
    _eq(recv_x.view(torch.uint8), want_raw, "recv_x bytes (fp8)")
    _eq(recv_s, want_s, "recv_x_scales")
    _eq(recv_idx, ri, "recv_token_indices (fp8)")
    _eq(recv_p, rp, "recv_token_probs (fp8)")
    _eq(got_tpe, tpe, "tokens_per_expert (fp8)")
    again, again_s = moe_dispatch_cached((x8.view(torch.uint8) ^ 0x5A).view(FP8), -scl[rank].to(dev), handle)
    want2 = want_raw ^ 0x5A
    for i in range(len(rows), n):
        want2[i] = 0
    _eq(again.view(torch.uint8), want2, "cached dispatch bytes (fp8)")
    _eq(again_s, -want_s, "cached dispatch scales")


@contextlib.contextmanager
def _no_host_reads():
    """Make every tensor-to-host read raise inside the block (the worst-case mode needs none)."""
    names = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "numpy")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def refuse(name):
        def f(*a, **kw):
            raise AssertionError(f"host read Tensor.{name} in the num_worst_tokens path")
        return f

    for n in names:
        setattr(torch.Tensor, n, refuse(n))
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


def _no_sync_case(rank, world, group, dev, *, seed):
    """The DEEP_EP kernels themselves in the worst-case mode read no tensor value on the host."""
    from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs
    from turbo_deepep.all_to_all import combine, dispatch

    e, k = 2 * world, 2
    tokens = token_counts(world, True)
    data = routed_inputs(world, seed, tokens, k, e, H)
    worst = tokens[0] * world
    x64, idx, p64 = data[rank]
    args = MoeDispatchArgs(x64.float().to(dev), None, idx.to(dev), p64.float().to(dev), e, group, num_worst_tokens=worst)
    with _no_host_reads():
        recv_x, _, _, _, _, handle = dispatch.moe_dispatch(args)
        out, _ = combine.moe_combine(MoeCombineArgs(recv_x, handle, group))
        again, *_ = dispatch.moe_dispatch(MoeDispatchArgs(out, None, None, None, 0, group, handle))
    _eq(out, x64 * _n_ranks(idx, e, world)[:, None], "combined (no host reads)")
    scaled = [(x * _n_ranks(i, e, world)[:, None], i, pr) for x, i, pr in data]  # what `out` holds on each rank
    _eq(again, _expected(scaled, rank, world, e, worst)[1], "cached dispatch (no host reads)")


def _moe_reference(xs, wr, w1, w2, topk, capacity):
    """``(float64 MoE outputs of every rank's tokens xs, margin)``: softmax top-k routing and
    Megatron's per-rank capacity by probs, the selection taken from detached values; ``margin`` is
    the smallest gap between a kept and a rejected score (the fp32 run must make the same choices)."""
    outs, margin = [], float("inf")
    f = w2.shape[2]
    for x in xs:
        scores = torch.softmax(x @ wr.T, dim=-1)
        t, e = scores.shape
        srt = torch.sort(scores.detach(), dim=1, descending=True, stable=True)
        order = srt.indices[:, :topk]
        if topk < e:
            margin = min(margin, (srt.values[:, topk - 1] - srt.values[:, topk]).min().item())
        rmap = torch.zeros((t, e), dtype=torch.bool).scatter_(1, order, True)
        if capacity is not None:
            kept = torch.zeros_like(rmap)
            for ex in range(e):
                toks = sorted((i for i in range(t) if rmap[i, ex]), key=lambda i: (-float(scores[i, ex]), i))
                kept[toks[:capacity], ex] = True
                if len(toks) > capacity:
                    margin = min(margin, float(scores[toks[capacity - 1], ex] - scores[toks[capacity], ex]))
            rmap = kept
        out = torch.zeros_like(x)
        for ex in range(e):
            hh = x @ w1[ex].T
            out = out + (scores[:, ex] * rmap[:, ex])[:, None] * ((torch.nn.functional.silu(hh[:, :f]) * hh[:, f:]) @ w2[ex].T)
        outs.append(out)
    return outs, margin


def _close_fp32(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """fp32 against float64: rtol 1e-4, atol 1e-4 scaled by the reference's largest magnitude (the
    gradients are sums of many products, where a small element carries its neighbours' rounding)."""
    want = want.detach()
    atol = 1e-4 * max(1.0, want.abs().max().item() if want.numel() else 1.0)
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=1e-4, atol=atol, msg=lambda m: f"{what}: {m}")


def _moe_layer_case(rank, world, group, dev, *, seed, **cfg):
    """turbo_core's MoELayer with its experts spread over the ranks equals one float64 MoE holding
    every expert: outputs, the input and router gradients (this rank's loss), and the expert
    gradients (every rank's loss), over three SGD steps (the router's gradient summed over the ranks)."""
    from turbo_core import use_backend
    from turbo_core.modules.moe_token_dispatcher import MoELayer, expert_capacity

    # on a GPU the fp32 GEMMs stay fp32 (no TF32 tiles), to compare with float64
    pin = use_backend("TORCH", primitives=("grouped_gemm", "grouped_gemm_variable_k")) if dev.type != "cpu" \
        else contextlib.nullcontext()
    with pin:
        h, f, e, k, t = 8, 6, 2 * world, 2, 10
        g = torch.Generator().manual_seed(seed)
        wr = torch.rand((e, h), generator=g, dtype=F64) - 0.5
        w1 = (torch.rand((e, 2 * f, h), generator=g, dtype=F64) - 0.5)
        w2 = (torch.rand((e, h, f), generator=g, dtype=F64) - 0.5)
        xs = [torch.randn((t, h), generator=g, dtype=F64) for _ in range(world)]
        targets = [torch.randn((t, h), generator=g, dtype=F64) for _ in range(world)]
        e_l = e // world
        mine = slice(rank * e_l, (rank + 1) * e_l)
        layer = MoELayer(h, f, e, k, group, device=dev, **cfg)
        with torch.no_grad():
            layer.router_weight.copy_(wr)
            layer.fc1.weight.copy_(w1[mine])
            layer.fc2.weight.copy_(w2[mine])
        ref = [p.clone().requires_grad_() for p in (wr, w1, w2)]
        cap = expert_capacity(t, k, e, cfg["capacity_factor"]) if cfg.get("capacity_factor") else None
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        opt64 = torch.optim.SGD(ref, lr=0.1)
        x = xs[rank].float().to(dev).requires_grad_()
        for step in range(3):
            opt.zero_grad()
            opt64.zero_grad()
            x.grad = None
            x64s = [xx.clone().requires_grad_() for xx in xs]
            out = layer(x)
            want, margin = _moe_reference(x64s, *ref, k, cap)
            assert margin > 1e-5, f"test setup: step {step} routing margin {margin:.2e} too small to compare fp32 with fp64"
            _close_fp32(out, want[rank], f"step {step} output")
            loss = (out - targets[rank].float().to(dev)).pow(2).mean()
            loss.backward()
            own_router = torch.autograd.grad((want[rank] - targets[rank]).pow(2).mean(), ref[0], retain_graph=True)[0]
            sum((w - tt).pow(2).mean() for w, tt in zip(want, targets, strict=True)).backward()
            checks = [(x.grad, x64s[rank].grad, "grad x"), (layer.router_weight.grad, own_router, "grad router (own loss)"),
                      (layer.fc1.weight.grad, ref[1].grad[mine], "grad fc1"), (layer.fc2.weight.grad, ref[2].grad[mine], "grad fc2")]
            for got, exp, what in checks:
                _close_fp32(got, exp, f"step {step} {what}")
            dist.all_reduce(layer.router_weight.grad, group=group)  # the replicated router, as data parallelism does
            opt.step()
            opt64.step()


def _run_cases(rank, world, group, dev):
    cases = [
        ("exact fp32", lambda: _autograd_case(rank, world, group, dev, dtype=torch.float32, worst_kind="exact", seed=1)),
        ("exact bf16", lambda: _autograd_case(rank, world, group, dev, dtype=torch.bfloat16, worst_kind="exact", seed=2)),
        ("worst fp32", lambda: _autograd_case(rank, world, group, dev, dtype=torch.float32, worst_kind="bound", seed=3)),
        ("worst tight fp32", lambda: _autograd_case(rank, world, group, dev, dtype=torch.float32, worst_kind="tight",
                                                    seed=4)),
        ("worst no host reads", lambda: _no_sync_case(rank, world, group, dev, seed=5)),
        ("moe layer dropless", lambda: _moe_layer_case(rank, world, group, dev, seed=8)),
        ("moe layer capacity padded", lambda: _moe_layer_case(rank, world, group, dev, seed=9, capacity_factor=0.6,
                                                              pad_to_capacity=True)),
        ("moe layer worst", lambda: _moe_layer_case(rank, world, group, dev, seed=10, num_worst_tokens=10 * world)),
    ]
    if FP8 is not None:
        cases += [("fp8 exact", lambda: _fp8_case(rank, world, group, dev, worst_kind="exact", seed=6)),
                  ("fp8 worst", lambda: _fp8_case(rank, world, group, dev, worst_kind="bound", seed=7))]
    for name, run in cases:
        try:
            run()
        except Exception as exc:
            raise AssertionError(f"rank {rank}/{world}, case {name!r}: {exc}") from exc


class _SharedBuffers:
    """The symmetric transport's buffers for CPU processes: one shared-memory tensor per rank,
    made before the fork, so every process maps every rank's buffer at the same address; the
    barrier is gloo's (kernels on the CPU are done when they return)."""

    def __init__(self, bufs: list[torch.Tensor], rank: int, group) -> None:
        self.local, self.group, self.capacity = bufs[rank], group, bufs[rank].numel()
        self.peers = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64)
        self.barriers = 0

    def barrier(self) -> None:
        self.barriers += 1
        dist.barrier(group=self.group)


def _use_shared_buffers(rank: int, bufs: list[torch.Tensor]) -> list:
    from turbo_deepep.all_to_all import symm

    made = []

    def factory(group, device, nbytes):
        if nbytes > bufs[rank].numel():
            raise AssertionError(f"test setup: a call needs {nbytes} bytes of symmetric buffer")
        made.append(_SharedBuffers(bufs, rank, group))
        return made[-1]

    symm.set_provider(factory)
    return made


def _worker(rank: int, world: int, store: str, backend: str, bufs: list[torch.Tensor] | None = None) -> None:
    dev = join_group(rank, world, store, backend)
    try:
        made = _use_shared_buffers(rank, bufs) if bufs is not None else None
        _run_cases(rank, world, dist.group.WORLD, dev)
        if made is not None:  # the symmetric transport moved the rows, two barriers per exchange at least
            assert made and sum(b.barriers for b in made) >= 2 * 10, [b.barriers for b in made]
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _launch(world: int, tmp_path, backend: str, method: str | None = None, bufs=None) -> None:
    store = str(tmp_path / f"store-{backend}-{world}")
    method = method or ("fork" if backend == "gloo" else "spawn")  # forked children skip the imports (CPU only)
    mp.start_processes(_worker, args=(world, store, backend, bufs), nprocs=world, join=True, start_method=method)


# Two world sizes: 2 (each token goes to 0, 1 or 2 ranks) and 4 (with a rank that has no tokens).
@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo(world, tmp_path):
    _launch(world, tmp_path, "gloo")


# The same cases on the fused Triton path (turbo_deepep.all_to_all.fused), which GPUs take by default:
# forced onto the CPU tensors here, its kernels run in Triton's interpreter.
@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_fused(world, tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="the fused path's kernels are Triton kernels")
    monkeypatch.setenv("TURBO_DEEPEP_FUSED", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # conftest.py sets it too, before anything imports triton
    _launch(world, tmp_path, "gloo")


# The fused path over the symmetric-memory transport (turbo_deepep.all_to_all.symm_path): the
# packing kernel stores rows straight into the other ranks' buffers, here shared-memory CPU tensors
# mapped at the same address in every forked process; the same cases, bit for bit.
@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_fused_symmetric(world, tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="the fused path's kernels are Triton kernels")
    monkeypatch.setenv("TURBO_DEEPEP_FUSED", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TURBO_DEEPEP_TRANSPORT", "symm")
    bufs = [torch.zeros(4 << 20, dtype=torch.uint8).share_memory_() for _ in range(world)]
    _launch(world, tmp_path, "gloo", bufs=bufs)


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(two_gpu_reason() is not None, reason=two_gpu_reason() or "")
@pytest.mark.parametrize("transport", ["symm", "collective"])
def test_nccl(tmp_path, monkeypatch, transport):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("TURBO_DEEPEP_TRANSPORT", transport)  # symm: GPUs of one host write rows into each other
    _launch(2, tmp_path, "nccl")
