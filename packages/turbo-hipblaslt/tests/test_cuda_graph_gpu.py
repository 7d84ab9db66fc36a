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


@pytest.mark.parametrize("mode", ["captured", "reduce-overhead"])
def test_no_workspace_is_kept_from_inside_a_graph(mode):
    """A call inside a capture on a stream with no kept workspace, or inside CUDA-graph trees' warm-up
    and recording (on the trees' own stream), gets a workspace of its own and keeps none
    (``turbo_core.graph_pool``); the graph's results equal eager calls on new inputs."""
    from turbo_hipblaslt.probe import probe

    reason = probe()
    if reason:
        pytest.skip(f"HIPBLASLT unavailable: {reason}")
    from turbo_hipblaslt import gemm as dense
    from turbo_hipblaslt import runtime

    g = torch.Generator(device="cuda").manual_seed(1)
    a, b = (torch.randn(s, device="cuda", generator=g).bfloat16() for s in ((256, 512), (512, 384)))
    dense.gemm(GemmArgs(a, b))  # handles and heuristics outside any graph (the current stream keeps one)
    kept = set(runtime._workspaces)
    if mode == "captured":
        stream = torch.cuda.Stream()  # never used outside the capture: no workspace of its own
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = dense.gemm(GemmArgs(a, b))
        outs = []
        for _ in range(2):
            a.copy_(torch.randn(a.shape, device="cuda", generator=g))
            graph.replay()
            torch.cuda.synchronize()
            outs.append((out.clone(), dense.gemm(GemmArgs(a, b))))
    else:
        from turbo_core.dispatch import GlobalBackendManager
        from turbo_core.ops import gemm

        torch._dynamo.reset()
        GlobalBackendManager.set_backend("gemm", "HIPBLASLT")  # the op's custom op runs this backend
        try:
            fn = torch.compile(lambda x, y: gemm(x, y), mode=mode)
            outs = []
            for _ in range(3):  # warm-up, recording, replay: the trees check their pool after each
                x = torch.randn(a.shape, device="cuda", generator=g).bfloat16()
                outs.append((fn(x, b).clone(), dense.gemm(GemmArgs(x, b))))
        finally:
            GlobalBackendManager.set_backend("gemm", None)
            torch._dynamo.reset()
    assert set(runtime._workspaces) == kept, "a workspace made inside a graph was kept"
    for got, want in outs:
        diff = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert diff <= 1e-2, f"{mode}: the graph's gemm differs from eager by {diff:.3g} of max |eager|"
