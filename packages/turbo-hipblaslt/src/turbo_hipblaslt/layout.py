"""From turbo's row-major GEMM arguments to one column-major BLASLt call. Pure (shapes and strides
only: no tensors, no GPU), so the mapping is unit-tested on the CPU.

turbo computes ``R = op(a) @ op(b)`` (``[M, N]``, ``op(x) = x.T if trans_x``) and stores ``R``, or
``R.T`` when ``trans_c``. BLASLt computes ``D = op(A) @ op(B)`` on column-major matrices (element
``(i, j)`` at ``i + j * ld``). A 2-D strided tensor ``[r, c]`` reads as a column-major matrix in one of
two ways:

* **row-major** (unit stride along dim 1): the column-major ``[c, r]`` matrix, i.e. its transpose,
  with ``ld = stride(0)``;
* **column-major** (unit stride along dim 0): the column-major ``[r, c]`` matrix itself, with
  ``ld = stride(1)``.

The stored output then reads either as ``R`` (BLAS ``A = a``, ``B = b``, ``m, n = M, N``) or as ``R.T``
(``R.T = op(b).T @ op(a).T``: BLAS ``A = b``, ``B = a``, ``m, n = N, M``; the "swapped" call). Each
operand's BLAS op follows from its reading: ``transa = row_major(a) XOR trans_a`` in the first case,
``row_major(b) XOR trans_b XOR 1`` for BLAS A in the swapped one (and likewise for B).

A dim of size 1 has no meaningful stride, so such a tensor may read both ways; the planner tries every
reading (row-major first) and keeps the first plan that meets the requirements:

* ``need_tn``: ``transa = T, transb = N`` (cuBLASLt FP8 on sm89/sm90), which is the same as both
  operands being contiguous along K;
* ``need_swapped``: BLAS ``m = N``, so that a bias vector (one value per BLAS row) runs along N.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BlasPlan", "LayoutUnsupported", "k_contiguous", "plan_gemm", "readings"]

Shape = tuple[int, int]
Strides = tuple[int, int]


class LayoutUnsupported(ValueError):
    """The operands' layouts cannot be expressed as one BLASLt call (the message says why)."""


@dataclass(frozen=True)
class BlasPlan:
    """One column-major call: ``D[m, n] = op(A) @ op(B)`` with ``op(A)`` ``[m, k]``.

    ``swapped``: BLAS A is turbo's ``b`` and BLAS B is turbo's ``a`` (``m, n = N, M``); otherwise
    A is ``a`` and B is ``b`` (``m, n = M, N``). ``lda/ldb/ldd``: the leading dimensions, in elements,
    of BLAS A, B and D."""

    m: int
    n: int
    k: int
    transa: bool
    transb: bool
    swapped: bool
    lda: int
    ldb: int
    ldd: int

    @property
    def tn(self) -> bool:
        return self.transa and not self.transb


def readings(name: str, shape: Shape, strides: Strides) -> list[tuple[bool, int]]:
    """``(row_major, ld)`` for every way a 2-D tensor of ``shape``/``strides`` reads as a
    column-major matrix (row-major first). Raises :class:`LayoutUnsupported` naming ``name`` when
    there is none (no unit stride, or rows overlapping: a broadcast or self-overlapping view)."""
    rows, cols = int(shape[0]), int(shape[1])
    s0, s1 = int(strides[0]), int(strides[1])
    out = []
    if cols <= 1 or s1 == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            out.append((True, ld))
    if rows <= 1 or s0 == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            out.append((False, ld))
    if not out:
        raise LayoutUnsupported(
            f"{name}: a {rows}x{cols} tensor with strides ({s0}, {s1}) is not a BLAS matrix (BLASLt needs a unit "
            f"stride along one dim and a leading dim at least the other dim's size)")
    return out


def k_contiguous(shape: Shape, strides: Strides, k_dim: int) -> bool:
    """Whether a stored operand is contiguous along its contraction dim ``k_dim`` (0 or 1) with a
    valid leading dim (what the FP8 "TN" requirement asks of each operand)."""
    try:
        views = readings("x", shape, strides)
    except LayoutUnsupported:
        return False
    return any(row_major == (k_dim == 1) for row_major, _ in views)


def plan_gemm(a: tuple[Shape, Strides], trans_a: bool, b: tuple[Shape, Strides], trans_b: bool,
              d: tuple[Shape, Strides], trans_c: bool, *, need_tn: bool = False,
              need_swapped: bool = False) -> BlasPlan:
    """The BLASLt call computing ``op(a) @ op(b)`` into ``d`` (``R``, or ``R.T`` when ``trans_c``).

    ``a``, ``b``, ``d``: ``(shape, strides)`` of the stored tensors; shapes must already be
    consistent (the primitive's validator checks that). Raises :class:`LayoutUnsupported` when a
    tensor is not a BLAS matrix or no reading meets ``need_tn`` / ``need_swapped``."""
    (a_shape, _), (b_shape, _) = a, b
    m, k = (a_shape[1], a_shape[0]) if trans_a else (a_shape[0], a_shape[1])
    n = b_shape[0] if trans_b else b_shape[1]
    ra, rb, rd = readings("a", *a), readings("b", *b), readings("out", *d)
    for a_row, a_ld in ra:
        for b_row, b_ld in rb:
            for d_row, d_ld in rd:
                if d_row != trans_c:  # the output reads as R.T: A = b, B = a
                    plan = BlasPlan(int(n), int(m), int(k), b_row ^ trans_b ^ True, a_row ^ trans_a ^ True, True,
                                    b_ld, a_ld, d_ld)
                else:
                    plan = BlasPlan(int(m), int(n), int(k), a_row ^ trans_a, b_row ^ trans_b, False, a_ld, b_ld, d_ld)
                if (plan.tn or not need_tn) and (plan.swapped or not need_swapped):
                    return plan
    wants = [w for w, on in (("both operands contiguous along K (the FP8 'TN' layout)", need_tn),
                             ("an output whose BLAS rows run along N (for a bias along N)", need_swapped)) if on]
    raise LayoutUnsupported(f"no BLASLt call with {' and '.join(wants)} for trans_a={trans_a}, trans_b={trans_b}, "
                            f"trans_c={trans_c} and these strides")
