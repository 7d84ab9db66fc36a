"""A fake ``turbo_ck._C`` for CPU tests: reads the operands through the integer pointers and leading
dims it is given (host memory of CPU tensors), computes in float64 what ``csrc/ck_problem.h`` says each
kind computes, and writes the result through the C pointer. So the tests check the Python side's
pointers, strides, swaps and scale layouts against independent math, without ROCm."""

from __future__ import annotations

import ctypes

import torch

from turbo_ck.codes import DTYPE_CODES, KIND_BLOCKWISE, KIND_PLAIN, KIND_ROWWISE

DTYPES = {v: k for k, v in DTYPE_CODES.items()}


def view(ptr: int, dtype: torch.dtype, rows: int, cols: int, ld: int) -> torch.Tensor:
    size = torch.empty(0, dtype=dtype).element_size()
    nbytes = ((rows - 1) * ld + cols) * size
    flat = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8).view(dtype)
    return flat.as_strided((rows, cols), (ld, 1))


class FakeCk:
    ARCHS = "gfx942,gfx950"

    def __init__(self):
        self.calls = []

    def gemm(self, arch, kind, a_t, b_t, c_t, m, n, k, a, lda, b, ldb, c, ldc, sa, sb, stream):
        self.calls.append(("gemm", arch, kind, a_t, b_t, c_t, m, n, k, lda, ldb, ldc))
        A = view(a, DTYPES[a_t], m, k, lda).double()
        B = view(b, DTYPES[b_t], n, k, ldb).double()
        if kind == KIND_ROWWISE:
            A = A * view(sa, torch.float32, m, 1, 1).double()
            B = B * view(sb, torch.float32, n, 1, 1).double()
        elif kind == KIND_BLOCKWISE:
            kb = -(-k // 128)
            sa_ = view(sa, torch.float32, m, kb, kb).double()
            sb_ = view(sb, torch.float32, -(-n // 128), kb, kb).double()
            A = A * sa_.repeat_interleave(128, 1)[:, :k]
            B = B * sb_.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        else:
            assert kind == KIND_PLAIN
        view(c, DTYPES[c_t], m, n, ldc).copy_(A @ B.T)

    def gemm_many(self, arch, kind, a_t, b_t, c_t, n, k, lda, ldb, ldc, stream, calls):
        for m, a, b, c, sa, sb in calls:
            self.gemm(arch, kind, a_t, b_t, c_t, m, n, k, a, lda, b, ldb, c, ldc, sa, sb, stream)
