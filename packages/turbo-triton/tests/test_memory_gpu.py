"""1,000 eager calls of every case of ``turbo_core.testing.graph_cases`` that runs a primitive TRITON
registers, those primitives set to TRITON (a code setting, which the autograd thread of the backward
sees too), leave the allocated GPU memory flat: ``torch.cuda.memory_allocated()`` after the last
forward + backward equals its value after the first (which fills the documented caches; the launch
table holds no tensor). :func:`turbo_core.testing.memory.check_memory_flat` does the calls. The
dispatcher's statistics must show TRITON serving every pinned primitive that ran; a case whose shape
TRITON declines on this GPU is skipped with TRITON's reason.

Run with the compiled kernels: ``TRITON_INTERPRET=0 pytest --turbo-only=gpu
packages/turbo-triton/tests/test_memory_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV

from turbo_core.dispatch import GlobalBackendManager, stats
from turbo_core.dispatch.dispatcher import BackendError, KernelError
from turbo_core.plugins.host import get_host
from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.graph_modes import run_eager
from turbo_core.testing.memory import check_memory_flat

pytestmark = [pytest.mark.gpu, COMPILED]

CASES = graph_cases(DEV) if torch.cuda.is_available() else graph_cases("cpu")
CALLS = 1000


@pytest.fixture
def pinned():
    """``pinned(name)``: the case's TRITON primitives set to TRITON until the test ends; returns them."""
    names: list[str] = []

    def pin(case_name: str) -> tuple[str, ...]:
        registry = get_host().registry
        prims = tuple(p for p in CASES[case_name].primitives if registry.kernel(p, "TRITON") is not None)
        for p in prims:
            GlobalBackendManager.set_backend(p, "TRITON")
            names.append(p)
        return prims

    yield pin
    for p in names:
        GlobalBackendManager.set_backend(p, None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_calls_leave_allocated_memory_flat(name, pinned):
    prims = pinned(name)
    if not prims:
        pytest.skip(f"{name} runs no primitive TRITON registers")
    case = CASES[name]
    try:  # TRITON's own refusal of this shape is a skip, with its reason
        run_eager(case, case.build(DEV), case.inputs(DEV, 0))
    except KernelError:
        raise
    except BackendError as exc:
        pytest.skip(str(exc))
    before = stats()
    check_memory_flat(case, DEV, CALLS)
    ran = {(p, backend) for (p, backend, how), n in stats().items() if n > before.get((p, backend, how), 0)}
    others = sorted(f"{p} on {backend}" for p, backend in ran if p in prims and backend != "TRITON")
    assert not others, f"{name}: pinned primitives ran elsewhere: {others}"
    assert any(backend == "TRITON" for _, backend in ran), f"{name}: no TRITON kernel ran"
