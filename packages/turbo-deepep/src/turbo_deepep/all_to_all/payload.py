"""One byte row per token: every tensor that travels with a token packed side by side.

A dispatch moves, for each sent token, its hidden row ``x`` (any float or fp8 dtype), its FP8
scales, its top-k probs and its top-k expert ids; a combine moves a returned row and its probs.
Packing them into one ``uint8 [N, B]`` tensor lets a single ``all_to_all_single`` carry all of
them (one collective, one set of split sizes), whatever the dtypes and whatever the process
group's backend supports (gloo, NCCL and RCCL all move bytes). Bytes are copied, never converted:
every value arrives bit-identical.

Layout: fields in order, each starting at a multiple of 16 bytes; ``B`` a multiple of 16. Copies in
and out use the widest integer word (8, 4, 2 or 1 bytes) that divides a field's byte width, and
gathers write straight into the packed rows (``index_select`` with a strided ``out``), so building
the send buffer costs one pass over the rows sent.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

__all__ = ["Field", "RowFormat", "row_format"]

_ALIGN = 16
_WORDS = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8))


class Field(NamedTuple):
    """``cols`` values of ``dtype`` per row, stored at bytes ``[start, start + nbytes)``."""

    name: str
    dtype: torch.dtype
    cols: int
    start: int
    nbytes: int


def _word(nbytes: int) -> torch.dtype:
    return next(dt for size, dt in _WORDS if nbytes % size == 0)


def _as_words(t: torch.Tensor, nbytes: int) -> torch.Tensor:
    """A ``[N, nbytes]``-byte view of ``t`` (rows of ``nbytes`` bytes) in the widest integer word."""
    return t.view(torch.uint8).view(_word(nbytes)) if t.dtype != _word(nbytes) else t


class RowFormat:
    """The byte layout of a packed row: ``fields`` ``[(name, dtype, cols), ...]`` in order.

    ``pad_fill``: byte value of each field in a padding row; 0 unless named (the expert-id field
    uses 0xFF, i.e. -1 in every integer width).
    """

    def __init__(self, fields: list[tuple[str, torch.dtype, int]], pad_fill: dict[str, int] | None = None) -> None:
        out, start = [], 0
        for name, dtype, cols in fields:
            nbytes = int(cols) * torch.empty((), dtype=dtype).element_size()
            out.append(Field(name, dtype, int(cols), start, nbytes))
            start += -(-nbytes // _ALIGN) * _ALIGN
        self.fields = {f.name: f for f in out}
        self.row_bytes = start
        self._pad_fill = dict(pad_fill or {})

    def _slot(self, rows: torch.Tensor, f: Field) -> torch.Tensor:
        """Field ``f`` of packed ``rows`` as a strided ``[N, nbytes / word]`` word view."""
        return _as_words(rows[:, f.start:f.start + f.nbytes], f.nbytes)

    def _source(self, t: torch.Tensor, f: Field) -> torch.Tensor:
        return _as_words(t.contiguous(), f.nbytes)

    def pack(self, tensors: dict[str, torch.Tensor], rows: int, device: torch.device, *,
             pad_row: bool = False) -> torch.Tensor:
        """``uint8 [rows (+1), B]``: row ``i`` holds row ``i`` of every field's tensor
        (``[rows, cols]`` each); with ``pad_row`` one more row, :meth:`pad_row`, is appended."""
        out = torch.empty((rows + int(pad_row), self.row_bytes), dtype=torch.uint8, device=device)
        if pad_row:
            out[rows] = 0
        for f in self.fields.values():
            if f.nbytes == 0:
                continue
            if rows:
                self._slot(out[:rows], f).copy_(self._source(tensors[f.name], f))
            if pad_row and self._pad_fill.get(f.name, 0):
                out[rows, f.start:f.start + f.nbytes] = self._pad_fill[f.name]
        return out

    def pad_row(self, device: torch.device) -> torch.Tensor:
        """``uint8 [1, B]``: zero values, and the ``pad_fill`` bytes in the fields that name one."""
        return self.pack({}, 0, device, pad_row=True)

    def gather(self, tensors: dict[str, torch.Tensor], index: torch.Tensor, rows: int) -> torch.Tensor:
        """``uint8 [N, B]``: packed row ``j`` holds row ``index[j]`` of every field's tensor
        (``[rows, cols]`` each), in one pass. ``index[j] == -1`` makes a padding row: its
        ``pad_fill`` fields (the expert ids) are the fill; its other fields are unspecified (the
        receiver never reads them)."""
        n = index.shape[0]
        dev = index.device
        out = torch.empty((n, self.row_bytes), dtype=torch.uint8, device=dev)
        if n == 0:
            return out
        clamped = index.clamp(min=0)
        padded = torch.where(index >= 0, index, torch.full_like(index, rows))
        for f in self.fields.values():
            if f.nbytes == 0:
                continue
            src = self._source(tensors[f.name], f)
            if f.name in self._pad_fill:  # small: add the fill row to the source
                fill = torch.full((1, f.nbytes), self._pad_fill[f.name], dtype=torch.uint8, device=dev)
                src = torch.cat([src.view(torch.uint8), fill]).view(src.dtype)
                torch.index_select(src, 0, padded, out=self._slot(out, f))
            elif rows:
                torch.index_select(src, 0, clamped, out=self._slot(out, f))
        return out

    def view(self, rows: torch.Tensor, name: str) -> torch.Tensor:
        """Field ``name`` of packed ``rows`` as a strided ``[N, cols]`` view of its dtype (no copy)."""
        f = self.fields[name]
        if f.nbytes == 0 or rows.shape[0] == 0:
            return torch.empty((rows.shape[0], f.cols), dtype=f.dtype, device=rows.device)
        return rows[:, f.start:f.start + f.nbytes].view(f.dtype)

    def unpack(self, rows: torch.Tensor, name: str, index: torch.Tensor | None = None) -> torch.Tensor:
        """Field ``name`` of packed ``rows`` (``uint8 [N, B]``), or of the rows ``index`` of them:
        a new contiguous ``[N or len(index), cols]`` tensor of the field's dtype."""
        f = self.fields[name]
        n = rows.shape[0] if index is None else index.shape[0]
        out = torch.empty((n, f.cols), dtype=f.dtype, device=rows.device)
        if f.nbytes == 0 or n == 0:
            return out
        words = _as_words(out, f.nbytes)
        if index is None:
            words.copy_(self._slot(rows, f))
        else:
            torch.index_select(self._slot(rows, f), 0, index, out=words)
        return out


@functools.lru_cache(maxsize=128)
def row_format(fields: tuple[tuple[str, torch.dtype, int], ...], pad_fill: tuple[tuple[str, int], ...] = ()
               ) -> RowFormat:
    """The :class:`RowFormat` of ``fields`` (and ``pad_fill`` as ``(name, byte)`` pairs), built once
    per layout: dispatch and combine run on a host-bound path, and a model has a handful of layouts.
    The result is shared: read it, never change it."""
    return RowFormat(list(fields), dict(pad_fill))
