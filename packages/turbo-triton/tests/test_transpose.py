"""The FP8 tiled transpose (interpreter): equals torch's transpose copy for 2-D/3-D, odd sizes,
strided inputs, FP8 bit patterns unchanged (NaN/negative zero included)."""

import pytest
import torch

from turbo_triton.transpose import transpose_last2


@pytest.mark.parametrize("shape", [(37, 45), (1, 70), (64, 64), (3, 65, 33), (2, 0, 5)])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8], ids=str)
def test_matches_torch_bit_for_bit(shape, dtype):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8).view(dtype)  # every byte, NaNs too
    y = transpose_last2(x)
    want = x.transpose(-1, -2).contiguous()
    assert y.dtype == dtype and y.shape == want.shape and y.is_contiguous()
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))


def test_strided_input():
    base = torch.randint(0, 256, (50, 90), dtype=torch.uint8)
    x = base[3:40:2, 5:80]  # non-unit row step
    assert torch.equal(transpose_last2(x), x.t().contiguous())
    xt = base.t()[10:60, :33]  # column-major view
    assert torch.equal(transpose_last2(xt), xt.t().contiguous())


def test_rejects_wider_elements():
    with pytest.raises(ValueError, match="1-byte"):
        transpose_last2(torch.zeros(4, 4))
