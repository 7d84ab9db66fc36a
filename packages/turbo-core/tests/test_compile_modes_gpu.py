"""Every public op and module (``turbo_core.testing.graph_cases``: each FP8 granularity, FP4, attention
dense/varlen/FP8, norms, GLUs, quantization, MoE routing/permutation/dispatch, Linear, Float8Linear,
GroupedLinear, RMSNorm, Attention, MoELayer) under ``torch.compile`` in the modes "default",
"reduce-overhead" and "max-autotune" on a GPU, forward and backward, on the backends selection picks
there, against the eager call on the same inputs (bf16 tolerance 2e-2, FP8/FP4 bits and integers
exactly). With CUDA graphs (the last two modes) the calls are the trees' warm-up, recording and
replay; the trees refuse a call that leaves a tensor in the graph's pool that is not an output
(``turbo_core.graph_pool``'s rule). ``make_graphed_callables`` and hand-captured graphs of the same
cases: ``test_cuda_graphs.py``. Also: an eager call leaves no memory allocated beyond its outputs once
the kept caches exist, and Megatron's fused wgrad keeps no dummy gradient made inside a capture.
"""

from __future__ import annotations

import gc

import pytest
import torch

from turbo_core.modules import Linear
from turbo_core.ops import _grad_accum
from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.graph_modes import COMPILE_MODES, check_compiled, run_eager

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]

DEV = torch.device("cuda")
CASES = graph_cases(DEV) if torch.cuda.is_available() else graph_cases("cpu")


def _params(names, modes):
    out = []
    for name in names:
        why = CASES[name].compile_fails
        for mode in modes:
            marks = pytest.mark.xfail(reason=why, strict=True) if why else ()
            out.append(pytest.param(name, mode, id=f"{name}-{mode}", marks=marks))
    return out


@pytest.mark.parametrize(("name", "mode"), _params(sorted(CASES), COMPILE_MODES))
def test_compiled_equals_eager(name, mode):
    check_compiled(CASES[name], DEV, mode)


def _drop_grads(target) -> None:
    if isinstance(target, torch.nn.Module):
        for p in target.parameters():
            p.grad = None


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_eager_call_keeps_no_memory(name):
    """After a first call (which fills the kept caches: workspaces, a weight's FP8 copies), a call
    forward and backward leaves the allocated bytes where they were once its results are dropped."""
    case = CASES[name]
    target = case.build(DEV)
    inputs = case.inputs(DEV, 0)
    run_eager(case, target, inputs)
    _drop_grads(target)
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    result = run_eager(case, target, inputs)
    del result
    _drop_grads(target)
    gc.collect()
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    assert after == before, f"{name}: {after - before} bytes still allocated after an eager call"


def _megatron_step(lin: Linear, x: torch.Tensor) -> torch.Tensor:
    lin.weight.grad = None
    y = lin(x)
    y.float().square().sum().backward()
    return y


@pytest.mark.parametrize("mode", ["captured", "reduce-overhead"])
def test_fused_wgrad_keeps_no_dummy_made_inside_a_graph(mode):
    """Megatron's fused wgrad (``weight.main_grad``) in a hand-captured graph and under CUDA-graph
    trees: main_grad accumulates what eager calls accumulate, and no dummy gradient made inside the
    capture or the trees' warm-up is kept (a weight shape no other test uses)."""
    torch.manual_seed(0)
    lin = Linear(136, 72, bias=False, device=DEV, dtype=torch.bfloat16)
    lin.weight.main_grad = torch.zeros(72, 136, device=DEV, dtype=torch.float32)
    key = ((72, 136), torch.bfloat16, DEV)
    _grad_accum._dummies.pop(key, None)
    xs = [torch.randn(40, 136, device=DEV, dtype=torch.bfloat16, generator=torch.Generator(DEV).manual_seed(s))
          for s in range(3)]
    if mode == "captured":
        static = xs[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the warm-up outside the capture keeps a dummy: allowed
            _megatron_step(lin, static)
        torch.cuda.current_stream().wait_stream(side)
        _grad_accum._dummies.pop(key, None)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _megatron_step(lin, static)
        assert key not in _grad_accum._dummies, "a dummy gradient made inside the capture was kept"
        lin.weight.main_grad.zero_()
        for x in xs:
            static.copy_(x)
            graph.replay()
    else:
        torch._dynamo.reset()
        compiled = torch.compile(lin, mode=mode)
        for x in xs:  # warm-up, recording, replay
            _megatron_step(compiled, x.clone())
        lin.weight.main_grad.zero_()
        for x in xs:
            _megatron_step(compiled, x.clone())
        torch._dynamo.reset()
    torch.cuda.synchronize()
    got = lin.weight.main_grad.clone()
    lin.weight.main_grad.zero_()
    for x in xs:
        _megatron_step(lin, x.clone())
    torch.testing.assert_close(got, lin.weight.main_grad, rtol=2e-2, atol=2e-2,
                               msg=lambda m: f"fused wgrad main_grad {mode}: {m}")
