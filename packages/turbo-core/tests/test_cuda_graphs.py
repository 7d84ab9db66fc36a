"""CUDA-graph capture of the ops that make no host sync (GPU machine only): each op is warmed up,
captured once, then replayed on new input data; the replay must equal an eager call on that data.
A host sync inside an op makes the capture itself fail."""

import pytest
import torch

import turbo_core.ops as ops
from turbo_core import Float8QuantConfig, ScalingGranularity

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]


def _inputs():
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    return r


def _cases(r):
    x, w = r(64, 96), r(80, 96)
    q, k, v = r(2, 33, 4, 64), r(2, 47, 2, 64), r(2, 47, 2, 64)
    probs = torch.rand(64, device="cuda")
    gamma = r(96)
    block = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128)
    return {
        "gemm": (lambda a, b: ops.gemm(a, b, trans_b=True), (x, w)),
        "gemm_fp8_tensorwise": (lambda a, b: ops.gemm_fp8(a, b, trans_b=True, out_dtype=torch.bfloat16), (x, w)),
        "gemm_fp8_blockwise": (lambda a, b: ops.gemm_fp8(a, b, trans_b=True, out_dtype=torch.bfloat16, config=block),
                               (r(64, 256), r(128, 256))),
        "grouped_gemm_fp8_tensorwise": (lambda a, b, lens: ops.grouped_gemm_fp8(a, b, lens, out_dtype=torch.bfloat16),
                                        (r(155, 256), r(4, 128, 256), torch.tensor([40, 0, 77, 33], device="cuda"))),
        "rmsnorm": (lambda a, g_: ops.rmsnorm(a, g_), (x, gamma)),
        "rmsnorm_residual": (lambda a, b, g_: ops.rmsnorm_residual(a, b, g_)[0], (x, r(64, 96), gamma)),
        "swiglu_with_probs": (lambda a, p: ops.swiglu_with_probs(a, p), (r(64, 2 * 48), probs)),
        "flash_attn_func": (lambda a, b, c: ops.flash_attn_func(a, b, c, causal=True), (q, k, v)),
    }


@pytest.mark.parametrize("name", ["gemm", "gemm_fp8_tensorwise", "gemm_fp8_blockwise", "grouped_gemm_fp8_tensorwise", "rmsnorm",
                                  "rmsnorm_residual", "swiglu_with_probs", "flash_attn_func"])
def test_capture_and_replay(name):
    r = _inputs()
    fn, args = _cases(r)[name]
    static = [a.clone() for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*static)  # warm-up: compiles, selects and caches outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static)
    fresh = [a + 0.5 * torch.randn_like(a.float()).to(a.dtype) if a.is_floating_point() else a for a in args]
    for s, f in zip(static, fresh, strict=True):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    want = fn(*fresh)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
