"""The ``grouped_gemm`` suite's ``torch`` provider on the GPU (``@pytest.mark.gpu``): the calling
convention of ``torch._grouped_mm`` it relies on computes the suite's forward / dgrad / wgrad, checked
against float64 per group before anything is timed against it.

Convention (``turbo_core.bench.suites.grouped_gemm``): int32 cumulative group ends as ``offs``;
forward ``_grouped_mm(x, w.transpose(-2, -1))`` with ``w [G, out, in]``; dgrad ``_grouped_mm(dy, w)``;
wgrad ``_grouped_mm(dy.t(), x)`` giving ``[G, out, in]``. Aligned and unaligned group lengths, an
empty group, and rows past the last group (forward and dgrad: only the groups' rows are compared).
"""

from __future__ import annotations

import pytest
import torch

from turbo_core.testing import assert_close_to_reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

K_IN, N_OUT = 64, 48
CASES = {"aligned": ((32, 0, 64, 16), 0), "unaligned": ((5, 0, 17, 30), 0), "unaligned+tail": ((5, 0, 17, 30), 9)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad"])
def test_torch_provider_convention(pass_, case):
    from turbo_core.bench.suites.grouped_gemm import torch_provider

    if torch.version.hip or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("torch._grouped_mm: CUDA sm90+")
    lens, tail = CASES[case]
    if pass_ == "wgrad" and tail:
        pytest.skip("the suite's wgrad has no rows past the groups")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = sum(lens)
    m = rows + tail

    def r(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(torch.bfloat16)

    w = r(len(lens), N_OUT, K_IN)
    p, q = {"fwd": (r(m, K_IN), w), "dgrad": (r(m, N_OUT), w), "wgrad": (r(m, K_IN), r(m, N_OUT))}[pass_]
    lens_t = torch.tensor(lens, dtype=torch.int64, device="cuda")
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64, device="cuda")
    offs[1:] = torch.cumsum(lens_t, 0)
    got = torch_provider(pass_)(p, q, lens_t, offs, offs[1:].to(torch.int32))
    start, want = 0, []
    for i, n in enumerate(lens):
        pg = p[start:start + n].double()
        if pass_ == "fwd":
            want.append(pg @ w[i].double().t())
        elif pass_ == "dgrad":
            want.append(pg @ w[i].double())
        else:
            want.append(q[start:start + n].double().t() @ pg)
        start += n
    if pass_ == "wgrad":
        assert_close_to_reference(got, torch.stack(want), what="wgrad [G, out, in]")
    else:
        assert_close_to_reference(got[:rows], torch.cat(want), what=f"{pass_} rows of the groups")
