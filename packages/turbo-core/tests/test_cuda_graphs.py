"""CUDA graphs of every public op and module (``turbo_core.testing.graph_cases``) on a GPU, forward
and backward, on the backends selection picks there: a hand-captured ``torch.cuda.CUDAGraph``
(warmed up on a side stream outside the capture, then the forward and the backward captured and
replayed twice with new data copied into the captured inputs) and ``torch.cuda.make_graphed_callables``
(two calls on new data), each against the eager call on the same data (bf16 tolerance 2e-2, FP8/FP4
bits and integers exactly; a stale replay differs by O(1)). A host sync inside an op makes the capture
itself fail; a cache filled inside the capture would hold memory of the graph's pool
(``turbo_core.graph_pool``). ``torch.compile``'s modes: ``test_compile_modes_gpu.py``."""

import pytest
import torch

from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.graph_modes import check_captured, check_graphed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

DEV = torch.device("cuda")
CASES = graph_cases(DEV) if torch.cuda.is_available() else graph_cases("cpu")


@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_captured_graph_replays_new_data(name):
    check_captured(CASES[name], DEV)


@pytest.mark.parametrize("name", sorted(CASES))
def test_make_graphed_callables(name):
    check_graphed(CASES[name], DEV)
