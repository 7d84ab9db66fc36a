"""HIPBLASLT's kernels inside a CUDA graph (``@pytest.mark.gpu``; skipped with the backend's reason
where the extension cannot load): a bf16 gemm and a TENSORWISE NN gemm_fp8 (on Hopper its b is copied
to ``[N, K]`` inside the graph) captured on a warmed-up stream (handles, heuristics and the stream's
workspace exist before the capture), replayed on new inputs: equal to eager calls on those inputs (a
stale replay would differ by O(1)).
"""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args

pytestmark = pytest.mark.gpu


def test_capture_and_replay_on_new_inputs():
    from turbo_hipblaslt.probe import probe

    reason = probe()
    if reason:
        pytest.skip(f"HIPBLASLT unavailable: {reason}")
    from turbo_hipblaslt import gemm as dense
    from turbo_hipblaslt import gemm_fp8 as fp8

    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = torch.randn(512, 768, device="cuda", generator=g).bfloat16(), torch.randn(768, 384, device="cuda", generator=g).bfloat16()
    qa = torch.randn(512, 768, device="cuda", generator=g).to(torch.float8_e4m3fn)
    qb = torch.randn(768, 384, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")

    def step():
        return (dense.gemm(GemmArgs(a, b)),
                fp8.gemm_fp8(GemmFp8Args(qa, sa, qb, sb, out_dtype=torch.bfloat16, granularity="TENSORWISE")))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the capture stream
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):  # the warmed-up stream: its workspace is reused
        captured = step()
    a.copy_(torch.randn(a.shape, device="cuda", generator=g))
    qb.copy_(torch.randn(qb.shape, device="cuda", generator=g).to(torch.float8_e4m3fn))
    graph.replay()
    torch.cuda.synchronize()
    for what, got, want in zip(("gemm", "gemm_fp8"), captured, step(), strict=True):
        diff = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert diff <= 1e-2, f"{what}: replay differs from eager by {diff:.3g} of max |eager|"
