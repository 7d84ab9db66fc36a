"""Properties of the grouped GEMMs (bf16/fp16/fp32, FP8, FP4; forward and variable-K wgrad) against
float64 math group by group.

Drawn: the group count, group lengths with zeros and sometimes one huge group, rows past the last
group (an over-allocated buffer: zero in the forward's result, never read by the wgrad), K and N
from 0 up, ``trans_b`` / ``trans_c``, accumulation into ``out``, the ``num_cu`` / ``schedule``
hints, strided ``a`` and ``b``; FP8/FP4 as in the dense GEMM properties, with the grouped scale
layouts of the spec (BLOCKWISE row scales stored transposed; 1-D or 2-D weight blocks; the padded,
block-aligned groups of the wgrad's BLOCKWISE and MX layouts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GroupedGemmFp4Args,
    GroupedGemmFp4VariableKArgs,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
)
from turbo_core.testing.cases.grouped_gemm import reference_grouped_gemm_variable_k
from turbo_core.testing.numerics import assert_close_fp8_gemm
from turbo_core.testing.properties.gemm import _FNUZ_PAIRS, _OCP_PAIRS
from turbo_core.testing.properties.harness import Property, Target, close, overflowed
from turbo_core.testing.properties.lowp import dequant, random_scales
from turbo_core.testing.properties.strategies import (
    FLOAT_DTYPES,
    LAYOUTS,
    dims,
    e8m0_bytes,
    fp4_bytes,
    fp8_data,
    generator,
    group_lens,
    lay_out,
    offsets,
    seeds,
)

__all__ = ["PROPERTIES"]

_HINTS = st.sampled_from(((None, "static"), (None, "work_steal"), (1, "static"), (3, "static")))


@dataclass(frozen=True)
class GroupedCase:
    """Groups ``lens`` packed along ``M_total = sum(lens) + extra`` rows."""

    lens: tuple[int, ...]
    extra: int
    k: int
    n: int
    dtype: torch.dtype
    trans: bool  # trans_b (forward) or trans_c (wgrad)
    accumulate: torch.dtype | None  # wgrad: dtype of an ``out`` accumulated into
    hints: tuple[int | None, str]
    layout_a: str
    layout_b: str
    seed: int


def _grouped_cases(max_dim: int, wgrad: bool):
    return st.builds(GroupedCase, group_lens(4, max_dim).map(tuple), st.sampled_from((0, 0, 1, 3)),
                     dims(0, max_dim), dims(0, max_dim), st.sampled_from(FLOAT_DTYPES), st.booleans(),
                     st.one_of(st.none(), st.sampled_from(FLOAT_DTYPES)) if wgrad else st.none(), _HINTS,
                     st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS), seeds())


def _groups(lens, target: Target):
    return (target.put(torch.tensor(lens, dtype=torch.int64)),
            target.put(torch.tensor(offsets(list(lens)), dtype=torch.int64)))


def _forward_want(a64, b64_per_group, lens, trans_b):
    m = a64.shape[0]
    n = b64_per_group.shape[1] if trans_b else b64_per_group.shape[2]
    want = torch.zeros(m, n, dtype=torch.float64)
    offs = offsets(list(lens))
    for g, ln in enumerate(lens):
        bg = b64_per_group[g].t() if trans_b else b64_per_group[g]
        want[offs[g]:offs[g] + ln] = a64[offs[g]:offs[g] + ln] @ bg
    return want


def _wgrad_want(a64, b64, lens, trans_c, out0):
    """``C[g] = A_g.T @ B_g`` (a64 ``[M, K]``, b64 ``[M, N]``), plus ``out0``."""
    c = reference_grouped_gemm_variable_k(a64, b64, lens, trans_c)
    return c + out0.to(torch.float64) if out0 is not None else c


def _check_grouped(c: GroupedCase, target: Target) -> None:
    g = generator(c.seed)
    m = sum(c.lens) + c.extra
    a = torch.randn(m, c.k, generator=g).to(c.dtype)
    b_shape = (len(c.lens), c.n, c.k) if c.trans else (len(c.lens), c.k, c.n)
    b = torch.randn(b_shape, generator=g).to(c.dtype)
    want = _forward_want(a.double(), b.double(), c.lens, c.trans)
    lens, offs = _groups(c.lens, target)
    args = GroupedGemmArgs(target.put(lay_out(a, c.layout_a)), target.put(lay_out(b, c.layout_b)), lens, offs,
                           c.trans, *c.hints)
    res = target.call(args)
    close(res, want, c.dtype, "grouped_gemm")


def _check_grouped_wgrad(c: GroupedCase, target: Target) -> None:
    g = generator(c.seed)
    m = sum(c.lens) + c.extra
    a = torch.randn(m, c.k, generator=g).to(c.dtype)
    b = torch.randn(m, c.n, generator=g).to(c.dtype)
    shape = (len(c.lens), c.n, c.k) if c.trans else (len(c.lens), c.k, c.n)
    out0 = torch.randn(shape, generator=g).to(c.accumulate) if c.accumulate is not None else None
    want = _wgrad_want(a.double(), b.double(), c.lens, c.trans, out0)
    lens, offs = _groups(c.lens, target)
    args = GroupedGemmVariableKArgs(target.put(lay_out(a, c.layout_a)), target.put(lay_out(b, c.layout_b)), lens,
                                    offs, c.trans, c.hints[0], target.put(out0.clone()) if out0 is not None else None)
    res = target.call(args)
    if args.out is not None and res is not args.out:
        raise AssertionError("grouped_gemm_variable_k: with out, the result must be out itself")
    close(res, want, args.result_dtype, "grouped_gemm_variable_k")


# -- FP8 / FP4 -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupedLowpCase:
    lens: tuple[int, ...]
    extra: int
    k: int
    n: int
    granularity: str  # FP4: MX_BLOCKWISE
    a_dtype: torch.dtype
    b_dtype: torch.dtype
    block_size: int | None
    two_d: bool  # forward BLOCKWISE: b scaled by bs x bs tiles
    trans: bool  # trans_b (forward; MX/FP4: True) or trans_c (wgrad)
    out_dtype: torch.dtype
    accumulate: bool  # wgrad: into an ``out`` of out_dtype
    num_cu: int | None
    seed: int


@st.composite
def _lowp_cases(draw, max_dim: int, wgrad: bool, fp4: bool):
    gran = "MX_BLOCKWISE" if fp4 else draw(st.sampled_from(("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    pairs = st.sampled_from(_OCP_PAIRS)
    a_dt, b_dt = (None, None) if fp4 else draw(pairs if mx else st.one_of(pairs, pairs, st.sampled_from(_FNUZ_PAIRS)))
    bs = draw(st.sampled_from((16, 32, 64, 128))) if gran == "BLOCKWISE" else None
    # wgrad BLOCKWISE / MX / FP4: each group starts on a multiple of the padding the quantizer applies
    multiple = (bs if gran == "BLOCKWISE" else 512 if fp4 else 128 if mx else 1) if wgrad else 1
    short = max_dim if multiple == 1 else multiple
    lens = tuple(draw(group_lens(3 if multiple > 1 else 4, short, multiple=multiple,
                                 huge=4 * max_dim if multiple == 1 else 2 * multiple)))
    extra = draw(st.sampled_from((0, 0, 1, 3))) * (32 if wgrad and multiple > 1 else 1)
    k = 32 * draw(st.integers(0, max(1, max_dim // 16))) if mx and not wgrad else draw(dims(0, max_dim))
    return GroupedLowpCase(lens, extra, k, draw(dims(0, max_dim)), gran, a_dt, b_dt, bs,
                           draw(st.booleans()) if gran == "BLOCKWISE" and not wgrad else False,
                           True if mx and not wgrad else draw(st.booleans()), draw(st.sampled_from(FLOAT_DTYPES)),
                           draw(st.booleans()) if wgrad else False, draw(st.sampled_from((None, None, 2))),
                           draw(seeds()))


def _check_result(res, args, want, what: str) -> None:
    if getattr(args, "out", None) is not None and res is not args.out:
        raise AssertionError(f"{what}: with out, the result must be out itself")
    dtype = args.out.dtype if getattr(args, "out", None) is not None else args.out_dtype
    if res.dtype != dtype or tuple(res.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: {res.dtype} {tuple(res.shape)}, expected {dtype} {tuple(want.shape)}")
    assert_close_fp8_gemm(res, overflowed(want, dtype), dtype=dtype, what=what)


def _check_lowp_forward(c: GroupedLowpCase, target: Target) -> None:
    g = generator(c.seed)
    groups, m, bs = len(c.lens), sum(c.lens) + c.extra, c.block_size
    b_shape = (groups, c.n, c.k) if c.trans else (groups, c.k, c.n)
    fp4 = c.a_dtype is None
    if fp4:
        a, sa = fp4_bytes((m, c.k // 2), g), e8m0_bytes((m, c.k // 32), g)
        b, sb = fp4_bytes((groups, c.n, c.k // 2), g), e8m0_bytes((groups, c.n, c.k // 32), g)
        a64, b64 = dequant(a, sa, (1, 32)), dequant(b, sb, (1, 1, 32))
    else:
        a, b = fp8_data((m, c.k), c.a_dtype, g), fp8_data(b_shape, c.b_dtype, g)
        k_dim = 2 if c.trans else 1  # b's contraction dim
        if c.granularity == "TENSORWISE":
            sa, sb = random_scales((), g), random_scales((), g)
            a64, b64 = dequant(a, sa, None), dequant(b, sb, None)
        elif c.granularity == "ROWWISE":
            sb_shape = tuple(1 if i == k_dim else d for i, d in enumerate(b_shape))
            sa, sb = random_scales((m, 1), g), random_scales(sb_shape, g)
            a64 = dequant(a, sa, (1, None))
            b64 = dequant(b, sb, tuple(None if i == k_dim else 1 for i in range(3)))
        elif c.granularity == "BLOCKWISE":
            sa = random_scales((-(-c.k // bs), m), g)
            a64 = dequant(a, sa.t(), (1, bs))
            if c.two_d:
                sb = random_scales((groups, -(-b_shape[1] // bs), -(-b_shape[2] // bs)), g)
                b64 = dequant(b, sb, (1, bs, bs))
            else:
                sb_shape = tuple(-(-d // bs) if i == k_dim else d for i, d in enumerate(b_shape))
                sb = random_scales(sb_shape, g)
                b64 = dequant(b, sb, tuple(bs if i == k_dim else 1 for i in range(3)))
        else:
            sa, sb = e8m0_bytes((m, c.k // 32), g), e8m0_bytes((groups, c.n, c.k // 32), g)
            a64, b64 = dequant(a, sa, (1, 32)), dequant(b, sb, (1, 1, 32))
    want = _forward_want(a64, b64, c.lens, c.trans)
    lens, offs = _groups(c.lens, target)
    put = target.put
    if fp4:
        args = GroupedGemmFp4Args(put(a), put(sa), put(b), put(sb), lens, offs, True, c.out_dtype, c.num_cu)
    else:
        args = GroupedGemmFp8Args(put(a), put(sa), put(b), put(sb), lens, offs, c.trans, c.out_dtype,
                                  c.granularity, bs, c.num_cu)
    _check_result(target.call(args), args, want, "grouped_gemm_fp4" if fp4 else "grouped_gemm_fp8")


def _check_lowp_wgrad(c: GroupedLowpCase, target: Target) -> None:
    g = generator(c.seed)
    groups, m, bs = len(c.lens), sum(c.lens) + c.extra, c.block_size
    fp4 = c.a_dtype is None
    if fp4:  # stored transposed, packed along M
        a, sa = fp4_bytes((c.k, m // 2), g), e8m0_bytes((c.k, m // 32), g)
        b, sb = fp4_bytes((c.n, m // 2), g), e8m0_bytes((c.n, m // 32), g)
        a64, b64 = dequant(a, sa, (1, 32)).t(), dequant(b, sb, (1, 32)).t()
    elif c.granularity == "MX_BLOCKWISE":
        a, sa = fp8_data((c.k, m), c.a_dtype, g), e8m0_bytes((c.k, m // 32), g)
        b, sb = fp8_data((c.n, m), c.b_dtype, g), e8m0_bytes((c.n, m // 32), g)
        a64, b64 = dequant(a, sa, (1, 32)).t(), dequant(b, sb, (1, 32)).t()
    else:
        a, b = fp8_data((m, c.k), c.a_dtype, g), fp8_data((m, c.n), c.b_dtype, g)
        if c.granularity == "TENSORWISE":
            sa, sb, blocks = random_scales((), g), random_scales((), g), None
        elif c.granularity == "ROWWISE":
            sa, sb, blocks = random_scales((1, c.k), g), random_scales((1, c.n), g), (None, 1)
        else:
            sa, sb = random_scales((-(-m // bs), c.k), g), random_scales((-(-m // bs), c.n), g)
            blocks = (bs, 1)
        a64, b64 = dequant(a, sa, blocks), dequant(b, sb, blocks)
    shape = (groups, c.n, c.k) if c.trans else (groups, c.k, c.n)
    out0 = torch.randn(shape, generator=g).to(c.out_dtype) if c.accumulate else None
    want = _wgrad_want(a64, b64, c.lens, c.trans, out0)
    lens, offs = _groups(c.lens, target)
    put = target.put
    out = put(out0.clone()) if out0 is not None else None
    out_dtype = None if c.accumulate else c.out_dtype
    if fp4:
        args = GroupedGemmFp4VariableKArgs(put(a), put(sa), put(b), put(sb), lens, offs, out_dtype, c.trans,
                                           c.num_cu, out)
    else:
        args = GroupedGemmFp8VariableKArgs(put(a), put(sa), put(b), put(sb), lens, offs, out_dtype, c.granularity,
                                           bs, c.trans, c.num_cu, out)
    what = "grouped_gemm_fp4_variable_k" if fp4 else "grouped_gemm_fp8_variable_k"
    _check_result(target.call(args), args, want, what)


PROPERTIES = [
    Property("grouped_gemm", lambda d: _grouped_cases(d, False), _check_grouped),
    Property("grouped_gemm_variable_k", lambda d: _grouped_cases(d, True), _check_grouped_wgrad),
    Property("grouped_gemm_fp8", lambda d: _lowp_cases(d, False, False), _check_lowp_forward),
    Property("grouped_gemm_fp8_variable_k", lambda d: _lowp_cases(d, True, False), _check_lowp_wgrad),
    Property("grouped_gemm_fp4", lambda d: _lowp_cases(d, False, True), _check_lowp_forward),
    Property("grouped_gemm_fp4_variable_k", lambda d: _lowp_cases(d, True, True), _check_lowp_wgrad),
]
