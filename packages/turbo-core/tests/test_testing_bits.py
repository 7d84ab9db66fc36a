"""``turbo_core.testing.bits``: the bit-for-bit gate of the quantization and data-movement tests."""

import pytest
import torch

from turbo_core.testing import assert_same_bits, bit_mismatch

E8M0 = getattr(torch, "float8_e8m0fnu", None)


def test_same_bits_pass_and_nan_payloads_are_free():
    a = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    b = a.clone()
    b.view(torch.int32)[1] = 0x7FC00001  # another NaN payload
    assert_same_bits(a, b)
    assert_same_bits((a.bfloat16(), None), (a.bfloat16(), None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_a_differing_element_is_named_with_both_values(dtype):
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).to(dtype)
    b = a.clone()
    b[1, 0] = 5.0
    with pytest.raises(AssertionError, match=r"out: 1 of 4 elements differ; first at \(1, 0\): 3.0 vs 5.0"):
        assert_same_bits(a, b, what="out")


def test_signed_zero_and_nan_positions_differ():
    assert "differ" in bit_mismatch(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert "NaN at 1 different positions" in bit_mismatch(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0]))


def test_integer_and_byte_dtypes_compare_raw_bits():
    assert "0xffffffff vs 0xfffffffe" in bit_mismatch(torch.tensor([-1], dtype=torch.int32),
                                                      torch.tensor([-2], dtype=torch.int32))
    if E8M0 is not None:  # scales: the NaN encoding 0xFF is a value like any other
        s = torch.tensor([127, 255], dtype=torch.uint8).view(E8M0)
        assert_same_bits(s, s.clone())
        t = s.clone()
        t.view(torch.uint8)[0] = 128
        assert "0x7f vs 0x80" in bit_mismatch(s, t)


def test_dtype_shape_count_and_contiguity():
    a = torch.zeros(2, 3)
    assert "vs expected torch.bfloat16" in bit_mismatch(a, a.bfloat16())
    assert "(3, 2)" in bit_mismatch(a, torch.zeros(3, 2))
    assert "2 outputs vs 1 expected" in bit_mismatch((a, a), (a,))
    assert bit_mismatch([a, None], [a, a]).startswith("output 1:")
    assert bit_mismatch(a.t(), torch.zeros(3, 2)) is None
    assert "not contiguous" in bit_mismatch(a.t(), torch.zeros(3, 2), require_contiguous=True)
