"""How an async tensor-parallel op moves its chunks between ranks, and the symmetric buffers that
the ``symm`` transport moves them through.

Transports:

* ``symm``: every rank of the group holds one buffer of the same size, mapped into every other
  rank's address space (``torch.distributed._symmetric_memory``: CUDA IPC / VMM over NVLink). A
  chunk moves as one ``copy_`` between buffers on a side stream: a ``cudaMemcpyAsync`` that the
  GPU's copy engines carry over NVLink, using no SMs, so the GEMMs on the caller's stream keep the
  whole GPU. The buffer's barrier (``_SymmetricMemory.barrier``: a release store to every peer's
  signal pad and an acquire wait on one's own, system scope) orders the copies queued before it on
  one rank against the copies queued after it on the others.
* ``nccl``: the process group's collectives queued with ``async_op=True``, one per split (NCCL runs
  them on its own stream; gloo, on the CPU, on its threads); each chunk's GEMM waits for its own
  collective only.

Selection, once per group and device, collectively (every rank learns every rank's answer, so all
agree): ``symm`` when the ranks are distinct CUDA GPUs of one host and a test rendezvous succeeds on
every rank; otherwise ``nccl``, with the reason. ``TURBO_ASYNC_TP_TRANSPORT`` overrides: ``nccl``
always takes the collectives; ``symm`` makes a failed check an error instead of a fallback; ``auto``
(or unset) is the default. The first call of an op on a group makes that check (a host sync and two
``all_gather_object``), so it must run eagerly before a CUDA graph captures the op.

On torch older than 2.11 the group is opted into symmetric memory here
(``enable_symm_mem_for_group``); 2.11 resolves a group's store by itself and deprecates that call.

Workspace: one buffer per group and device, shared by the three ops. It grows (collectively, after a
device synchronize) when a call needs more bytes than it holds; every rank asks for the same size at
the same call, because the ops require the same shapes on every rank. A call that would grow it
under CUDA-graph capture raises: run the op once eagerly first. Every call ends with a barrier after
its last access to the buffers, queued before the caller's stream continues, so the next call may
write them at once.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from typing import NamedTuple, Protocol

import torch

from turbo_core.symmetric import symmetric_reason

__all__ = ["ENV", "TRANSPORTS", "TransportChoice", "Workspace", "aligned", "choose", "enable_symm_mem",
           "set_workspace_provider", "typed", "workspace"]

ENV = "TURBO_ASYNC_TP_TRANSPORT"
TRANSPORTS = ("symm", "nccl")
_OFF = ("nccl", "collective", "collectives", "off", "0")
_ON = ("symm", "symmetric", "on", "1")
_ALIGN = 256
_GRAIN = 4 << 20  # buffers grow in 4 MiB steps, by half again at least


class TransportChoice(NamedTuple):
    """``name``: ``"symm"`` or ``"nccl"``; ``reason``: why ``nccl`` serves the group (None for ``symm``)."""

    name: str
    reason: str | None


class Workspace(Protocol):
    """One group's symmetric buffers as this rank sees them: ``local()`` and ``peer(r)`` are uint8
    ``[capacity]`` (``peer(rank)`` is ``local()``); ``barrier()`` returns, in stream order, when
    every rank has called it."""

    capacity: int

    def local(self) -> torch.Tensor: ...

    def peer(self, rank: int) -> torch.Tensor: ...

    def barrier(self) -> None: ...


def typed(buf: torch.Tensor, offset: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """``shape`` elements of ``dtype`` at byte ``offset`` of the uint8 buffer ``buf``."""
    count = 1
    for s in shape:
        count *= s
    return buf[offset:offset + count * dtype.itemsize].view(dtype).view(shape)


def aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def _torch_at_least(major: int, minor: int) -> bool:
    found = re.findall(r"\d+", torch.__version__)[:2]
    return tuple(int(x) for x in found) >= (major, minor)


def enable_symm_mem(group) -> None:
    """Opt ``group`` into symmetric memory where torch needs it (before 2.11; 2.11 resolves a group's
    store by itself and deprecates ``enable_symm_mem_for_group``)."""
    import torch.distributed._symmetric_memory as symm_mem

    enabled = getattr(symm_mem, "is_symm_mem_enabled_for_group", None)
    if not _torch_at_least(2, 11) and enabled is not None and not enabled(group.group_name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group.group_name)


class _TorchWorkspace:
    """:class:`Workspace` over ``torch.distributed._symmetric_memory``."""

    def __init__(self, group, device: torch.device, nbytes: int) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        enable_symm_mem(group)
        self._local = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        self._handle = symm_mem.rendezvous(self._local, group.group_name)
        self.capacity = nbytes
        me = self._handle.rank
        # get_remote_tensor (newer torch) maps the peer's tensor itself; get_buffer maps its
        # allocation from the start, which is the tensor only when the tensor starts it: checked below
        remote = getattr(self._handle, "get_remote_tensor", None)
        views = [remote(r, (nbytes,), torch.uint8) if remote is not None else
                 self._handle.get_buffer(r, (nbytes,), torch.uint8, 0) for r in range(self._handle.world_size)]
        if views[me].data_ptr() != self._local.data_ptr():
            raise RuntimeError("the symmetric buffer's own mapping is not the tensor's address "
                               f"({views[me].data_ptr():#x} != {self._local.data_ptr():#x})")
        self._peers = [self._local if r == me else v for r, v in enumerate(views)]

    def local(self) -> torch.Tensor:
        return self._local

    def peer(self, rank: int) -> torch.Tensor:
        return self._peers[rank]

    def barrier(self) -> None:
        self._handle.barrier(channel=0)


_Factory = Callable[[object, torch.device, int], Workspace]
_provider: _Factory | None = None
_workspaces: dict[tuple, Workspace] = {}
_verdicts: dict[tuple, TransportChoice] = {}
_groups: dict[tuple, object] = {}  # keeps each keyed group alive, so that its id is not reused


def set_workspace_provider(factory: _Factory | None) -> None:
    """Tests: make the ``symm`` transport serve every group of two or more ranks, on any device,
    through ``factory(group, device, nbytes)`` instead of symmetric memory (None: back to symmetric
    memory). Clears the caches."""
    global _provider
    _provider = factory
    _workspaces.clear()
    _verdicts.clear()
    _groups.clear()


def _flag() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "auto") + _OFF + _ON:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected auto (the default: symmetric memory where the "
                         "group's ranks are GPUs of one host), nccl (the process group's collectives) or symm")
    return value


def _key(group, device: torch.device) -> tuple:
    key = (group.group_name, id(group), device.type, device.index)
    _groups[key] = group
    return key


def _probe(group, device: torch.device) -> str | None:
    """Why ``symm`` cannot serve ``group`` on ``device`` (None: it can); collective, the same answer
    on every rank. The workspace opened to find out is kept for the group."""
    why, trial = symmetric_reason(group, device, lambda: _TorchWorkspace(group, device, _GRAIN))
    if why is None:
        _workspaces[_key(group, device)] = trial
    return why


def choose(group, world: int, device: torch.device) -> TransportChoice:
    """The transport of ``group`` for tensors on ``device`` (module docstring). The first call per
    group and device is collective: every rank makes it at the same point (an op's first call)."""
    flag = _flag()
    if world == 1:
        return TransportChoice("nccl", "the group has one rank")
    if flag in _OFF:
        return TransportChoice("nccl", f"{ENV}={flag} asks for the collectives")
    if _provider is not None:
        return TransportChoice("symm", None)
    if device.type != "cuda":
        why = f"the tensors are on {device.type} (symmetric memory needs CUDA GPUs)"
    else:
        key = _key(group, device)
        if key not in _verdicts:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError("async-TP: the first call on a group checks which transport serves it (a host "
                                   "sync); run the op once eagerly before capturing it in a CUDA graph")
            why = _probe(group, device)
            _verdicts[key] = TransportChoice("symm", None) if why is None else TransportChoice("nccl", why)
        choice = _verdicts[key]
        why = choice.reason
        if why is None:
            return choice
    if flag in _ON:
        raise RuntimeError(f"{ENV}={flag}: symmetric memory cannot serve this group: {why}")
    return TransportChoice("nccl", why)


def workspace(group, device: torch.device, nbytes: int) -> Workspace:
    """This rank's :class:`Workspace` of ``group`` holding at least ``nbytes``; every rank asks for
    the same ``nbytes`` at the same call (a larger one re-allocates, collectively)."""
    key = _key(group, device)
    have = _workspaces.get(key)
    if have is not None and have.capacity >= nbytes:
        return have
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"async-TP: the symmetric workspace must grow to {nbytes} bytes, which cannot happen "
                           "during CUDA-graph capture; run the op once eagerly (same shapes) before capturing it")
    size = max(nbytes, int(have.capacity * 1.5) if have is not None else 0)
    size = -(-size // _GRAIN) * _GRAIN
    if have is not None:
        # every rank's last call ended with a barrier after its reads of this buffer: once this rank's
        # queue has drained, no rank touches the old buffer any more
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        _workspaces.pop(key)
    made = (_provider or _TorchWorkspace)(group, device, size)
    _workspaces[key] = made
    return made
