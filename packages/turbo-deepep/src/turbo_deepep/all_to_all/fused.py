"""The fused all-to-all path: the layout, packing, compaction, unpacking and the combine's sum as
five Triton kernels instead of about ninety small torch ops.

The torch path (:mod:`~turbo_deepep.all_to_all.layout`, :mod:`~turbo_deepep.all_to_all.payload`)
issues one op per step, so an eager dispatch spends several times the all-to-all itself on the host
launching them (the ``moe-dispatch`` suite measures it). This path computes the same things with the
same bytes and the same summation order, so its results are bit-identical to the torch path's
(tests/test_all_to_all_fused.py runs both).

Used for GPU tensors when Triton is importable and every field of the packed row is a whole number
of 4-byte words (``x`` rows of an even number of bf16/fp16 values or a multiple of 4 fp8 values);
``TURBO_DEEPEP_FUSED=0`` turns it off, ``=1`` also uses it for CPU tensors (with
``TRITON_INTERPRET=1``: the tests). One process (no communication) keeps the torch path.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from turbo_deepep.all_to_all.launch import launch
from turbo_deepep.all_to_all.payload import RowFormat

__all__ = ["Compacted", "Put", "compact", "enabled", "pack", "pack_compacted", "reduce", "route", "unpack"]

ENV = "TURBO_DEEPEP_FUSED"
_BLOCK = 1024
_SCAN = 2048  # the routing kernel's tokens a step (at most)
_COMPACT = 1024  # the compaction kernel's rows a step


class Put(NamedTuple):
    """Where :func:`pack` writes rows on the symmetric-memory transport.

    ``peers``: int64 ``[W]``, each rank's buffer address in this process; a row for rank ``d`` goes
    to row ``row0[d] + j`` (``row0``: int64 ``[W]``) past the buffer's first ``header_words`` int32
    words, ``j`` being its index among the rows for ``d``. The rows for ``d`` are the offs range
    ``[offs[d], offs[d + 1])`` (``offs`` int64 ``[W + 1]``; also the slot table's ranges when packing
    from one), or, with ``offs`` None and no slot table, rows ``[d * slot, (d + 1) * slot)``.
    ``ids_only_pad``: a row with no source writes its ids (-1) only."""

    peers: torch.Tensor
    row0: torch.Tensor
    header_words: int
    offs: torch.Tensor | None = None
    slot: int = 0
    ids_only_pad: bool = False


def _triton_ok() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means the torch path
        return False
    return True


def enabled(fmt: RowFormat, device: torch.device) -> bool:
    """Whether the fused path serves rows of ``fmt`` on ``device``."""
    flag = os.environ.get(ENV, "").strip().lower()
    if flag in ("0", "off", "false", "no"):
        return False
    if device.type == "cpu" and flag not in ("1", "on", "true", "yes"):
        return False
    if any(f.nbytes % 4 for f in fmt.fields.values()):
        return False
    return _triton_ok()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _k():
    from turbo_deepep.all_to_all import fused_kernels

    return fused_kernels


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous ``[N, C]`` tensor as int32 words ``[N, C * size / 4]``."""
    return t.contiguous().view(torch.uint8).view(torch.int32)


def _word_offset(fmt: RowFormat, name: str) -> tuple[int, int]:
    f = fmt.fields.get(name)
    return (0, 0) if f is None else (f.start // 4, f.nbytes // 4)


def route(idx: torch.Tensor, num_experts: int, world: int, slot: int, *, put_counts=None):
    """``(slot_tok int64 [W, slot], pos int32 [T, W], counts int64 [W])`` of ``idx [T, K]``: the
    tokens for each rank in increasing index (-1 past the count; tokens past ``slot`` not listed),
    each token's row within its rank's list (-1: not sent) and the tokens each rank should get.

    ``put_counts`` ``(peers, rank)`` (the symmetric-memory transport): ``counts`` is also written as
    row ``rank`` of the int64 ``[W, W]`` count matrix at the start of every rank's buffer (``peers``:
    int64 ``[W]``, their addresses)."""
    t, k = idx.shape
    dev = idx.device
    if not (t and k):  # nothing to scan: nothing sent
        if put_counts is None:
            return (torch.full((world, slot), -1, dtype=torch.int64, device=dev),
                    torch.full((t, world), -1, dtype=torch.int32, device=dev),
                    torch.zeros((world,), dtype=torch.int64, device=dev))
        # the counts (zeros) must still reach the other ranks: scan rows routed nowhere
        none = torch.full((max(t, 1), 1), -1, dtype=torch.int64, device=dev)
        slot_tok, pos, counts = route(none, num_experts, world, max(slot, 1), put_counts=put_counts)
        return slot_tok[:, :slot], pos[:t], counts
    # the kernel writes every element of all three (program d: column d of pos, row d of slot_tok);
    # one allocation holds them (an eager call is host-bound: one allocation, not three)
    n = world * slot + world
    block = torch.empty((n + -(-t * world // 2),), dtype=torch.int64, device=dev)
    slot_tok, counts = block[: world * slot].view(world, slot), block[world * slot: n]
    pos = block[n:].view(torch.int32)[: t * world].view(t, world)
    peers, rank = put_counts if put_counts is not None else (counts, 0)
    block_t = min(_SCAN, _pow2(t))
    block_k = _pow2(k)
    # one program a rank walks all T tokens, 2048 a step on 8 warps (tuned on sm90; the `moe-dispatch`
    # suite times the dispatch it is part of): the scan lies on the critical path of every dispatch
    launch(_k().route_kernel, (world,),
           (idx.contiguous(), slot_tok, pos, counts, peers, t, k, num_experts // world, world, slot, rank),
           {"BLOCK_T": block_t, "BLOCK_K": block_k, "PUT_COUNTS": put_counts is not None},
           num_warps=8 if block_t * block_k >= 8192 else 4)
    return slot_tok, pos, counts


def pack(fmt: RowFormat, tensors: dict, n_rows: int, n_src: int, *, rows: torch.Tensor | None = None,
         slots: torch.Tensor | None = None, offs: torch.Tensor | None = None, num_experts: int = 0,
         put: Put | None = None):
    """``(uint8 [n_rows, B] or None, tokens)``: packed row ``r`` holds source row ``rows[r]``
    (``rows`` None: ``r``; ``slots`` ``[W, S]`` with ``offs`` int64 ``[W + 1]``: the rank-major slot
    table, and then ``tokens`` int64 ``[n_rows]`` is the source row of each packed row, else None) of
    ``x``, ``scales``, ``probs`` and the expert ids from ``idx`` (valid ids, else -1;
    ``num_experts``). Rows with no source (-1 or ``>= n_src``) are zero with ids -1.

    ``put`` (the symmetric-memory transport): the rows go straight into the ranks' buffers instead of
    a local send buffer (returned as None): see :class:`Put`."""
    dev = tensors["x"].device
    out = None if put is not None else torch.empty((n_rows, fmt.row_bytes), dtype=torch.uint8, device=dev)
    tokens = torch.empty((n_rows,), dtype=torch.int64, device=dev) if slots is not None else None
    if n_rows == 0:
        return out, tokens
    x = _words(tensors["x"])
    x_off, x_words = _word_offset(fmt, "x")
    s_off, s_words = _word_offset(fmt, "scales")
    p_off, _ = _word_offset(fmt, "probs")
    i_off, _ = _word_offset(fmt, "idx")
    has_s, has_p, has_i = s_words > 0, "probs" in fmt.fields, "idx" in fmt.fields
    k = fmt.fields["probs"].cols if has_p else (fmt.fields["idx"].cols if has_i else 1)
    mode = 0 if rows is None and slots is None else (1 if slots is None else 2)
    if put is None:
        dest = 0  # this rank's send buffer
    elif put.offs is not None or mode == 2:
        dest, offs = 1, put.offs if put.offs is not None else offs  # the destination rank by offs ranges
    else:
        dest = 2  # the destination rank by fixed slots
    slot = slots.shape[1] if mode == 2 else (put.slot if dest == 2 else 0)
    world = put.peers.shape[0] if put is not None else (1 if offs is None else offs.shape[0] - 1)
    anything = x if out is None else out.view(torch.int32)
    grid = (n_rows, max(1, -(-x_words // _BLOCK)))
    launch(_k().pack_kernel, grid, (
        anything, rows if mode == 1 else (slots if mode == 2 else anything), offs if offs is not None else anything,
        tokens if tokens is not None else anything, x, _words(tensors["scales"]) if has_s else x,
        _words(tensors["probs"]) if has_p else x, tensors["idx"].contiguous() if has_i else x,
        put.peers if put is not None else anything, put.row0 if put is not None else anything, x, x, x,
        n_src, fmt.row_bytes // 4, world, slot, x_words, s_words, x_off, s_off, p_off, i_off, k, num_experts,
        put.header_words if put is not None else 0, 0, 0, 0),
        {"ROW_MODE": mode, "DEST": dest, "IDS_ONLY_PAD": put is not None and put.ids_only_pad, "HAS_S": has_s,
         "HAS_P": has_p, "HAS_I": has_i, "BLOCK": _BLOCK, "BLOCK_K": _pow2(k), "BLOCK_W": _pow2(world)})
    return out, tokens


class Compacted(NamedTuple):
    """The results of a worst-mode dispatch on the symmetric transport (:func:`pack_compacted`,
    then :func:`unpack` with ``offs``): ``x`` / ``scales`` ``[R, C]``, the layout's ``to_recv``
    int64 ``[W * slot]`` and ``recv_from`` int64 ``[R]`` (as :func:`compact` returns them),
    ``offs`` int64 ``[W + 1]`` (the first result row from each source, then the total) and
    ``counts`` int64 ``[E_local]`` (tokens per local expert)."""

    x: torch.Tensor
    scales: torch.Tensor | None
    to_recv: torch.Tensor
    recv_from: torch.Tensor
    offs: torch.Tensor
    counts: torch.Tensor


def pack_compacted(fmt: RowFormat, tensors: dict, slot_tok: torch.Tensor, n_src: int, num_experts: int, put: Put,
                   rank: int, num_rows: int, num_local: int) -> Compacted:
    """Worst mode on the symmetric transport: the rows of the slot table ``slot_tok`` (int64
    ``[W, slot]``) stored compacted into the ranks' buffers (``pack_kernel``'s ``DEST`` 3: each
    rank's rows land after those of lower ranks, at the place the receiver's compaction would have
    put them; this rank's own rows go straight into the results). Needs the count matrix in this
    rank's buffer header (``route`` with ``put_counts``, then a barrier). Returns the results and the
    layout; :func:`unpack` with ``offs`` completes them after the next barrier."""
    world, slot = slot_tok.shape
    dev = tensors["x"].device
    fx, fs = fmt.fields["x"], fmt.fields.get("scales")
    x = torch.empty((num_rows, fx.cols), dtype=fx.dtype, device=dev)
    scales = None if fs is None else torch.empty((num_rows, fs.cols), dtype=fs.dtype, device=dev)
    meta = torch.empty((world * slot + num_rows + world + 1 + num_local,), dtype=torch.int64, device=dev)
    to_recv, recv_from, offs, counts = meta.split((world * slot, num_rows, world + 1, num_local))
    out = Compacted(x, scales, to_recv, recv_from, offs, counts)
    if world * slot == 0:  # no rows anywhere (every rank has T = 0): nothing received
        offs.zero_()
        counts.zero_()
        return out
    xw = _words(tensors["x"])
    x_off, x_words = _word_offset(fmt, "x")
    s_off, s_words = _word_offset(fmt, "scales")
    p_off, _ = _word_offset(fmt, "probs")
    i_off, _ = _word_offset(fmt, "idx")
    k = fmt.fields["idx"].cols
    has_s = s_words > 0
    grid = (world * slot, max(1, -(-x_words // _BLOCK)))
    launch(_k().pack_kernel, grid, (
        _words(x), slot_tok.view(-1), xw, to_recv, xw, _words(tensors["scales"]) if has_s else xw,
        _words(tensors["probs"]), tensors["idx"].contiguous(), put.peers, xw, _words(scales) if has_s else xw, offs,
        counts, n_src, fmt.row_bytes // 4, world, slot, x_words, s_words, x_off, s_off, p_off, i_off, k, num_experts,
        put.header_words, num_rows, rank, num_local),
        {"ROW_MODE": 1, "DEST": 3, "IDS_ONLY_PAD": False, "HAS_S": has_s, "HAS_P": True, "HAS_I": True,
         "BLOCK": _BLOCK, "BLOCK_K": _pow2(k), "BLOCK_W": _pow2(world)})
    return out


def compact(buf: torch.Tensor, fmt: RowFormat, rank: int, num_local: int, num_rows: int):
    """``(recv_from int64 [num_rows], to_recv int64 [N])`` of the received slot rows ``buf``
    (``uint8 [N, B]``): the rows holding an expert of ``rank``, packed to the front in order
    (:func:`turbo_deepep.all_to_all.layout.compact_rows`'s result)."""
    n = buf.shape[0]
    dev = buf.device
    recv_from = torch.empty((num_rows,), dtype=torch.int64, device=dev)
    to_recv = torch.empty((n,), dtype=torch.int64, device=dev)
    if n == 0:
        recv_from.fill_(0)
        return recv_from, to_recv
    i_off, _ = _word_offset(fmt, "idx")
    k = fmt.fields["idx"].cols
    launch(_k().compact_kernel, (1,), (buf.view(torch.int32), recv_from, to_recv, n, num_rows, fmt.row_bytes // 4,
                                       i_off, k, rank * num_local, num_local),
           {"BLOCK": _COMPACT, "BLOCK_K": _pow2(k)})
    return recv_from, to_recv


def unpack(buf: torch.Tensor, fmt: RowFormat, num_rows: int, recv_from: torch.Tensor | None, *,
           idx_dtype: torch.dtype = torch.int64, rank: int = 0, num_local: int = 0, into: Compacted | None = None):
    """``(x, scales or None, local ids or None, probs or None, tokens_per_expert or None)``: result
    row ``r`` from received row ``recv_from[r]`` (None: ``r``; ``>= N``: a zero row with ids -1).
    The routing outputs come when ``fmt`` has the ``idx`` field.

    ``into`` (worst mode on the symmetric transport, after :func:`pack_compacted` and a barrier):
    the results and layout it made; row ``r`` is buffer row ``r`` below ``into.offs[W]``, else
    padding, and ``into.recv_from`` is filled in (``buf``: the ``W * slot`` slot rows' space)."""
    dev = buf.device
    fx = fmt.fields["x"]
    fs = fmt.fields.get("scales")
    route_ = "idx" in fmt.fields
    k = fmt.fields["idx"].cols if route_ else 1
    if into is not None:  # counts zeroed by the packing kernel
        x, scales, counts, recv_from = into.x, into.scales, into.counts, into.recv_from
        world = into.offs.shape[0] - 1
        slot = buf.shape[0] // max(1, world)
    else:
        x = torch.empty((num_rows, fx.cols), dtype=fx.dtype, device=dev)
        scales = None if fs is None else torch.empty((num_rows, fs.cols), dtype=fs.dtype, device=dev)
        counts = torch.zeros((num_local,), dtype=torch.int64, device=dev) if route_ else None
        world, slot = 1, 0
    ids = torch.empty((num_rows, k), dtype=idx_dtype, device=dev) if route_ else None
    probs = torch.empty((num_rows, k), dtype=torch.float32, device=dev) if route_ else None
    if num_rows == 0:
        return x, scales, ids, probs, counts
    x_off, x_words = _word_offset(fmt, "x")
    s_off, s_words = _word_offset(fmt, "scales")
    p_off, _ = _word_offset(fmt, "probs")
    i_off, _ = _word_offset(fmt, "idx")
    words = buf.view(torch.int32)
    dummy = words
    grid = (num_rows, max(1, -(-x_words // _BLOCK)))
    launch(_k().unpack_kernel, grid, (
        words, recv_from if recv_from is not None else dummy, _words(x), _words(scales) if scales is not None else dummy,
        ids if route_ else dummy, probs if route_ else dummy, counts if route_ else dummy,
        into.offs if into is not None else dummy,
        buf.shape[0], fmt.row_bytes // 4, x_words, s_words, x_off, s_off, p_off, i_off, k, rank * num_local, num_local,
        world, slot, rank),
        {"IDENTITY": recv_from is None, "HAS_S": s_words > 0, "HAS_ROUTE": route_, "FROM_OFFS": into is not None,
         "BLOCK": _BLOCK, "BLOCK_K": _pow2(k), "BLOCK_W": _pow2(world)})
    return x, scales, ids, probs, counts


def reduce(back: torch.Tensor, fmt: RowFormat, pos: torch.Tensor, num_tokens: int, acc_dtype: torch.dtype, *,
           slot: int = 0, bases: torch.Tensor | None = None):
    """``(combined [T, H] x's dtype, probs fp32 [T, K] or None)``: token ``t`` summed over the
    returned rows ``base_d + pos[t, d]`` (``bases[d]``, or ``d * slot``) in rank order in
    ``acc_dtype``, then rounded once (the torch path's ``sum_rows``)."""
    dev = back.device
    fx = fmt.fields["x"]
    fp = fmt.fields.get("probs")
    out = torch.empty((num_tokens, fx.cols), dtype=fx.dtype, device=dev)
    outp = None if fp is None else torch.empty((num_tokens, fp.cols), dtype=torch.float32, device=dev)
    if num_tokens == 0 or fx.cols == 0:
        out.zero_()
        if outp is not None:
            outp.zero_()
        return out, outp
    if back.shape[0] == 0:  # nothing came back (no token was sent anywhere)
        back = torch.zeros((1, fmt.row_bytes), dtype=torch.uint8, device=dev)
    k = fp.cols if fp is not None else 1
    elem = fx.nbytes // fx.cols  # bytes per x element
    import triton.language as tl

    acc = tl.float64 if acc_dtype == torch.float64 else tl.float32
    bits = fx.dtype == torch.bfloat16 and _interpreting()
    view = torch.int16 if bits else fx.dtype
    grid = (num_tokens, -(-fx.cols // _BLOCK))
    launch(_k().reduce_kernel, grid, (
        back.view(view), back.view(torch.float32), pos, bases if bases is not None else pos, out.view(view),
        outp if outp is not None else out, fx.cols, k, pos.shape[1], slot, fmt.row_bytes // elem, fmt.row_bytes // 4,
        _word_offset(fmt, "probs")[0]),
        {"BASES": bases is not None, "HAS_P": fp is not None, "ACC": acc, "BF16_BITS": bits, "BLOCK": _BLOCK,
         "BLOCK_K": _pow2(k)})
    return out, outp
