"""The TRITON gemm's compiled kernels on the GPU against float64 math (``@pytest.mark.gpu``; see
``gpu_support`` for how to run).

Both kernel paths: the pointer kernel (odd sizes: rows not 16-byte aligned) and the TMA kernel
(aligned sizes, sm90+), every layout (trans_a, trans_b, trans_c) and accumulate-into-``out``, fp32 /
fp16 / bf16, outputs allocated from NaN-poisoned memory. Gate: ``turbo_core.testing`` tolerance of
the dtype (fp32: 1e-4, which the fp32 kernels' 3xTF32 products hold and one TF32 pass would not).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from gpu_support import COMPILED, DEV, poison_free_memory

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.testing import assert_close_to_reference

pytestmark = [pytest.mark.gpu, COMPILED]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Every layout, trans_c and accumulate combination on one odd shape (pointer kernel) and one aligned
# shape (TMA kernel); the Linear layout (NT) on a single row, odd and model-sized problems.
FULL = [(37, 29, 45), (520, 264, 1032)]
COMBOS = list(itertools.product([False, True], repeat=4))  # trans_a, trans_b, trans_c, accumulate
NT_ONLY = [(1, 17, 33), (513, 257, 1031), (1024, 2048, 512), (8, 4096, 4096)]
CASES = [(s, c) for s in FULL for c in COMBOS] + [(s, (False, True, False, False)) for s in NT_ONLY]


def _id(case):
    (m, n, k), (ta, tb, tc, acc) = case
    return f"{m}x{n}x{k}-{'T' if ta else 'N'}{'T' if tb else 'N'}{'-tc' if tc else ''}{'-acc' if acc else ''}"


@pytest.fixture(scope="module")
def launch():
    from turbo_triton.gemm import launch

    return launch


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_against_float64(launch, case, dtype):
    (m, n, k), (ta, tb, tc, acc) = case
    g = torch.Generator(device=DEV).manual_seed(m + n + k)
    a = torch.randn(*((k, m) if ta else (m, k)), device=DEV, generator=g).to(dtype)
    b = torch.randn(*((n, k) if tb else (k, n)), device=DEV, generator=g).to(dtype)
    want = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
    want = want.t() if tc else want
    out = None
    if acc:
        out = torch.randn(want.shape, device=DEV, generator=g).to(dtype)
        want = want + out.double()
    args = GemmArgs(a, b, trans_a=ta, trans_b=tb, trans_c=tc, out=out)
    assert launch.can_handle(args) is None
    poison_free_memory()
    c = launch.gemm(args)
    assert c.dtype == dtype and c.shape == want.shape
    if acc:
        assert c is out
    assert_close_to_reference(c, want, what=f"{launch.kernel_path(args)} kernel")


def test_both_kernel_paths_are_taken(launch):
    """The grid above reaches the TMA kernel where the GPU has one (sm90+), and the pointer kernel."""
    from turbo_triton import _runtime

    odd = GemmArgs(torch.empty(37, 45, device=DEV), torch.empty(29, 45, device=DEV), trans_b=True)
    aligned = GemmArgs(torch.empty(520, 1032, device=DEV), torch.empty(264, 1032, device=DEV), trans_b=True)
    assert launch.kernel_path(odd) == "pointer"
    arch, _ = _runtime.device_facts(aligned.a)
    assert launch.kernel_path(aligned) == ("tma" if _runtime.tma_arch(arch) else "pointer")
