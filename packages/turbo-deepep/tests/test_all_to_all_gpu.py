"""DEEP_EP's dispatch/combine at the DeepSeek-V3 shape on two GPUs over NCCL (``gpu`` and
``distributed``; skipped with the reason below two GPUs), through ``turbo_core.ops``, both transports
(``symm``: the GPUs write rows into each other's buffers; ``collective``: NCCL all-to-all).

Per rank: 4096 tokens of hidden 7168, top-8 of 256 experts routed uniformly at random. The exactness
suite at small shapes is ``test_all_to_all_distributed.py::test_nccl``; here the model shape:

* dispatch -> identity -> combine gives ``x * (ranks the token went to)``, exact in bf16 for two
  ranks; the ``num_worst_tokens`` mode receives the exact mode's rows, then zero rows with indices -1,
  the same tokens per expert, and combines to the same result;
* FP8 tokens with per-128 fp32 scales arrive as the bf16 run's rows do (bytes and scales: their fp32
  combine is the sources times the rank count);
* the worst-case dispatch + combine makes no host sync (``set_sync_debug_mode("error")``), is captured
  in a CUDA graph on both ranks and replayed on new tokens, equal to ``x * ranks`` again.
"""

from __future__ import annotations

import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from turbo_core.testing.host_sync import no_host_sync

T, H, K, E = 4096, 7168, 8, 256


def _gpu_reason() -> str | None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return "needs 2 GPUs (NCCL/RCCL between two devices of one host)"
    if not dist.is_nccl_available():
        return "this torch has no NCCL/RCCL"
    return None


def _n_ranks(idx: torch.Tensor, world: int) -> torch.Tensor:
    """``[T, 1]``: how many ranks each token goes to (ranks holding one of its valid experts)."""
    per = E // world
    owner = torch.where(idx >= 0, idx // per, -1)
    return (owner[:, :, None] == torch.arange(world, device=idx.device)).any(1).sum(1, keepdim=True)


def _rank_checks(rank: int, world: int, group, dev: torch.device) -> None:
    from turbo_core.ops import moe_combine, moe_dispatch

    g = torch.Generator().manual_seed(1234 + rank)
    idx = torch.rand((T, E), generator=g).topk(K, dim=1).indices.to(dev)
    x = torch.randn((T, H), generator=g).to(dev, torch.bfloat16)
    probs = torch.rand((T, K), generator=g).to(dev)
    scale = _n_ranks(idx, world)
    want = x * scale.to(x.dtype)

    res = moe_dispatch(x, idx, probs, E, group)
    assert res.handle.backend == "DEEP_EP", res.handle.backend
    assert torch.equal(moe_combine(res.recv_x, group, res.handle), want), "combine(dispatch(x)) != x * ranks"
    worst = moe_dispatch(x, idx, probs, E, group, num_worst_tokens=world * T)
    n = res.recv_x.shape[0]
    assert torch.equal(worst.recv_x[:n], res.recv_x) and not worst.recv_x[n:].any(), "worst mode: rows / padding"
    assert torch.equal(worst.recv_token_indices[:n], res.recv_token_indices), "worst mode: indices"
    assert bool((worst.recv_token_indices[n:] == -1).all()), "worst mode: padding indices"
    assert torch.equal(worst.tokens_per_expert, res.tokens_per_expert), "worst mode: tokens per expert"
    assert torch.equal(moe_combine(worst.recv_x, group, worst.handle), want), "worst mode: combine"

    x8 = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
    s8 = torch.rand((T, H // 128), generator=g).to(dev)
    (r8, rs8), *_, h8 = moe_dispatch((x8, s8), idx, probs, E, group)
    assert r8.dtype == torch.float8_e4m3fn and r8.shape == res.recv_x.shape and rs8.shape == (n, H // 128)
    assert torch.equal(moe_combine(r8.float(), group, h8), x8.float() * scale), "fp8 rows"
    assert torch.equal(moe_combine(rs8, group, h8), s8 * scale), "fp8 scales"

    static_x = x.clone()

    def round_trip():
        r = moe_dispatch(static_x, idx, probs, E, group, num_worst_tokens=world * T)
        return moe_combine(r.recv_x, group, r.handle)

    with no_host_sync():
        round_trip()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # two warm-ups: every buffer and communicator exists before the capture
        for _ in range(2):
            round_trip()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    dist.barrier(group=group)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = round_trip()
    static_x.copy_(torch.randn((T, H), generator=g).to(dev, torch.bfloat16))
    dist.barrier(group=group)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, static_x * scale.to(static_x.dtype)), "graph replay on new tokens"


def _worker(rank: int, world: int, store: str) -> None:
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300), device_id=dev)
    try:
        with torch.no_grad():
            _rank_checks(rank, world, dist.group.WORLD, dev)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(_gpu_reason() is not None, reason=_gpu_reason() or "")
@pytest.mark.parametrize("transport", ["symm", "collective"])
def test_deepseek_v3_shape_on_two_gpus(tmp_path, monkeypatch, transport):
    monkeypatch.setenv("TURBO_DEEPEP_TRANSPORT", transport)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE", "0"))
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"))
    mp.start_processes(_worker, args=(2, str(tmp_path / "store")), nprocs=2, join=True, start_method="spawn")
