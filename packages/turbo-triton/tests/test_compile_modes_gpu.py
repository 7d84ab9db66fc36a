"""turbo-triton's kernels inside graphs on a GPU: every case of ``turbo_core.testing.graph_cases`` that
runs a primitive this backend registers, with those primitives set to TRITON (a code setting, which
the autograd thread of the backward sees too), forward and backward, under ``torch.compile``
("default", "reduce-overhead", "max-autotune"), ``torch.cuda.make_graphed_callables`` and a
hand-captured ``torch.cuda.CUDAGraph`` replayed on new data, against the eager call on the same inputs
(bf16 tolerance 2e-2, FP8/FP4 bits and integers exactly). The dispatcher's statistics must show TRITON
serving every pinned primitive that ran. A case whose shape TRITON declines on this GPU is skipped with
TRITON's reason.

Run with the compiled kernels: ``TRITON_INTERPRET=0 pytest --turbo-only=gpu
packages/turbo-triton/tests/test_compile_modes_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV

from turbo_core.dispatch import GlobalBackendManager, stats
from turbo_core.dispatch.dispatcher import BackendError, KernelError
from turbo_core.plugins.host import get_host
from turbo_core.testing.graph_cases import graph_cases
from turbo_core.testing.graph_modes import COMPILE_MODES, check_captured, check_compiled, check_graphed, run_eager

pytestmark = [pytest.mark.gpu, COMPILED]

CASES = graph_cases(DEV) if torch.cuda.is_available() else graph_cases("cpu")
MODES = (*COMPILE_MODES, "make_graphed_callables", "captured")


def _triton_primitives(name: str) -> tuple[str, ...]:
    registry = get_host().registry
    return tuple(p for p in CASES[name].primitives if registry.kernel(p, "TRITON") is not None)


def _params():
    out = []
    for name in sorted(CASES):
        why = CASES[name].compile_fails
        for mode in MODES:
            marks = pytest.mark.xfail(reason=why, strict=True) if why and mode in COMPILE_MODES else ()
            out.append(pytest.param(name, mode, id=f"{name}-{mode}", marks=marks))
    return out


@pytest.fixture
def pinned(request):
    """``pinned(name)``: the case's TRITON primitives set to TRITON until the test ends; returns them."""
    names: list[str] = []

    def pin(case_name: str) -> tuple[str, ...]:
        prims = _triton_primitives(case_name)
        for p in prims:
            GlobalBackendManager.set_backend(p, "TRITON")
            names.append(p)
        return prims

    yield pin
    for p in names:
        GlobalBackendManager.set_backend(p, None)


@pytest.mark.parametrize(("name", "mode"), _params())
def test_triton_kernels_in_graphs(name, mode, pinned):
    prims = pinned(name)
    if not prims:
        pytest.skip(f"{name} runs no primitive TRITON registers")
    case = CASES[name]
    try:  # the eager call first: TRITON's own refusal of this shape is a skip, with its reason
        run_eager(case, case.build(DEV), case.inputs(DEV, 0))
    except KernelError:
        raise  # a kernel that raised is a failure, not a refusal
    except BackendError as exc:
        pytest.skip(str(exc))
    before = stats()
    if mode in COMPILE_MODES:
        check_compiled(case, DEV, mode)
    elif mode == "make_graphed_callables":
        check_graphed(case, DEV)
    else:
        check_captured(case, DEV)
    ran = {(p, backend) for (p, backend, _how), n in stats().items() if n > before.get((p, backend, _how), 0)}
    others = sorted(f"{p} on {backend}" for p, backend in ran if p in prims and backend != "TRITON")
    assert not others, f"{name} under {mode}: pinned primitives ran elsewhere: {others}"
    assert any(backend == "TRITON" for _, backend in ran), f"{name} under {mode}: no TRITON kernel ran"
