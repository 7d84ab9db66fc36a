"""The reference ``gemm`` primitive (TORCH) through dispatch, against float64 math."""

from __future__ import annotations

import itertools

import pytest
import torch

from turbo_core.dispatch import call, stats
from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = list(TOL)
TRANS = list(itertools.product([False, True], repeat=3))
# Odd, unaligned sizes, and the degenerate M=1, N=1, K=1 edges.
SHAPES = [(67, 45, 93), (1, 37, 29), (33, 1, 17), (19, 23, 1), (1, 1, 1)]


def operands(m, n, k, dtype, trans_a, trans_b, seed=0):
    gen = torch.Generator().manual_seed(seed + m * 7919 + n * 104729 + k)
    a = torch.randn((k, m) if trans_a else (m, k), generator=gen).to(dtype)
    b = torch.randn((n, k) if trans_b else (k, n), generator=gen).to(dtype)
    return a, b


def f64_ref(a, b, trans_a, trans_b, trans_c):
    a64, b64 = a.double(), b.double()
    c = (a64.t() if trans_a else a64) @ (b64.t() if trans_b else b64)
    return c.t() if trans_c else c


def tid(v):
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, tuple) and len(v) == 3 and all(isinstance(x, bool) for x in v):
        return "".join("T" if x else "N" for x in v)
    return "x".join(map(str, v))


@pytest.mark.parametrize("trans", TRANS, ids=tid)
@pytest.mark.parametrize("dtype", DTYPES, ids=tid)
@pytest.mark.parametrize("shape", SHAPES, ids=tid)
def test_gemm_matches_float64(shape, dtype, trans):
    m, n, k = shape
    ta, tb, tc = trans
    a, b = operands(m, n, k, dtype, ta, tb)
    args = GemmArgs(a, b, trans_a=ta, trans_b=tb, trans_c=tc)
    assert gemm_dims(args) == (m, n, k)
    c = call("gemm", args)
    assert c.dtype == dtype
    assert tuple(c.shape) == ((n, m) if tc else (m, n))
    assert c.is_contiguous()
    tol = TOL[dtype]
    torch.testing.assert_close(c.double(), f64_ref(a, b, ta, tb, tc), rtol=tol, atol=tol)
    assert stats() == {("gemm", "TORCH", "default"): 1}


@pytest.mark.parametrize(("dtype", "out_dtype"), [
    (torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float16),
], ids=tid)
def test_out_dtype(dtype, out_dtype):
    a, b = operands(67, 45, 93, dtype, False, True)
    c = call("gemm", GemmArgs(a, b, trans_b=True, out_dtype=out_dtype))
    assert c.dtype == out_dtype
    tol = max(TOL[dtype], TOL[out_dtype])
    torch.testing.assert_close(c.double(), f64_ref(a, b, False, True, False), rtol=tol, atol=tol)


@pytest.mark.parametrize("trans", TRANS, ids=tid)
@pytest.mark.parametrize("dtype", DTYPES, ids=tid)
def test_accumulate_into_out(dtype, trans):
    m, n, k = 37, 21, 53
    ta, tb, tc = trans
    a, b = operands(m, n, k, dtype, ta, tb, seed=1)
    out_shape = (n, m) if tc else (m, n)
    out = torch.randn(out_shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    before = out.double().clone()
    ptr = out.data_ptr()
    res = call("gemm", GemmArgs(a, b, trans_a=ta, trans_b=tb, trans_c=tc, out=out))
    assert res is out and out.data_ptr() == ptr
    tol = TOL[dtype]
    torch.testing.assert_close(out.double(), before + f64_ref(a, b, ta, tb, tc), rtol=tol, atol=tol)
    # twice: accumulates again (beta = 1)
    call("gemm", GemmArgs(a, b, trans_a=ta, trans_b=tb, trans_c=tc, out=out))
    torch.testing.assert_close(out.double(), before + 2 * f64_ref(a, b, ta, tb, tc),
                               rtol=tol, atol=2 * tol)


def test_accumulate_into_out_of_another_dtype():
    # fused wgrad: bf16 operands, fp32 main_grad; out's dtype wins over out_dtype
    a, b = operands(29, 31, 41, torch.bfloat16, True, False)
    out = torch.full((29, 31), 0.5)
    res = call("gemm", GemmArgs(a, b, trans_a=True, out=out, out_dtype=torch.bfloat16))
    assert res is out and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), 0.5 + f64_ref(a, b, True, False, False), rtol=1e-4, atol=1e-4)


def test_fp32_is_accumulated_beyond_fp32():
    # (2^24 + 1) - 2^24 = 1 only when the products are accumulated in more than fp32
    a = torch.tensor([[2.0 ** 24, 1.0, -(2.0 ** 24)]])
    b = torch.ones(3, 1)
    assert call("gemm", GemmArgs(a, b)).item() == 1.0


# -- validation: every error names the argument, before any kernel runs ----------------------------

A = torch.randn(4, 5)
B = torch.randn(5, 3)


@pytest.mark.parametrize(("kwargs", "error", "pattern"), [
    (dict(a=torch.randn(2, 4, 5)), ValueError, r"^a: expected a 2-D tensor, got shape \(2, 4, 5\)"),
    (dict(a=torch.randn(5)), ValueError, r"^a: expected a 2-D tensor"),
    (dict(b=torch.randn(5, 3, 1)), ValueError, r"^b: expected a 2-D tensor"),
    (dict(a=[[1.0]]), TypeError, r"^a: expected a torch.Tensor, got list"),
    (dict(b=None), TypeError, r"^b: expected a torch.Tensor, got NoneType"),
    (dict(a=torch.ones(4, 5, dtype=torch.int32)), TypeError, r"^a: expected dtype in \(float16, bfloat16, float32\), got int32"),
    (dict(a=A.double(), b=B.double()), TypeError, r"^a: expected dtype in .*got float64"),
    (dict(b=B.half()), TypeError, r"^b: expected the dtype of a \(float32\), got float16"),
    (dict(a=A.bfloat16()), TypeError, r"^b: expected the dtype of a \(bfloat16\), got float32"),
    (dict(b=torch.randn(6, 3)), ValueError, r"^b: inner dimension mismatch: op\(a\) is \[4, 5\] but op\(b\) is \[6, 3\]"),
    (dict(trans_a=True), ValueError, r"^b: inner dimension mismatch.*trans_a=True"),
    (dict(trans_b=True), ValueError, r"^b: inner dimension mismatch.*trans_b=True"),
    (dict(out=torch.zeros(3, 4)), ValueError, r"^out: expected shape \(4, 3\), got \(3, 4\)"),
    (dict(out=torch.zeros(4, 3), trans_c=True), ValueError, r"^out: expected shape \(3, 4\), got \(4, 3\)"),
    (dict(out=torch.zeros(12)), ValueError, r"^out: expected a 2-D tensor"),
    (dict(out=torch.zeros(4, 3, dtype=torch.int64)), TypeError, r"^out: expected dtype in"),
    (dict(out=[[0.0] * 3] * 4), TypeError, r"^out: expected a torch.Tensor, got list"),
    (dict(out_dtype=torch.int8), TypeError, r"^out_dtype: expected one of \(float16, bfloat16, float32\), got torch.int8"),
    (dict(out_dtype="float16"), TypeError, r"^out_dtype: expected one of"),
    (dict(out_dtype=torch.float64), TypeError, r"^out_dtype: expected one of"),
    (dict(trans_a=1), TypeError, r"^trans_a: expected a bool, got 1"),
    (dict(trans_b="yes"), TypeError, r"^trans_b: expected a bool, got 'yes'"),
    (dict(trans_c=None), TypeError, r"^trans_c: expected a bool, got None"),
    (dict(trans_c=torch.tensor(True)), TypeError, r"^trans_c: expected a bool"),
    (dict(a=A.to("meta")), ValueError, r"^b: expected a tensor on meta \(like a\), got cpu"),
    (dict(out=torch.zeros(4, 3, device="meta")), ValueError, r"^out: expected a tensor on cpu \(like a\), got meta"),
], ids=lambda v: None)
def test_validation_errors_name_the_argument(use_plugins, fakekit, kwargs, error, pattern):
    use_plugins("fake_a")
    base = dict(a=A, b=B)
    base.update(kwargs)
    args = GemmArgs(**base)
    with pytest.raises(error, match=pattern):
        call("gemm", args)
    with pytest.raises(error, match=pattern):  # also with an explicit backend: validation first
        from turbo_core import use_backend

        with use_backend("FAKEA"):
            call("gemm", args)
    assert fakekit.cfg("FAKEA")["checks"] == 0 and fakekit.cfg("FAKEA")["calls"] == 0
    assert stats() == {}


def test_wrong_argument_object():
    with pytest.raises(TypeError, match="^gemm: expected GemmArgs arguments, got tuple"):
        call("gemm", (A, B))
    with pytest.raises(ValueError, match="^primitive: unknown primitive 'gemmm'"):
        call("gemmm", GemmArgs(A, B))


@pytest.mark.skipif(getattr(torch, "float4_e2m1fn_x2", None) is None, reason="no float4_e2m1fn_x2 in this torch")
def test_e2m1_decode_of_every_code_signed_zero_included():
    """The FP4 operand decode (computed on the data's device, no host table): both nibbles of every
    byte, each code ``s eem`` as the E2M1 value, -0.0 for code 8."""
    from turbo_core.reference.gemm_fp8 import e2m1_values

    values = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    data = torch.arange(256, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).reshape(8, 32)
    want = torch.tensor([[values[b & 15], values[b >> 4]] for b in range(256)], dtype=torch.float64).reshape(8, 64)
    for ct in (torch.float32, torch.float64):
        got = e2m1_values(data, ct).double()
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want)), ct
