"""What turbo-triton's GPU tests (``test_*_gpu.py``, ``@pytest.mark.gpu``) share.

They test the compiled kernels: this package's conftest turns Triton's interpreter on by default
(for the CPU tests), so run them with ``TRITON_INTERPRET=0 pytest --turbo-only=gpu
packages/turbo-triton/tests``. With the interpreter on and a GPU present they are skipped with that
reason; without a GPU turbo's pytest plugin skips them.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from turbo_core.testing.host_sync import no_host_sync  # noqa: F401 (the GPU tests import it from here)

DEV = torch.device("cuda")

#: Skip mark of every GPU test module here (besides ``pytest.mark.gpu``).
COMPILED = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1" and torch.cuda.is_available(),
    reason="the compiled kernels: run with TRITON_INTERPRET=0 (this package's conftest sets 1 by default)")


def poison_free_memory(byte: int = 0xFF, limit: int = 8 << 30) -> None:
    """Fill half the caching allocator's free memory (at most ``limit`` bytes) with ``byte`` and give
    it back: tensors allocated next start with those bytes (0xFF is NaN in every float format), so an
    element a kernel never writes shows up."""
    free = torch.cuda.mem_get_info()[0]
    blob = torch.empty(int(min(free * 0.5, limit)), dtype=torch.uint8, device=DEV)
    blob.fill_(byte)
    del blob


@contextlib.contextmanager
def poisoned_empty(byte: int = 0xFF):
    """Inside the block ``torch.empty`` and ``torch.empty_like`` return tensors whose bytes are all
    ``byte``: the outputs the launchers allocate start poisoned."""
    empty, empty_like = torch.empty, torch.empty_like

    def fill(t: torch.Tensor) -> torch.Tensor:
        t.untyped_storage().fill_(byte)
        return t

    torch.empty = lambda *a, **k: fill(empty(*a, **k))
    torch.empty_like = lambda *a, **k: fill(empty_like(*a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def capture(fn):
    """``(graph, outputs)``: ``fn()`` run once on a side stream (compilation, workspaces), then captured
    in a CUDA graph (a host sync inside fails the capture); ``outputs`` are ``fn``'s tensors inside the
    graph's memory, rewritten by every ``graph.replay()``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def replay(graph) -> None:
    graph.replay()
    torch.cuda.synchronize()


#: float64 reference slices of at most 2^26 elements (512 MB)
SLICE_ELEMS = 2 ** 26


def row_slices(rows: int, width: int) -> list[slice]:
    """Row ranges of at most ``SLICE_ELEMS`` elements of a ``[rows, width]`` matrix: references of
    model-sized activations computed in float64 a slice at a time."""
    step = max(1, SLICE_ELEMS // max(1, width))
    return [slice(s, min(rows, s + step)) for s in range(0, rows, step)]


def assert_within(what: str, out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> None:
    """Every element ``|out - ref| <= atol + rtol |ref|`` in float64, and no NaN where ``ref`` has none
    (where ``ref`` is NaN, ``out`` may be anything)."""
    out = out.double()
    assert not (torch.isnan(out) & ~torch.isnan(ref)).any(), f"{what}: NaN where the reference is finite"
    bad = ((out - ref).abs() > atol + rtol * ref.abs()) & ~torch.isnan(ref)
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} elements beyond {atol:g} + {rtol:g} |ref|; "
                             f"first at {i}: {out[i].item()!r} vs {ref[i].item()!r}")
