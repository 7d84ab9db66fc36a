"""The symmetric-memory transport of the fused path: GPUs of one node write rows straight into each
other's buffers, with no collective in between.

Every rank of the group holds one buffer of the same size, mapped into every other rank's address
space (``torch.distributed._symmetric_memory``: CUDA IPC / VMM over NVLink, or HIP's equivalent):

* bytes ``[0, header_bytes(W))``: an int64 ``[W, W]`` count matrix, ``C[s, d]`` = rows rank ``s``
  sends rank ``d`` (exact mode: every rank writes its row into every rank's header);
* then the rows this rank receives (a dispatch) or gets back (a combine), packed as
  :mod:`turbo_deepep.all_to_all.payload` rows.

One exchange is: a barrier (every rank is done reading its buffer), the packing kernel storing each
row into its destination's buffer, a barrier (every row has landed), then the local kernels read the
buffer. The barrier is ``_SymmetricMemory.barrier`` (a release store to each peer's signal pad and
an acquire wait on one's own, system scope): it orders the stores of the kernels before it on this
stream against the loads of the kernels after it on the peer's. The rows a rank stores are the ones
an ``all_to_all_single`` would carry, in the same places, so results are bit-identical to the
collective path; what is saved is the send buffer's pass and the receive buffer's copy through
NCCL's channels, and NCCL's launch.

Selected for a group whose ranks are GPUs of one host (checked once per group: one
``all_gather_object`` of host name and device UUID, then a test rendezvous whose outcome every rank
learns, so the ranks always agree). ``TURBO_DEEPEP_TRANSPORT=collective`` turns it off (the
``all_to_all_single`` path); ``=symm`` makes a failed check an error instead of a fallback.

Buffers grow (a collective re-rendezvous, after a device synchronize) when a call needs more bytes
than the current one holds; every rank computes the same need (the same ``T`` / ``num_worst_tokens``
in worst mode, the same count matrix in exact mode), so they grow together. A dispatch captured in
a CUDA graph must not grow: run it once eagerly first.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Protocol

import torch

from turbo_core.symmetric import symmetric_reason

__all__ = ["ENV", "Buffers", "buffers", "header_bytes", "reason", "set_provider"]

ENV = "TURBO_DEEPEP_TRANSPORT"
_OFF = ("collective", "nccl", "rccl", "all_to_all", "off", "0")
_ON = ("symm", "symmetric", "1", "on")
_ALIGN = 256
_GRAIN = 2 << 20  # buffers grow in 2 MiB steps, by half again at least


class Buffers(Protocol):
    """One group's symmetric buffers as this rank sees them.

    ``local``: uint8 ``[capacity]``, this rank's buffer; ``peers``: int64 ``[W]`` on the device, every
    rank's buffer address in this process (``peers[rank] == local.data_ptr()``); ``barrier()``:
    returns when, in stream order, every rank has called it."""

    local: torch.Tensor
    peers: torch.Tensor
    capacity: int

    def barrier(self) -> None: ...


def header_bytes(world: int) -> int:
    """Bytes of the count matrix at the start of each buffer (int64 ``[W, W]``, 256-byte aligned)."""
    return -(-world * world * 8 // _ALIGN) * _ALIGN


class _TorchSymmetric:
    """:class:`Buffers` over ``torch.distributed._symmetric_memory``."""

    def __init__(self, group, device: torch.device, nbytes: int) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        enabled = getattr(symm_mem, "is_symm_mem_enabled_for_group", None)
        if enabled is not None and not enabled(group.group_name):  # older torch: opt the group in first
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group.group_name)
        self.local = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        self.handle = symm_mem.rendezvous(self.local, group)
        self.capacity = nbytes
        addrs = [self._peer_address(r) for r in range(self.handle.world_size)]
        if addrs[self.handle.rank] != self.local.data_ptr():
            raise RuntimeError("the symmetric buffer's own mapping is not the tensor's address "
                               f"({addrs[self.handle.rank]:#x} != {self.local.data_ptr():#x})")
        self.peers = torch.tensor(addrs, dtype=torch.int64, device=device)

    def _peer_address(self, r: int) -> int:
        get = getattr(self.handle, "get_remote_tensor", None)
        if get is not None:
            return get(r, self.local.shape, self.local.dtype).data_ptr()
        return self.handle.get_buffer(r, self.local.shape, self.local.dtype, 0).data_ptr()

    def barrier(self) -> None:
        self.handle.barrier(channel=0)


_Factory = Callable[[object, torch.device, int], Buffers]
_provider: _Factory | None = None
_cache: dict[tuple, Buffers] = {}
_verdicts: dict[tuple, str | None] = {}


def set_provider(factory: _Factory | None) -> None:
    """Tests: make :func:`buffers` call ``factory(group, device, nbytes)`` instead of allocating
    symmetric memory, on any device (None: back to symmetric memory). Clears the caches."""
    global _provider
    _provider = factory
    _cache.clear()
    _verdicts.clear()


def _flag() -> str:
    """The variable's value, lower-cased: "" / "auto", one of ``_OFF`` or one of ``_ON``."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "auto") + _OFF + _ON:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected auto (the default: symmetric memory where the "
                         "group's ranks are GPUs of one host), collective (all_to_all_single) or symm")
    return value


def _key(group, device: torch.device) -> tuple:
    return (getattr(group, "group_name", id(group)), device.type, device.index)


def _probe(group, device: torch.device) -> str | None:
    """Why the symmetric transport cannot serve ``group`` (None: it can); a collective call, with
    the same answer on every rank. The buffers opened to find out are kept for the group."""
    why, trial = symmetric_reason(group, device, lambda: _TorchSymmetric(group, device, _GRAIN))
    if why is None:
        _cache[_key(group, device)] = trial
    return why


def reason(group, device: torch.device) -> str | None:
    """Why the fused path should not use this transport for ``group`` / ``device`` (None: use it).
    The first call per group is collective (every rank makes it at the same point: the first
    fused dispatch); later calls read the cached verdict."""
    flag = _flag()
    if flag in _OFF:
        return f"{ENV}={flag} asks for the all_to_all_single path"
    if _provider is not None:
        return None
    if device.type != "cuda":
        return "the tensors are not on a GPU"
    key = _key(group, device)
    if key not in _verdicts:
        _verdicts[key] = _probe(group, device)
    why = _verdicts[key]
    if why is not None and flag in _ON:
        raise RuntimeError(f"{ENV}={flag}: the symmetric-memory transport cannot serve this group: {why}")
    return why


def buffers(group, device: torch.device, nbytes: int) -> Buffers:
    """This rank's :class:`Buffers` for ``group`` holding at least ``nbytes``; every rank must ask
    for the same ``nbytes`` at the same point (a larger one re-allocates, collectively)."""
    key = _key(group, device)
    have = _cache.get(key)
    if have is not None and have.capacity >= nbytes:
        return have
    size = max(nbytes, int(have.capacity * 1.5) if have is not None else 0)
    size = -(-size // _GRAIN) * _GRAIN
    if have is not None and device.type == "cuda":
        torch.cuda.synchronize(device)  # the old buffer may still be read by this rank's kernels
    made = (_provider or _TorchSymmetric)(group, device, size)
    _cache[key] = made
    return made
