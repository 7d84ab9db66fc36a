"""turbo_triton.launcher on a GPU: after the first launch of a key, launches skip Triton's per-call
path and compute exactly what Triton's own launch computes."""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV

from turbo_triton import launcher

pytestmark = [pytest.mark.gpu, COMPILED]


def _rmsnorm(x, g):
    from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs
    from turbo_triton.normalization.launch import rmsnorm_fwd

    return rmsnorm_fwd(RmsNormFwdArgs(x, g, 1e-6, False, None))[0]


def test_fast_launches_equal_tritons_own_bit_for_bit(monkeypatch):
    from turbo_triton.normalization import kernels

    launcher.clear()
    gen = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(64, 512, device=DEV, generator=gen).to(torch.bfloat16)
    g = torch.randn(512, device=DEV, generator=gen).to(torch.bfloat16)
    first = _rmsnorm(x, g)  # Triton's path, stores the key
    assert launcher.stats()["fast"] == 0 and launcher.stats()["entries"] == 1
    for _ in range(3):
        x2 = torch.randn(64, 512, device=DEV, generator=gen).to(torch.bfloat16)
        fast_out = _rmsnorm(x2, g)
        # Triton's own launch of the same kernel on the same inputs
        monkeypatch.setattr(launcher, "_raw_stream", None)  # forces Triton's path
        slow_out = _rmsnorm(x2, g)
        monkeypatch.undo()
        assert torch.equal(fast_out, slow_out)
    assert launcher.stats()["fast"] == 3
    assert not torch.equal(first, fast_out)  # new data reached the kernel
    # an unaligned view is another key (Triton specializes on 16-byte alignment)
    flat = torch.randn(64 * 512 + 8, device=DEV, generator=gen).to(torch.bfloat16)
    view = flat[1:1 + 64 * 512].view(64, 512)
    torch.testing.assert_close(_rmsnorm(view, g).float(),
                               torch.nn.functional.rms_norm(view.float(), (512,), g.float(), 1e-6), rtol=2e-2, atol=2e-2)
    assert launcher.stats()["entries"] == 2
    assert kernels.rmsnorm_fwd_kernel in launcher._kernels


def test_launch_hooks_take_tritons_path():
    from triton import knobs

    launcher.clear()
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    g = torch.ones(256, device=DEV, dtype=torch.bfloat16)
    _rmsnorm(x, g)
    seen = []
    old = knobs.runtime.launch_enter_hook
    knobs.runtime.launch_enter_hook = lambda meta: seen.append(meta)
    try:
        _rmsnorm(x, g)
    finally:
        knobs.runtime.launch_enter_hook = old
    assert seen and launcher.stats()["fast"] == 0


def test_cuda_graph_capture_of_fast_launches():
    launcher.clear()
    x = torch.randn(32, 1024, device=DEV, dtype=torch.bfloat16)
    g = torch.randn(1024, device=DEV, dtype=torch.bfloat16)
    _rmsnorm(x, g)
    _rmsnorm(x, g)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _rmsnorm(x, g)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    want = torch.nn.functional.rms_norm(x.float(), (1024,), g.float(), 1e-6)
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
    assert launcher.stats()["fast"] >= 2
