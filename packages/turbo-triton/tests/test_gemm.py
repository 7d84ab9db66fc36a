"""The TRITON gemm kernel directly: layouts, accumulate-into-out, trans_c, edge sizes, strided
inputs, and what it declines."""

import itertools

import pytest
import torch

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_triton.gemm.launch import can_handle, gemm

# Odd sizes cross tile edges in every dim; K=0 must give zeros; M=1/N=1 are GEMV shapes.
SIZES = [(37, 29, 45), (1, 17, 33), (19, 1, 8), (5, 7, 0), (64, 48, 96)]


def _ref(a, b, ta, tb, tc):
    c = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
    return c.t() if tc else c


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_layouts_against_float64(m, n, k, dtype):
    torch.manual_seed(m + n + k)
    rtol = 1e-4 if dtype == torch.float32 else 1e-2
    for ta, tb, tc in itertools.product([False, True], repeat=3):
        a = torch.randn(*((k, m) if ta else (m, k))).to(dtype)
        b = torch.randn(*((n, k) if tb else (k, n))).to(dtype)
        c = gemm(GemmArgs(a, b, ta, tb, None, tc))
        assert c.dtype == dtype
        torch.testing.assert_close(c.double(), _ref(a, b, ta, tb, tc), rtol=rtol, atol=rtol,
                                   msg=lambda s, ta=ta, tb=tb, tc=tc: f"ta={ta} tb={tb} tc={tc}: {s}")


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_accumulate_into_out(out_dtype):
    torch.manual_seed(0)
    a, b = torch.randn(23, 40).bfloat16(), torch.randn(31, 40).bfloat16()
    base = torch.randn(31, 23).to(out_dtype)
    out = base.clone()
    got = gemm(GemmArgs(a, b, False, True, None, True, out))
    assert got is out
    want = base.double() + _ref(a, b, False, True, True)
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)


def test_strided_inputs_without_copies():
    torch.manual_seed(1)
    big = torch.randn(40, 64)
    a = big[3:30, ::2]  # non-unit inner stride
    b = torch.randn(32, 19)
    c = gemm(GemmArgs(a, b))
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)


def test_declines_with_reasons(monkeypatch):
    a = torch.randn(4, 4)
    assert can_handle(GemmArgs(a, a)) is None
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(GemmArgs(a, a))
