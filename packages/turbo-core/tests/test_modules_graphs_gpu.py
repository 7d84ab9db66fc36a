"""turbo's modules, forward + backward, under CUDA graphs on a GPU: ``torch.compile`` in the
``reduce-overhead`` and ``max-autotune`` modes (CUDA-graph trees, which refuse a call that leaves a
non-output tensor in the graph's memory pool), ``torch.cuda.make_graphed_callables``, and a
hand-captured ``torch.cuda.CUDAGraph`` replayed on new data. Each result is compared with the eager
module's on the same inputs (the eager results are checked against the reference by the
conformance suite)."""

from __future__ import annotations

import pytest
import torch

from turbo_core.low_precision import Float8QuantConfig
from turbo_core.modules import Float8Linear, GroupedLinear, Linear, RMSNorm

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]

DEV = "cuda"
TOL = {"linear": 1e-2, "grouped_linear": 1e-2, "float8_linear": 1e-2, "rmsnorm": 1e-2}


def _module(name: str) -> tuple[torch.nn.Module, callable]:
    """``(module, make_inputs(seed) -> tuple of tensors)``; bf16, a leading input that needs grad."""
    torch.manual_seed(0)
    if name == "linear":
        mod = Linear(256, 384, device=DEV, dtype=torch.bfloat16)
        return mod, lambda s: (torch.randn(64, 256, device=DEV, dtype=torch.bfloat16,
                                           generator=torch.Generator(DEV).manual_seed(s)),)
    if name == "float8_linear":
        mod = Float8Linear(256, 384, config=Float8QuantConfig(), device=DEV, dtype=torch.bfloat16)
        return mod, lambda s: (torch.randn(64, 256, device=DEV, dtype=torch.bfloat16,
                                           generator=torch.Generator(DEV).manual_seed(s)),)
    if name == "grouped_linear":
        mod = GroupedLinear(4, 128, 256, device=DEV, dtype=torch.bfloat16)
        lens = torch.tensor([16, 0, 40, 8], device=DEV, dtype=torch.int64)
        return mod, lambda s: (torch.randn(64, 128, device=DEV, dtype=torch.bfloat16,
                                           generator=torch.Generator(DEV).manual_seed(s)), lens)
    mod = RMSNorm(512, device=DEV, dtype=torch.bfloat16)
    return mod, lambda s: (torch.randn(64, 512, device=DEV, dtype=torch.bfloat16,
                                       generator=torch.Generator(DEV).manual_seed(s)),)


def _eager(mod, inputs):
    x = inputs[0].detach().clone().requires_grad_(True)
    mod.zero_grad(set_to_none=True)
    y = mod(x, *inputs[1:])
    y.float().square().sum().backward()
    return y.detach(), x.grad.detach(), mod.weight.grad.detach()


def _close(got, want, tol, what):
    for g, w, part in zip(got, want, ("output", "input grad", "weight grad"), strict=True):
        torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol,
                                   msg=lambda m, part=part: f"{what} {part}: {m}")


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name", ["linear", "grouped_linear", "float8_linear", "rmsnorm"])
def test_compile_with_cuda_graph_trees(name, mode):
    torch._dynamo.reset()
    mod, make = _module(name)
    compiled = torch.compile(mod, mode=mode)
    for seed in range(3):  # warm-up, recording, replay
        inputs = make(seed)
        x = inputs[0].detach().clone().requires_grad_(True)
        mod.zero_grad(set_to_none=True)
        y = compiled(x, *inputs[1:])
        y.float().square().sum().backward()
        got = (y.detach().clone(), x.grad.detach().clone(), mod.weight.grad.detach().clone())
        _close(got, _eager(mod, inputs), TOL[name], f"{name} under torch.compile({mode!r}), call {seed}")


@pytest.mark.parametrize("name", ["linear", "grouped_linear", "float8_linear", "rmsnorm"])
def test_make_graphed_callables(name):
    mod, make = _module(name)
    ref, _ = _module(name)  # the same seeded init; graphing a module replaces its own forward
    inputs = make(0)
    sample = (inputs[0].detach().clone().requires_grad_(True), *inputs[1:])
    graphed = torch.cuda.make_graphed_callables(mod, sample)
    for seed in (1, 2):
        inputs = make(seed)
        x = inputs[0].detach().clone().requires_grad_(True)
        mod.zero_grad(set_to_none=True)
        y = graphed(x, *inputs[1:])
        y.float().square().sum().backward()
        got = (y.detach().clone(), x.grad.detach().clone(), mod.weight.grad.detach().clone())
        _close(got, _eager(ref, inputs), TOL[name], f"{name} under make_graphed_callables, call {seed}")


@pytest.mark.parametrize("name", ["linear", "grouped_linear", "float8_linear", "rmsnorm"])
def test_hand_captured_graph_replays_new_data(name):
    mod, make = _module(name)
    inputs = make(0)
    static_x = inputs[0].detach().clone().requires_grad_(True)
    rest = inputs[1:]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture (selection, compilation, workspaces)
        for _ in range(2):
            mod.zero_grad(set_to_none=True)
            static_x.grad = None
            mod(static_x, *rest).float().square().sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    mod.zero_grad(set_to_none=True)
    static_x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = mod(static_x, *rest)
        static_y.float().square().sum().backward()
    # the gradients the capture allocated: every replay writes them (the eager check below gives the
    # module fresh ones, which the graph never touches)
    static_dx, static_dw = static_x.grad, mod.weight.grad
    for seed in (1, 2):
        new = make(seed)
        with torch.no_grad():
            static_x.copy_(new[0])
        graph.replay()
        torch.cuda.synchronize()
        got = (static_y.detach().clone(), static_dx.detach().clone(), static_dw.detach().clone())
        _close(got, _eager(mod, new), TOL[name], f"{name} in a hand-captured CUDA graph, replay {seed}")
