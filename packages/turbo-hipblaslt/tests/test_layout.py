"""The row-major -> column-major mapping (``layout.plan_gemm``) checked by running each plan on a
float64 column-major BLAS over the tensors' raw storage and comparing with float64 ``op(a) @ op(b)``.

Grid: every (trans_a, trans_b, trans_c), each operand and the output stored row-major, column-major
(a transposed view of a contiguous tensor) or as a strided slice of a wider buffer (ld > the dim),
and odd sizes including 1 (the size-1 dims whose strides mean nothing): the layouts turbo's Linear
forward/backward and transposed views produce.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from blas_sim import run_call

from turbo_hipblaslt.layout import BlasPlan, LayoutUnsupported, k_contiguous, plan_gemm, readings

STORAGES = ("row", "col", "padded")
SHAPES = [(5, 7, 3), (1, 6, 4), (6, 1, 5), (4, 3, 1), (1, 1, 1), (9, 11, 13)]


def stored(shape: tuple[int, int], how: str, gen: torch.Generator) -> torch.Tensor:
    """A float64 tensor of ``shape`` stored ``how`` (values random)."""
    r, c = shape
    if how == "row":
        return torch.randn(r, c, generator=gen, dtype=torch.float64)
    if how == "col":
        return torch.randn(c, r, generator=gen, dtype=torch.float64).t()
    return torch.randn(r, c + 3, generator=gen, dtype=torch.float64)[:, 1:c + 1]  # ld = c + 3, offset 1


def run_plan(p: BlasPlan, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor) -> None:
    first, second = (b, a) if p.swapped else (a, b)
    run_call(p.m, p.n, p.k, p.transa, p.transb, (first, first.storage_offset(), p.lda),
             (second, second.storage_offset(), p.ldb), (d, d.storage_offset(), p.ldd))


def meta(t: torch.Tensor):
    return tuple(t.shape), t.stride()


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("ta,tb,tc", list(itertools.product([False, True], repeat=3)))
def test_every_layout_matches_float64(m, n, k, ta, tb, tc):
    gen = torch.Generator().manual_seed(m * 100 + n * 10 + k)
    for sa, sb, sd in itertools.product(STORAGES, repeat=3):
        a = stored((k, m) if ta else (m, k), sa, gen)
        b = stored((n, k) if tb else (k, n), sb, gen)
        d = stored((n, m) if tc else (m, n), sd, gen).zero_()
        p = plan_gemm(meta(a), ta, meta(b), tb, meta(d), tc)
        assert (p.m, p.n, p.k) == ((n, m, k) if p.swapped else (m, n, k))
        run_plan(p, a, b, d)
        want = (a.t() if ta else a) @ (b.t() if tb else b)
        where = f"storages a={sa} b={sb} d={sd}"
        torch.testing.assert_close(d, want.t() if tc else want, rtol=1e-12, atol=1e-12,
                                   msg=lambda s, where=where: f"{where}: {s}")


@pytest.mark.parametrize("ta,tb,tc", list(itertools.product([False, True], repeat=3)))
def test_need_tn_found_when_both_operands_are_k_contiguous(ta, tb, tc):
    m, n, k = 6, 5, 32
    gen = torch.Generator().manual_seed(7)
    # K-contiguous storage of each operand whatever its trans flag.
    a = stored((k, m), "col", gen) if ta else stored((m, k), "row", gen)
    b = stored((n, k), "row", gen) if tb else stored((k, n), "col", gen)
    d = torch.zeros((n, m) if tc else (m, n), dtype=torch.float64)
    p = plan_gemm(meta(a), ta, meta(b), tb, meta(d), tc, need_tn=True)
    assert p.transa and not p.transb
    run_plan(p, a, b, d)
    want = (a.t() if ta else a) @ (b.t() if tb else b)
    torch.testing.assert_close(d, want.t() if tc else want, rtol=1e-12, atol=1e-12)


def test_need_tn_declined_when_an_operand_is_m_contiguous():
    a = torch.zeros(8, 4, dtype=torch.float64)  # a [M=8, K=4] row-major: fine
    b = torch.zeros(4, 6, dtype=torch.float64)  # b [K=4, N=6] row-major: N-contiguous, not K
    d = torch.zeros(8, 6, dtype=torch.float64)
    with pytest.raises(LayoutUnsupported, match="contiguous along K"):
        plan_gemm(meta(a), False, meta(b), False, meta(d), False, need_tn=True)
    assert not k_contiguous((4, 6), (6, 1), 0)
    assert k_contiguous((6, 4), (4, 1), 1)


def test_need_swapped_puts_n_on_blas_rows():
    a, b = torch.zeros(8, 4), torch.zeros(6, 4)
    d = torch.zeros(8, 6)
    p = plan_gemm(meta(a), False, meta(b), True, meta(d), False, need_swapped=True)
    assert p.swapped and p.m == 6
    with pytest.raises(LayoutUnsupported, match="bias along N"):
        plan_gemm(meta(a), False, meta(b), True, meta(torch.zeros(6, 8)), True, need_swapped=True)


@pytest.mark.parametrize("shape,strides,want", [
    ((4, 6), (6, 1), [(True, 6)]),
    ((4, 6), (1, 4), [(False, 4)]),
    ((4, 6), (10, 1), [(True, 10)]),
    ((1, 6), (6, 1), [(True, 6), (False, 1)]),
    ((4, 1), (1, 1), [(True, 1), (False, 4)]),
])
def test_readings(shape, strides, want):
    assert readings("x", shape, strides) == want


@pytest.mark.parametrize("shape,strides", [((4, 6), (0, 1)), ((4, 6), (2, 2)), ((4, 6), (1, 2)), ((4, 6), (3, 1))])
def test_not_a_blas_matrix_is_declined_naming_the_argument(shape, strides):
    with pytest.raises(LayoutUnsupported, match=r"^out: a 4x6 tensor with strides"):
        readings("out", shape, strides)
