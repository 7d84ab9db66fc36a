"""No op keeps a reference to its inputs after it returns (the reference backend TORCH, CPU).

For every public op and module (the table ``turbo_core.testing.graph_cases``), forward and backward on
fresh leaf tensors, then the outputs, the loss and the leaves dropped: a weak reference to each input
must be dead after a garbage collection. An input kept alive by a module-level cache, a closure, an
autograd graph that outlives its outputs or a reference cycle through an exception shows up here. The
same without autograd (``torch.no_grad``), and after a call that raised.

What turbo keeps on purpose, none of it an input (docs/design-notes.md, "Allocations that outlive a
call"): ``ops._grad_accum._dummies`` (zero tensors it makes itself), ``ops.weight_cache.WeightQuantCache``
(a weight's FP8/FP4 copies, with a *weak* reference to the weight: deleting the weight frees them,
checked below), a module's own parameters and buffers, and ``dispatch.recording()``'s list of calls
(a tool, while its block lasts). The GPU side (1,000 calls leave the allocated memory flat) is
``test_memory_gpu.py``.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from turbo_core import BackendError, Float8QuantConfig, ScalingGranularity, ops, use_backend
from turbo_core.ops.weight_cache import WeightQuantCache
from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.memory import inputs_kept

_CASES = graph_cases("cpu")


def _dead_after(run, make_inputs) -> list[str]:
    """Run ``run(inputs)`` on fresh inputs, drop them, collect: the inputs still alive."""
    inputs = make_inputs()
    refs = [(i, weakref.ref(t)) for i, t in enumerate(inputs)]
    run(inputs)
    del inputs
    gc.collect()
    return [f"input {i} ({tuple(r().shape)} {r().dtype})" for i, r in refs if r() is not None]


@pytest.mark.parametrize("name", list(_CASES))
def test_no_op_keeps_its_inputs(name):
    assert inputs_kept(_CASES[name], "cpu") == [], f"{name}: kept after forward + backward"
    assert inputs_kept(_CASES[name], "cpu", grad=False) == [], f"{name}: kept after a forward without autograd"


def test_a_call_that_raises_keeps_no_input(use_plugins):
    """The traceback of a kernel's exception (kept by the BackendError chained to it) holds the frames
    of the call, whose locals are its inputs: once the error is handled and dropped, so are they."""
    use_plugins("fake_faulty")
    import fake_faulty

    def run(inputs):
        fake_faulty.FAULTS["run"] = RuntimeError("kernel failed")
        with use_backend("FAULTY"), pytest.raises(BackendError, match="gemm: backend FAULTY raised RuntimeError"):
            ops.gemm(*inputs)
        fake_faulty.FAULTS["run"] = None  # the fake's own reference to the exception (and its traceback)

    assert _dead_after(run, lambda: [torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)]) == []


def test_the_weight_cache_holds_its_weight_weakly():
    """The one op argument a cache outlives a call with: the weight of a ``weight_cache``. The cache
    keeps the weight's FP8 copies, not the weight: deleting the weight frees the copies too."""
    cfg = Float8QuantConfig(granularity=ScalingGranularity.ROWWISE)
    cache = WeightQuantCache()
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(8, 64, generator=gen)
    w = torch.nn.Parameter(torch.randn(32, 64, generator=gen))
    ref = weakref.ref(w)
    out = ops.gemm_fp8(a, w, trans_b=True, config=cfg, weight_cache=cache)
    out.sum().backward()
    exact = a.double() @ w.detach().double().t()
    # E4M3 keeps 3 mantissa bits: about 3% relative error a product, less over the whole output
    assert ((out.double() - exact).norm() / exact.norm()).item() < 0.05
    assert len(cache) == 1 and cache.misses == 1  # the copies are kept for the next micro-batch
    ops.gemm_fp8(a, w, trans_b=True, config=cfg, weight_cache=cache)
    assert cache.hits == 1
    del out, w
    gc.collect()
    assert ref() is None
    assert len(cache) == 0  # the entry (and its copies) went with the weight
