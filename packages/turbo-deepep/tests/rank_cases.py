"""Inputs and skip reasons shared by the multi-process tests of turbo-deepep (dispatch/combine,
the DeepEP-compatible ``Buffer``, the fused MoE layer)."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

F64 = torch.float64


def join_group(rank: int, world: int, store: str, backend: str) -> torch.device:
    """In a spawned rank: one CPU thread, GPU ``rank`` for NCCL/RCCL, and the default process group
    through the file ``store`` (120 s timeout). Returns the rank's device."""
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    return dev


def routed_inputs(world: int, seed: int, tokens: list[int], k: int, e: int, hidden: int,
                  idx_dtype=torch.int64) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per rank ``(x [T, hidden], idx [T, K], weights [T, K])``, x and weights float64 (multiples of
    1/8, so every sum is exact): expert ``e - 1`` never routed (an expert with zero tokens), token 0
    of every rank routed nowhere, ~30% of the other slots -1, repeated ids allowed."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for r in range(world):
        t = tokens[r]
        idx = torch.randint(0, e - 1, (t, k), generator=g)
        idx[torch.rand((t, k), generator=g) < 0.3] = -1
        if t:
            idx[0] = -1
        x = torch.randint(-32, 32, (t, hidden), generator=g).to(F64) / 8
        w = torch.randint(1, 9, (t, k), generator=g).to(F64) / 8
        out.append((x, idx.to(idx_dtype), w))
    return out


def token_counts(world: int, equal: bool) -> list[int]:
    """Tokens per rank: 6 each, or unequal with rank 2 of 4 holding none."""
    return [6] * world if equal else [(5, 7, 0, 3)[r % 4] for r in range(world)]


def two_gpu_reason() -> str | None:
    """Why an NCCL/RCCL run on two GPUs cannot happen here, or ``None``."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return "needs 2 GPUs for NCCL/RCCL"
    if not dist.is_nccl_available():
        return "this torch has no NCCL/RCCL"
    return None
