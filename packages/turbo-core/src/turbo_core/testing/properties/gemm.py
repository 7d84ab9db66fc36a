"""Properties of ``gemm``, ``gemm_fp8`` and ``gemm_fp4``: ``C = op(A) @ op(B)`` (``trans_c``:
``C.T``; ``out``: ``out + C``) against float64 math on the same (dequantized) operands.

Drawn: M, N, K from 0 up (primes, odd sizes, tile edges), every transpose, ``trans_c``, every
``out_dtype``, accumulation into an ``out`` of each float dtype, row-major / column-major / strided
operands; FP8: every granularity (TENSORWISE, ROWWISE, BLOCKWISE with 1-D blocks or 2-D tiles per
operand and several block sizes, MX_BLOCKWISE), E4M3 / E5M2 / both HYBRID pairs, OCP and FNUZ,
scales spread over 2**[-3, 3]; FP4: every packed E2M1 byte, E8M0 scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, GemmFp8Args
from turbo_core.testing.numerics import assert_close_fp8_gemm
from turbo_core.testing.properties.harness import Property, Target, close, overflowed
from turbo_core.testing.properties.lowp import dequant, random_scales
from turbo_core.testing.properties.strategies import (
    FLOAT_DTYPES,
    FNUZ_FP8,
    FP8_PAIRS,
    LAYOUTS,
    dims,
    e8m0_bytes,
    fp4_bytes,
    fp8_data,
    generator,
    lay_out,
    seeds,
)

__all__ = ["PROPERTIES"]

_OPT_DTYPES = st.one_of(st.none(), st.sampled_from(FLOAT_DTYPES))


def _finish(c64: torch.Tensor, trans_c: bool, out0: torch.Tensor | None) -> torch.Tensor:
    c64 = c64.t() if trans_c else c64
    return c64 + out0.to(torch.float64) if out0 is not None else c64


def _check_result(res, args, want: torch.Tensor, what: str, fp8: bool) -> None:
    if args.out is not None and res is not args.out:
        raise AssertionError(f"{what}: with out, the result must be out itself")
    dtype = args.result_dtype
    if res.dtype != dtype:
        raise AssertionError(f"{what}: dtype {res.dtype}, expected {dtype}")
    if fp8:
        if tuple(res.shape) != tuple(want.shape):
            raise AssertionError(f"{what}: shape {tuple(res.shape)} != expected {tuple(want.shape)}")
        assert_close_fp8_gemm(res, overflowed(want, dtype), dtype=dtype, what=what)
    else:
        close(res, want, dtype, what)


# -- gemm ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmCase:
    m: int
    n: int
    k: int
    dtype: torch.dtype
    trans_a: bool
    trans_b: bool
    trans_c: bool
    out_dtype: torch.dtype | None
    accumulate: torch.dtype | None  # dtype of an ``out`` accumulated into, or None
    layout_a: str
    layout_b: str
    seed: int


def _gemm_cases(max_dim: int):
    return st.builds(GemmCase, dims(0, max_dim), dims(0, max_dim), dims(0, max_dim), st.sampled_from(FLOAT_DTYPES),
                     st.booleans(), st.booleans(), st.booleans(), _OPT_DTYPES, _OPT_DTYPES,
                     st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS), seeds())


def _check_gemm(c: GemmCase, target: Target) -> None:
    g = generator(c.seed)
    a = torch.randn((c.k, c.m) if c.trans_a else (c.m, c.k), generator=g).to(c.dtype)
    b = torch.randn((c.n, c.k) if c.trans_b else (c.k, c.n), generator=g).to(c.dtype)
    shape = (c.n, c.m) if c.trans_c else (c.m, c.n)
    out0 = torch.randn(shape, generator=g).to(c.accumulate) if c.accumulate is not None else None
    a64, b64 = a.double(), b.double()
    want = _finish((a64.t() if c.trans_a else a64) @ (b64.t() if c.trans_b else b64), c.trans_c, out0)
    args = GemmArgs(target.put(lay_out(a, c.layout_a)), target.put(lay_out(b, c.layout_b)), c.trans_a, c.trans_b,
                    c.out_dtype, c.trans_c, target.put(out0.clone()) if out0 is not None else None)
    _check_result(target.call(args), args, want, "gemm", fp8=False)


# -- gemm_fp8 --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmFp8Case:
    m: int
    n: int
    k: int
    granularity: str
    a_dtype: torch.dtype
    b_dtype: torch.dtype
    block_size: int | None
    two_d: tuple[bool, bool]  # BLOCKWISE: a / b scaled by bs x bs tiles of the stored matrix
    trans_a: bool
    trans_b: bool
    trans_c: bool
    out_dtype: torch.dtype
    accumulate: bool  # into an ``out`` of ``out_dtype``
    layout_a: str
    layout_b: str
    seed: int


_OCP_PAIRS = tuple(p for p in FP8_PAIRS if p[0] not in FNUZ_FP8)
_FNUZ_PAIRS = tuple(p for p in FP8_PAIRS if p[0] in FNUZ_FP8)


@st.composite
def _gemm_fp8_cases(draw, max_dim: int):
    gran = draw(st.sampled_from(("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    pairs = st.sampled_from(_OCP_PAIRS)
    a_dt, b_dt = draw(pairs if mx else st.one_of(pairs, pairs, st.sampled_from(_FNUZ_PAIRS)))
    m, n = draw(dims(0, max_dim)), draw(dims(0, max_dim))
    k = 32 * draw(st.integers(0, max(1, max_dim // 16))) if mx else draw(dims(0, max_dim))
    ta, tb = (False, True) if mx else (draw(st.booleans()), draw(st.booleans()))
    bs = draw(st.sampled_from((16, 32, 64, 128, 24))) if gran == "BLOCKWISE" else None
    two_d = (draw(st.booleans()), draw(st.booleans())) if gran == "BLOCKWISE" else (False, False)
    layouts = st.sampled_from(LAYOUTS)
    return GemmFp8Case(m, n, k, gran, a_dt, b_dt, bs, two_d, ta, tb, draw(st.booleans()),
                       draw(st.sampled_from(FLOAT_DTYPES)), draw(st.booleans()), draw(layouts), draw(layouts),
                       draw(seeds()))


def _fp8_operand(rows: int, cols: int, k_dim: int, c: GemmFp8Case, dtype, two_d: bool, g):
    """A stored operand ``[rows, cols]`` whose dim ``k_dim`` (0/1) is the contraction: (data, scale,
    blocks of the scale over the stored matrix)."""
    data = fp8_data((rows, cols), dtype, g)
    if c.granularity == "TENSORWISE":
        return data, random_scales((), g), None
    if c.granularity == "MX_BLOCKWISE":
        return data, e8m0_bytes((rows, cols // 32), g), (1, 32)
    if c.granularity == "ROWWISE":  # one scale per row / column of the result: whole along K
        shape = (1, cols) if k_dim == 0 else (rows, 1)
        return data, random_scales(shape, g), (None, 1) if k_dim == 0 else (1, None)
    bs = c.block_size
    if two_d:
        return data, random_scales((-(-rows // bs), -(-cols // bs)), g), (bs, bs)
    if k_dim == 0:
        return data, random_scales((-(-rows // bs), cols), g), (bs, 1)
    return data, random_scales((rows, -(-cols // bs)), g), (1, bs)


def _check_gemm_fp8(c: GemmFp8Case, target: Target) -> None:
    g = generator(c.seed)
    a_shape, a_k = ((c.k, c.m), 0) if c.trans_a else ((c.m, c.k), 1)
    b_shape, b_k = ((c.n, c.k), 1) if c.trans_b else ((c.k, c.n), 0)
    a, sa, ba = _fp8_operand(*a_shape, a_k, c, c.a_dtype, c.two_d[0], g)
    b, sb, bb = _fp8_operand(*b_shape, b_k, c, c.b_dtype, c.two_d[1], g)
    shape = (c.n, c.m) if c.trans_c else (c.m, c.n)
    out0 = torch.randn(shape, generator=g).to(c.out_dtype) if c.accumulate else None
    a64, b64 = dequant(a, sa, ba), dequant(b, sb, bb)
    want = _finish((a64.t() if c.trans_a else a64) @ (b64.t() if c.trans_b else b64), c.trans_c, out0)
    args = GemmFp8Args(target.put(lay_out(a, c.layout_a)), target.put(sa), target.put(lay_out(b, c.layout_b)),
                       target.put(sb), c.trans_a, c.trans_b, None if c.accumulate else c.out_dtype, c.granularity,
                       c.block_size, c.trans_c, target.put(out0.clone()) if out0 is not None else None)
    _check_result(target.call(args), args, want, "gemm_fp8", fp8=True)


# -- gemm_fp4 --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmFp4Case:
    m: int
    n: int
    k: int
    trans_c: bool
    out_dtype: torch.dtype
    accumulate: bool
    seed: int


def _gemm_fp4_cases(max_dim: int):
    return st.builds(GemmFp4Case, dims(0, max_dim), dims(0, max_dim), st.integers(0, max(1, max_dim // 16)).map(
        lambda v: 32 * v), st.booleans(), st.sampled_from(FLOAT_DTYPES), st.booleans(), seeds())


def _check_gemm_fp4(c: GemmFp4Case, target: Target) -> None:
    g = generator(c.seed)
    a, sa = fp4_bytes((c.m, c.k // 2), g), e8m0_bytes((c.m, c.k // 32), g)
    b, sb = fp4_bytes((c.n, c.k // 2), g), e8m0_bytes((c.n, c.k // 32), g)
    shape = (c.n, c.m) if c.trans_c else (c.m, c.n)
    out0 = torch.randn(shape, generator=g).to(c.out_dtype) if c.accumulate else None
    want = _finish(dequant(a, sa, (1, 32)) @ dequant(b, sb, (1, 32)).t(), c.trans_c, out0)
    args = GemmFp4Args(target.put(a), target.put(sa), target.put(b), target.put(sb), False, True,
                       None if c.accumulate else c.out_dtype, c.trans_c,
                       target.put(out0.clone()) if out0 is not None else None)
    _check_result(target.call(args), args, want, "gemm_fp4", fp8=True)


PROPERTIES = [
    Property("gemm", _gemm_cases, _check_gemm),
    Property("gemm_fp8", _gemm_fp8_cases, _check_gemm_fp8),
    Property("gemm_fp4", _gemm_fp4_cases, _check_gemm_fp4),
]
