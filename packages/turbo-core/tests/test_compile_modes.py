"""turbo's ops and modules under ``torch.compile`` in the modes "default", "reduce-overhead" and
"max-autotune" on the CPU (inductor's C++ backend), forward and backward, against the eager call on
the same inputs (tolerance 1e-5 on fp32 values; integer, boolean and FP8/FP4 outputs exactly), and the
rule that no cache keeps memory allocated inside a CUDA-graph capture (``turbo_core.graph_pool``).

Which cases run here (the table is ``turbo_core.testing.graph_cases``; the GPU tests,
``test_compile_modes_gpu.py`` and ``test_cuda_graphs.py``, run all of it in every mode): a
representative subset of 14 cases, because compiling the whole table three times takes minutes on the
2-core CI machine (about 2 s a case here). It holds the dense and grouped GEMMs, an FP8 GEMM, the
attention ops, RMSNorm (plain, residual, FP8 output), a GLU, an MX quantize/dequantize round trip,
the router and the modules Linear, Float8Linear, GroupedLinear and RMSNorm; the MoE data movement
(moe_permute, token_permute, moe_dispatch) and MoELayer are traced by their own ``aot_eager`` compile
tests and run under inductor on the GPU. On the CPU the three modes compile the
same code (CUDA graphs apply to CUDA tensors only, and max-autotune's GEMM templates do not apply to
turbo's opaque custom ops), so each case runs in one mode; ``gemm`` runs in all three. ``rmsnorm_fp8``
cannot be compiled yet (its case says why): its test is a strict expected failure. Two calls per
case: there is no graph to record or replay on the CPU.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import turbo_core.graph_pool as graph_pool
from turbo_core.ops import _grad_accum, gemm
from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.graph_modes import check_compiled

_CASES = graph_cases("cpu")
_PLAN = {
    "default": ("gemm", "Linear", "grouped_gemm", "flash_attn_varlen_func", "rmsnorm_fp8"),
    "reduce-overhead": ("gemm", "gemm_fp8[BLOCKWISE]", "flash_attn_func", "swiglu_with_probs",
                        "quantize_fp8+dequantize_fp8[MX_BLOCKWISE]", "RMSNorm"),
    "max-autotune": ("gemm", "GroupedLinear", "rmsnorm_residual", "fused_group_topk_routing_with_aux_score",
                     "Float8Linear[ROWWISE]"),
}


def _plan() -> list:
    return [pytest.param(name, mode, id=f"{name}-{mode}",
                         marks=pytest.mark.xfail(reason=_CASES[name].compile_fails, strict=True)
                         if _CASES[name].compile_fails else ())
            for mode, names in _PLAN.items() for name in names if name in _CASES]


@pytest.fixture
def scalar_cpp():
    """Inductor's C++ kernels without SIMD, compiled in this process: its first compilation otherwise
    probes the CPU's vector ISAs by compiling test programs (about 20 s here) and starts a pool of
    compile workers that competes with pytest-xdist's for 2 cores. The kernels turbo's graphs hold
    are glue (bias adds, copies, sums); the ops themselves are opaque custom ops."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.vec_isa_ok": False, "compile_threads": 1}):
        yield


@pytest.mark.parametrize(("name", "mode"), _plan())
def test_compiled_equals_eager(name, mode, scalar_cpp):
    check_compiled(_CASES[name], "cpu", mode, calls=2)


# -- no cache is filled inside a capture ------------------------------------------------------------

@pytest.fixture
def capturing(monkeypatch):
    """``capturing(True)``: the capture state reads as capturing (CUDA initialised, the current stream
    capturing); ``capturing(False)``: not capturing."""
    def set_state(on: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: on)
        monkeypatch.setattr(graph_pool, "trees_warming_up", lambda: False)
    return set_state


def _fused_wgrad(x, w):
    """Megatron's fused wgrad: b's gradient accumulated into ``main_grad``, a dummy returned as its grad."""
    w.main_grad = torch.zeros_like(w)
    gemm(x, w, trans_b=True, fuse_bgrad_accum_pattern="megatron").square().sum().backward()
    return w.main_grad, w.grad


def test_dummy_gradients_are_not_kept_inside_a_capture(capturing, monkeypatch):
    monkeypatch.setattr(_grad_accum, "_dummies", {})
    torch.manual_seed(0)
    x, w = torch.randn(6, 10), torch.randn(4, 10, requires_grad=True)
    want = (x.t() @ (2 * x @ w.detach().t())).t()  # d/dw sum((x w^T)^2)
    capturing(True)
    for _ in range(2):
        w.grad = None
        main, dummy = _fused_wgrad(x, w)
        torch.testing.assert_close(main, want, rtol=1e-5, atol=1e-5)
        assert not dummy.any() and _grad_accum._dummies == {}  # a zero tensor of the call's own
    capturing(False)
    w.grad = None
    _fused_wgrad(x, w)
    assert list(_grad_accum._dummies) == [((4, 10), torch.float32, torch.device("cpu"))]


def test_may_cache_follows_the_capture_state(capturing, monkeypatch):
    capturing(False)
    assert graph_pool.may_cache()
    capturing(True)
    assert not graph_pool.may_cache()
    capturing(False)
    monkeypatch.setattr(graph_pool, "trees_warming_up", lambda: True)
    assert not graph_pool.may_cache()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # nothing can capture without CUDA
    assert graph_pool.may_cache()


class _Stream:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Stream) and other.handle == self.handle

    __hash__ = None


@pytest.mark.parametrize(("manager_stream", "current", "want"), [
    (7, 7, True),     # the current stream is the tree manager's: a warm-up is running
    (7, 3, False),    # another stream: the caller's own work
    (None, 3, False),  # no tree manager on this device
])
def test_trees_warming_up_reads_the_tree_managers_stream(monkeypatch, manager_stream, current, want):
    trees = types.ModuleType("fake_cudagraph_trees")
    manager = None if manager_stream is None else types.SimpleNamespace(stream=_Stream(manager_stream))
    asked = []

    def get_manager(index, create_if_none_exists=True):
        asked.append((index, create_if_none_exists))
        return manager

    trees.get_manager = get_manager
    monkeypatch.setitem(sys.modules, graph_pool._TREES, trees)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda index=None: _Stream(current))
    assert graph_pool.trees_warming_up() is want
    assert asked == [(0, False)]  # never creates a manager
    trees.get_manager = None  # the internals changed: assume a warm-up (allocate per call)
    assert graph_pool.trees_warming_up() is True


def test_trees_warming_up_is_false_without_cuda_or_without_the_trees(monkeypatch):
    monkeypatch.delitem(sys.modules, graph_pool._TREES, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert graph_pool.trees_warming_up() is False
    monkeypatch.setitem(sys.modules, graph_pool._TREES, types.ModuleType("unused"))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert graph_pool.trees_warming_up() is False


def test_the_installed_torch_has_what_trees_warming_up_reads():
    """The CUDA-graph trees of this torch warm up on the tree manager's ``stream`` with the thread's
    allocations routed to the pool, and ``get_manager`` takes ``create_if_none_exists``: what
    ``graph_pool.trees_warming_up`` relies on (elsewhere it assumes a warm-up is always running)."""
    import inspect

    from torch._inductor import cudagraph_trees as trees

    assert "create_if_none_exists" in inspect.signature(trees.get_manager).parameters
    assert "self.stream = torch.cuda.Stream()" in inspect.getsource(trees.CUDAGraphTreeManager.__init__)
    warmup = inspect.getsource(trees.CUDAWarmupNode.run)
    assert "_use_cuda_memory_pool_manager" in warmup and "self.stream" in warmup
    assert "_cuda_beginAllocateCurrentThreadToPool" in inspect.getsource(trees._use_cuda_memory_pool_manager)
