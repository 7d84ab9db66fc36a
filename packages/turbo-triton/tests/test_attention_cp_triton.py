"""Ring attention (``turbo_core.ops.attention_cp``) on TRITON's attention kernels under the
interpreter: two ring ranks as threads (``turbo_core.testing.context_parallel.check_ring_case``),
every step's forward and backward calls pinned to TRITON, against float64 attention on the whole
sequence. The zigzag causal layout exercises every step kind (diagonal, front half of the keys, back
half of the queries); the varlen case runs the steps as offsets with empty segments."""

from __future__ import annotations

import pytest

from turbo_core.testing.context_parallel import check_ring_case


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_ring_attention_zigzag_causal(varlen):
    check_ring_case("cpu", ring_size=2, layout="zigzag", causal=True, varlen=varlen, backend="TRITON",
                    seqlen=8 if varlen else 16, heads=(2, 1))


def test_ring_attention_fp8():
    check_ring_case("cpu", ring_size=2, layout="zigzag", causal=True, fp8=True, backend="TRITON", seqlen=64,
                    heads=(1, 1))
