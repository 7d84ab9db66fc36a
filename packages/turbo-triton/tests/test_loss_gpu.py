"""The TRITON cross-entropy kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``), at real
vocabularies against float64 math on the GPU (row slices of at most 2**26 elements).

Shapes: 8192 x 32000 (Mixtral's vocabulary), 2048 x 128256 (Llama-3.1's), 1024 x 151936 (Qwen3's), bf16,
a tenth of the rows ignored (holding NaN: never read), label smoothing 0 and 0.1; fp32 and fp16 on one
shape; a small odd vocabulary; every output element written (outputs allocated poisoned). Gates: ``loss`` and ``lse`` per element within ``2e-6 (1 + |ref|)`` (fp32
math over the whole row); ``dlogits`` per element within ``2**-8 |ref| + 1e-6 max|ref|`` (one bf16
rounding of the fp32 value, whose own error is that of ``exp`` and of the fp32 ``lse``), with ``dloss``
of order V so that ``dlogits`` is of order 1 off the target (fp16: at most 4096, so that the target's
``-dloss`` stays within fp16's range). An out-of-range target: a NaN row. Then the op:
``turbo_core.ops.cross_entropy`` pinned to TRITON runs forward and backward with no host sync (``mean``
counted on the device), and selection picks TRITON by default on this GPU.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, assert_within, no_host_sync, poisoned_empty, row_slices

from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs

pytestmark = [pytest.mark.gpu, COMPILED]

BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def ce():
    from turbo_triton.loss import launch

    return launch


def _inputs(rows, classes, dtype, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x = (torch.randn(rows, classes, device=DEV, generator=gen) * 2).to(dtype)
    t = torch.randint(0, classes, (rows,), device=DEV, generator=gen)
    skip = torch.rand(rows, device=DEV, generator=gen) < 0.1
    t[skip] = -100
    x[skip] = float("nan")
    # dlogits = dloss (softmax - onehot): order 1 off the target and order |dloss| on it. fp16 holds
    # magnitudes up to 65504, so its dloss stays below that (a larger one overflows to inf, as the math
    # in fp16 says).
    dloss = torch.randn(rows, device=DEV, generator=gen) * (min(classes, 4096) if dtype == torch.float16 else classes)
    return x, t, skip, dloss


def _float64(x, t, skip, lse32, dloss, eps, sl):
    """float64 ``(loss, lse, dlogits)`` of the rows ``sl``; dlogits from the kernel's fp32 ``lse`` (the
    spec's backward reads the given lse)."""
    classes = x.shape[1]
    x64 = torch.where(skip[sl, None], 0.0, x[sl].double())
    tt = t[sl].clamp(min=0)
    lse = torch.logsumexp(x64, 1)
    loss = (1 - eps) * (lse - x64.gather(1, tt[:, None])[:, 0]) + (eps * (lse - x64.mean(1)) if eps else 0.0)
    loss = torch.where(skip[sl], 0.0, loss)
    lse = torch.where(skip[sl], 0.0, lse)
    grad = torch.exp(x64 - lse32[sl].double()[:, None]) - eps / classes
    grad[torch.arange(grad.shape[0], device=DEV), tt] -= 1 - eps
    grad = torch.where(skip[sl, None], 0.0, grad * dloss[sl].double()[:, None])
    return loss, lse, grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("rows,classes,dtype", [(8192, 32000, BF16), (2048, 128256, BF16), (1024, 151936, BF16),
                                                (2048, 32000, torch.float32), (2048, 32000, torch.float16),
                                                (37, 1001, BF16)])
def test_kernels_against_float64(ce, rows, classes, dtype, eps):
    x, t, skip, dloss = _inputs(rows, classes, dtype, rows + classes)
    with poisoned_empty():  # every output element must be written
        loss, lse = ce.cross_entropy_fwd(CrossEntropyFwdArgs(x, t, -100, eps))
        grad = ce.cross_entropy_bwd(CrossEntropyBwdArgs(dloss, x, t, lse, -100, eps))
    assert grad.dtype == dtype
    for sl in row_slices(rows, classes):
        loss64, lse64, grad64 = _float64(x, t, skip, lse, dloss, eps, sl)
        assert_within("loss", loss[sl], loss64, 2e-6, 2e-6)
        assert_within("lse", lse[sl], lse64, 2e-6, 2e-6)
        assert_within("dlogits", grad[sl], grad64, 1e-6 * grad64.abs().max().item(), 2**-8)
    del grad


def test_an_out_of_range_target_is_a_nan_row_on_the_gpu(ce):
    """The GPU rule (the host does not read the targets): NaN loss and gradients for the row, others exact."""
    x, t, _, _ = _inputs(4, 32000, BF16, 1)
    t = torch.tensor([5, 32000, -3, 31999], device=DEV)
    loss, lse = ce.cross_entropy_fwd(CrossEntropyFwdArgs(x, t))
    assert loss.isnan().tolist() == [False, True, True, False] and lse.isfinite().all()
    grad = ce.cross_entropy_bwd(CrossEntropyBwdArgs(torch.ones(4, device=DEV), x, t, lse))
    assert grad[1:3].isnan().all() and grad[[0, 3]].isfinite().all()


def test_the_op_has_no_host_sync():
    """Forward and backward of ``mean`` (its count on the device), pinned to TRITON, inside
    ``no_host_sync``; the result equals the kernels' own per-row losses averaged on the host. (CUDA
    graphs and torch.compile of the op: the graph cases ``cross_entropy`` and ``CrossEntropyLoss`` of
    ``test_compile_modes_gpu.py`` / ``test_memory_gpu.py`` here and turbo-core's ``test_cuda_graphs.py``.)"""
    from turbo_core import use_backend
    from turbo_core.dispatch import dispatcher
    from turbo_core.ops import cross_entropy

    x, t, skip, _ = _inputs(4096, 128256, BF16, 2)
    leaf = x.detach().clone().requires_grad_()
    with use_backend("TRITON", primitives=("cross_entropy_fwd", "cross_entropy_bwd")):
        cross_entropy(leaf, t, label_smoothing=0.1).backward()  # compile the kernels
        leaf.grad = None
        with no_host_sync():
            loss = cross_entropy(leaf, t, label_smoothing=0.1)
            loss.backward()
        rows = cross_entropy(x, t, label_smoothing=0.1, reduction="none")
    torch.testing.assert_close(loss, rows.sum() / (~skip).sum(), rtol=1e-6, atol=0)
    assert leaf.grad[skip].eq(0).all() and leaf.grad[~skip].isfinite().all()
    hows = {(prim, backend) for (prim, backend, _how) in dispatcher.stats()}
    assert {("cross_entropy_fwd", "TRITON"), ("cross_entropy_bwd", "TRITON")} <= hows


def test_triton_is_the_default_on_this_gpu():
    from turbo_core.dispatch import dispatcher
    from turbo_core.ops import cross_entropy

    x = torch.randn(8, 1000, device=DEV, dtype=BF16, requires_grad=True)
    cross_entropy(x, torch.randint(0, 1000, (8,), device=DEV)).backward()
    used = {(prim, backend, how) for (prim, backend, how) in dispatcher.stats()}
    assert ("cross_entropy_fwd", "TRITON", "default") in used and ("cross_entropy_bwd", "TRITON", "default") in used
