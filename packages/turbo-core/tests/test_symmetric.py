"""``turbo_core.symmetric.symmetric_reason`` over gloo ranks: every rank gets the same verdict, the
reason names what is missing, and the trial workspace comes back only when every rank opened it.
The GPUs are stood in for by device properties with a uuid per rank (or one shared uuid)."""

from __future__ import annotations

import types

import torch
import torch.distributed as dist
from ranks_harness import run_ranks

from turbo_core.symmetric import symmetric_reason


class _Workspace:
    def __init__(self, fail: bool) -> None:
        if fail:
            raise RuntimeError("rendezvous refused\nsecond line")
        self.barriers = 0

    def barrier(self) -> None:
        self.barriers += 1


def _gpus(uuid_of_rank):
    """Replace torch.cuda.get_device_properties in this rank's process."""
    rank = dist.get_rank()
    torch.cuda.get_device_properties = lambda device: types.SimpleNamespace(uuid=uuid_of_rank(rank))


def _serves(rank, world, dev):
    _gpus(lambda r: f"gpu-{r}")
    why, ws = symmetric_reason(dist.group.WORLD, torch.device("cuda", rank), lambda: _Workspace(False))
    assert why is None and isinstance(ws, _Workspace) and ws.barriers == 1


def _shared_gpu(rank, world, dev):
    _gpus(lambda r: "gpu-0")
    opened = []
    why, ws = symmetric_reason(dist.group.WORLD, torch.device("cuda", 0), lambda: opened.append(1))
    assert (why, ws, opened) == ("two ranks of the group share a GPU", None, [])


def _one_rank_fails(rank, world, dev):
    _gpus(lambda r: f"gpu-{r}")
    why, ws = symmetric_reason(dist.group.WORLD, torch.device("cuda", rank), lambda: _Workspace(rank == world - 1))
    assert why == "a symmetric-memory rendezvous failed (RuntimeError: rendezvous refused)" and ws is None


def test_every_rank_opens_a_workspace(tmp_path):
    run_ranks(_serves, 2, tmp_path)


def test_ranks_sharing_a_gpu_are_declined_before_any_rendezvous(tmp_path):
    run_ranks(_shared_gpu, 2, tmp_path)


def test_a_rendezvous_failing_on_one_rank_declines_on_all(tmp_path):
    run_ranks(_one_rank_fails, 3, tmp_path)
