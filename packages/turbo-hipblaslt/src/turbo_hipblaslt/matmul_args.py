"""The argument tuple of one BLASLt call (``_C.matmul``, ``_C.check``, ``_C.algo_count``): 29 plain
integers and floats in the order the extension parses them, the last, ``algo``, the rank of the algorithm in
the library heuristic's list. Pure (no device, no extension): unit-tested on the CPU, and used both by the
launches (``turbo_hipblaslt.blaslt``) and by the capability probes (``turbo_hipblaslt.runtime``)."""

from __future__ import annotations

from dataclasses import dataclass

from turbo_hipblaslt.codes import SCALE_NONE
from turbo_hipblaslt.layout import BlasPlan

__all__ = ["ALGO_SLOT", "NUM_ARGS", "Side", "call_args", "probe_args", "with_algo"]

#: Positions of pointers in the argument tuple (see ``call_args``): data of A, B, D; bias; scales.
_DATA_SLOTS = (6, 9, 12)
_AUX_SLOTS = (19, 21, 23)
#: Position of ``algo`` (the last) and the tuple's length.
ALGO_SLOT = 28
NUM_ARGS = 29


@dataclass(frozen=True)
class Side:
    """One of turbo's operands as the extension sees it: data pointer, dtype code, scale pointer
    and scale mode (``codes.SCALE_*``)."""

    ptr: int
    code: int
    scale_ptr: int = 0
    scale_mode: int = SCALE_NONE


def call_args(p: BlasPlan, a: Side, b: Side, d_ptr: int, d_code: int, *, device: int, alpha: float = 1.0,
              beta: float = 0.0, compute: int = 0, epilogue: int = 0, bias_ptr: int = 0, bias_code: int = -1,
              stream: int = 0, workspace: int = 0, workspace_size: int = 0, algo: int = 0) -> tuple:
    """The 29 arguments of ``_C.matmul`` for plan ``p``: BLAS A/B are ``a``/``b``, or ``b``/``a``
    when the plan is swapped (each keeps its own scale); the last, ``algo``, is the rank of the
    algorithm in the heuristic's list of usable ones (0: its first choice)."""
    first, second = (b, a) if p.swapped else (a, b)
    return (device, p.m, p.n, p.k, int(p.transa), int(p.transb),
            first.ptr, first.code, p.lda, second.ptr, second.code, p.ldb,
            d_ptr, d_code, p.ldd, float(alpha), float(beta), int(compute),
            int(epilogue), bias_ptr, bias_code,
            first.scale_ptr, first.scale_mode, second.scale_ptr, second.scale_mode,
            stream, workspace, workspace_size, int(algo))


def with_algo(args: tuple, algo: int) -> tuple:
    """``args`` asking for the heuristic's algorithm of rank ``algo``."""
    return (*args[:ALGO_SLOT], int(algo))


def probe_args(args: tuple) -> tuple:
    """``args`` for ``_C.check``: data pointers reduced to their residue mod 16 (16 when aligned),
    so the answer matches the dispatcher's selection cache, which keys tensors by ``data_ptr() %
    16``; bias/scale pointers (never read by the heuristic) replaced by an aligned stand-in; the
    other slots, ``algo`` included, kept."""
    out = list(args)
    for i in _DATA_SLOTS:
        out[i] = out[i] % 16 or 16
    for i in _AUX_SLOTS:
        out[i] = 16 if out[i] else 0
    out[25] = out[26] = 0  # stream and workspace pointer: unused by check
    return tuple(out)
