"""turbo's FP8 scale layouts -> the orders BLASLt's scale modes read (``scales.py``): each value lands
at the offset the mode's formula gives, whichever way the operand's data is stored; the tile
layout's K padding is zero; an already-right tensor is passed through without a copy."""

from __future__ import annotations

import pytest
import torch

from turbo_hipblaslt.scales import blk128_scales, outer_vector, round_up, vec128_scales


def value(r: int, kb: int) -> float:
    return 1000.0 * r + kb + 1.0


@pytest.mark.parametrize("shape", [(7, 1), (1, 7)])
def test_outer_vector(shape):
    s = torch.arange(7, dtype=torch.float32).reshape(shape)
    out = outer_vector(s)
    assert out.shape == (7,) and out.is_contiguous()
    assert out.tolist() == list(range(7))


@pytest.mark.parametrize("contraction_dim", [0, 1])
def test_vec128_offsets_are_outer_dim_fastest(contraction_dim):
    rows, kblocks = 5, 3  # R = 5 rows of the operand, K = 3 blocks of 128
    logical = torch.tensor([[value(r, kb) for kb in range(kblocks)] for r in range(rows)])  # [R, K/128]
    turbo = logical if contraction_dim == 1 else logical.t().contiguous()  # data [R, K] or [K, R]
    flat = vec128_scales(turbo, contraction_dim).reshape(-1)
    for r in range(rows):
        for kb in range(kblocks):
            assert flat[kb * rows + r] == value(r, kb)


@pytest.mark.parametrize("contraction_dim", [0, 1])
@pytest.mark.parametrize("kblocks", [3, 4, 5])
def test_blk128_offsets_and_zero_padding(contraction_dim, kblocks):
    rblocks = 2
    logical = torch.tensor([[value(rb, kb) for kb in range(kblocks)] for rb in range(rblocks)])  # [R/128, K/128]
    turbo = logical if contraction_dim == 1 else logical.t().contiguous()  # tiles of data [R, K] or [K, R]
    out = blk128_scales(turbo, contraction_dim)
    width = round_up(kblocks, 4)
    assert out.shape == (rblocks, width) and out.is_contiguous()
    flat = out.reshape(-1)
    for rb in range(rblocks):
        for kb in range(width):
            want = value(rb, kb) if kb < kblocks else 0.0
            assert flat[rb * width + kb] == want


def test_blk128_passes_a_ready_tensor_through():
    s = torch.rand(3, 8)
    assert blk128_scales(s, 1).data_ptr() == s.data_ptr()
    assert blk128_scales(s.t().contiguous(), 0).data_ptr() != s.data_ptr()  # a transpose must be copied
