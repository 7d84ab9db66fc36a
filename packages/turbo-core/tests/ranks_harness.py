"""Start ``world`` processes that each run a check function over torch.distributed (gloo on the CPU,
forked; NCCL with one GPU each, spawned: CUDA cannot be used in forked children). The check is a
module-level function ``check(rank, world, dev)``; a rank that raises fails the test."""

from __future__ import annotations

import datetime
import os
import sys
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

#: The mark of a test that needs two GPUs and NCCL.
needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2 or not dist.is_nccl_available(),
    reason="needs two CUDA GPUs and NCCL")


def _worker(rank: int, world: int, store: str, check, backend: str) -> None:
    torch.set_num_threads(1)
    dev, kw = torch.device("cpu"), {}
    if backend == "nccl":
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
        kw["device_id"] = dev
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120), **kw)
    try:
        check(rank, world, dev)
    except BaseException:
        # say why here: a rank that fails leaves the others waiting in a collective, and tearing down
        # the group could wait for them; exit at once, so the join reports this rank's failure
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(check, world: int, tmp_path, backend: str = "gloo") -> None:
    """Run ``check`` on ``world`` ranks over ``backend`` (``"gloo"`` or ``"nccl"``)."""
    mp.start_processes(_worker, args=(world, str(tmp_path / "store"), check, backend), nprocs=world, join=True,
                       start_method="fork" if backend == "gloo" else "spawn")
