"""The per-(device, stream) BLASLt workspace and CUDA graphs, on the CPU (the allocation is redirected
to CPU memory, the capture state is patched): outside capture the first call's workspace is kept and
every later call on that stream gets the same one; while a stream captures, or while CUDA-graph trees
warm a graph up, a call that finds none gets a workspace of its own, held by its argument tuple, and
nothing is kept (``turbo_core.graph_pool``'s rule). The GPU side (CUDA-graph trees refusing a
workspace left in their pool) is ``packages/turbo-core/tests/test_compile_modes_gpu.py``."""

from __future__ import annotations

import pytest
import torch

import turbo_core.graph_pool as graph_pool
from turbo_hipblaslt import blaslt, runtime
from turbo_hipblaslt.layout import BlasPlan
from turbo_hipblaslt.matmul_args import Side

STREAM_SLOT, WS_SLOT, WS_SIZE_SLOT = 25, 26, 27  # the stream, workspace pointer and size in the extension's tuple


@pytest.fixture
def cpu_runtime(monkeypatch):
    """Workspaces from CPU memory, empty tables, device 0 and stream handles as given."""
    made: list[torch.Tensor] = []

    def allocate(index, nbytes):
        made.append(torch.empty(max(nbytes, 1), dtype=torch.uint8))
        return made[-1]

    monkeypatch.setattr(runtime, "_allocate", allocate)
    monkeypatch.setattr(runtime, "_workspaces", {})
    monkeypatch.setattr(runtime, "_kept", {})
    monkeypatch.setattr(runtime, "device_index", lambda t: 0)
    monkeypatch.setattr(runtime, "stream_handle", lambda index: 11)
    monkeypatch.setattr(runtime, "tf32", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # so that the capture state is read
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setenv("TURBO_HIPBLASLT_WORKSPACE_MB", "1")
    return made


def test_outside_capture_the_first_workspace_is_kept_per_stream(cpu_runtime):
    ptr, size, held = runtime.workspace(0, 11)
    assert held is None and size == 1 << 20 and ptr == cpu_runtime[0].data_ptr()
    assert runtime.workspace(0, 11) == (ptr, size, None) and len(cpu_runtime) == 1  # reused, not remade
    other = runtime.workspace(0, 12)
    assert other[0] != ptr and set(runtime._workspaces) == {(0, 11), (0, 12)}
    assert runtime._kept[(0, 11)] is cpu_runtime[0]


@pytest.mark.parametrize("why", ["capturing", "trees warm-up"])
def test_inside_capture_a_call_gets_its_own_workspace_and_nothing_is_kept(cpu_runtime, monkeypatch, why):
    if why == "capturing":
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    else:
        monkeypatch.setattr(graph_pool, "trees_warming_up", lambda: True)
    first, second = runtime.workspace(0, 11), runtime.workspace(0, 11)
    for (ptr, size, held), made in zip((first, second), cpu_runtime, strict=True):
        assert held is made and ptr == made.data_ptr() and size == 1 << 20
    assert runtime._workspaces == {} and runtime._kept == {}


def test_a_kept_workspace_is_read_inside_capture(cpu_runtime, monkeypatch):
    kept = runtime.workspace(0, 11)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert runtime.workspace(0, 11) == kept and len(cpu_runtime) == 1


def test_args_hold_a_per_call_workspace_until_they_are_dropped(cpu_runtime, monkeypatch):
    d = torch.empty(8, 8)
    plan = BlasPlan(8, 8, 8, False, False, False, 8, 8, 8)
    kept = blaslt.args_for(plan, Side(d.data_ptr(), 0), Side(d.data_ptr(), 0), d)
    assert type(kept) is tuple and kept[WS_SLOT] == cpu_runtime[0].data_ptr() and kept[WS_SIZE_SLOT] == 1 << 20

    monkeypatch.setattr(runtime, "stream_handle", lambda index: 99)  # a stream with no kept workspace
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    own = blaslt.args_for(plan, Side(d.data_ptr(), 0), Side(d.data_ptr(), 0), d)
    assert isinstance(own, blaslt.HeldArgs) and own.workspace is cpu_runtime[1]
    assert own[WS_SLOT] == cpu_runtime[1].data_ptr() and own[WS_SIZE_SLOT] == 1 << 20
    assert own[STREAM_SLOT] == 99 and tuple(own)[:STREAM_SLOT] == tuple(kept)[:STREAM_SLOT]
    assert (0, 99) not in runtime._workspaces
