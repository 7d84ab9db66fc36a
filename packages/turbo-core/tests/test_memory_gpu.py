"""1,000 eager calls of every public op and module leave the allocated GPU memory flat (the reference
backend TORCH on a GPU; each backend package runs the same check on its own kernels).

For each case of ``turbo_core.testing.graph_cases`` (its GPU shapes: bf16, model-like sizes),
forward and backward 1,000 times on the same inputs: ``torch.cuda.memory_allocated()`` after the last
call equals its value after the first, which fills the documented caches
(:func:`turbo_core.testing.memory.check_memory_flat`). The CPU side (no op keeps its inputs) is
``test_memory.py``.
"""

import pytest
import torch

from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.memory import check_memory_flat

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

DEV = torch.device("cuda")
CASES = graph_cases(DEV) if torch.cuda.is_available() else graph_cases("cpu")
CALLS = 1000


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_calls_leave_allocated_memory_flat(name):
    check_memory_flat(CASES[name], DEV, CALLS)
