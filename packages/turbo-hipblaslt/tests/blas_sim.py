"""A float64 column-major BLAS on raw storage: what BLASLt does with a call's integers, replayed on
the CPU so the tests can check the Python side's pointers, leading dims and transposes without a
GPU. Independent of the package's code: it reads only the call's numbers."""

from __future__ import annotations

import torch


def colmajor(base: torch.Tensor, offset: int, rows: int, cols: int, ld: int) -> torch.Tensor:
    """The column-major ``rows x cols`` matrix (``ld`` elements between columns) starting
    ``offset`` elements into ``base``'s storage."""
    return torch.as_strided(base, (rows, cols), (1, ld), offset)


def run_call(m: int, n: int, k: int, transa: bool, transb: bool, a: tuple[torch.Tensor, int, int],
             b: tuple[torch.Tensor, int, int], d: tuple[torch.Tensor, int, int], beta: float = 0.0) -> None:
    """``D = op(A) @ op(B) + beta * D`` in float64 on storage. ``a``/``b``/``d``: ``(base tensor,
    element offset into its storage, ld)``; bases must be float64 (D is written in place)."""
    (ab, ao, lda), (bb, bo, ldb), (db, do, ldd) = a, b, d
    A = colmajor(ab, ao, k if transa else m, m if transa else k, lda)
    B = colmajor(bb, bo, n if transb else k, k if transb else n, ldb)
    D = colmajor(db, do, m, n, ldd)
    opa = A.t() if transa else A
    opb = B.t() if transb else B
    D.copy_(opa @ opb + beta * D)
