"""The TRITON cross-entropy kernels directly (CPU interpreter): one chunk and several (the row walked in
128-wide chunks over vocabularies of 300 and 1000, a ragged last chunk), ignored rows holding NaN,
label smoothing, fp32/bf16/fp16, against float64 math and against the TORCH reference; the rows a
host cannot check (an out-of-range target), masked classes (a whole chunk of ``-Inf`` before the
first finite logit), a loss that is a small difference of large logits, and what the capability
check declines."""

import pytest
import torch
import torch.nn.functional as F

from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.reference import loss as ref
from turbo_triton.loss.launch import RowConfig, can_handle, cross_entropy_bwd, cross_entropy_fwd, pick

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
CHUNKED = RowConfig(block_v=128, num_warps=4)
CONFIGS = {"heuristic": None, "chunked": CHUNKED}


def _inputs(rows, classes, dtype, *, ignored=0.3, ignore_index=-100, seed=0, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, classes, generator=gen) * scale).to(dtype)
    t = torch.randint(0, classes, (rows,), generator=gen)
    skip = torch.rand(rows, generator=gen) < ignored
    t[skip] = ignore_index
    skip |= t == ignore_index
    x[skip] = float("nan")  # ignored rows are never read
    return x, t, skip


def _float64(x, t, skip, eps, ignore_index=-100):
    """float64 ``(loss, lse)`` of F.cross_entropy and the gradient of ``sum(loss * dloss)``, zeros on
    ignored rows; ``dloss`` of order V (dlogits of order 1)."""
    x64 = torch.where(skip.unsqueeze(1), 0.0, x.double()).requires_grad_()
    loss = F.cross_entropy(x64, t, ignore_index=ignore_index, reduction="none", label_smoothing=eps)
    dloss = torch.randn(len(t), generator=torch.Generator().manual_seed(1), dtype=torch.float64) * x.shape[1]
    (loss * dloss).sum().backward()
    lse = torch.where(skip, 0.0, torch.logsumexp(x64.detach(), 1))
    return loss.detach(), lse, dloss, torch.where(skip.unsqueeze(1), 0.0, x64.grad)


def _close(got, want, tol, what):
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path,rows,classes", [("heuristic", 5, 1), ("heuristic", 9, 37), ("heuristic", 6, 1000),
                                               ("chunked", 9, 300), ("chunked", 4, 1000)])
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0])
def test_forward_and_backward_against_float64(path, rows, classes, dtype, eps):
    cfg = CONFIGS[path]
    x, t, skip = _inputs(rows, classes, dtype, seed=rows * 1000 + classes)
    loss64, lse64, dloss, grad64 = _float64(x, t, skip, eps)
    fwd = CrossEntropyFwdArgs(x, t, -100, eps)
    loss, lse = cross_entropy_fwd(fwd, cfg)
    assert loss.dtype == lse.dtype == torch.float32 and loss.shape == lse.shape == (rows,)
    _close(loss, loss64, 1e-5, "loss")
    _close(lse, lse64, 1e-5, "lse")
    assert torch.equal(loss[skip], torch.zeros(int(skip.sum())))

    bwd = CrossEntropyBwdArgs(dloss.float(), x, t, lse, -100, eps)
    grad = cross_entropy_bwd(bwd, cfg)
    assert grad.dtype == dtype and grad.shape == x.shape
    _close(grad, grad64, TOL[dtype], "dlogits")
    # the reference from the same lse: the same math rounded once to the same dtype
    _close(grad, ref.cross_entropy_bwd(bwd).double(), TOL[dtype] / 10 if dtype != torch.float32 else 1e-5,
           "dlogits vs TORCH")
    assert torch.equal(grad[skip], torch.zeros_like(grad[skip]))


def test_ignore_index_may_be_a_class():
    x, t, skip = _inputs(12, 300, torch.bfloat16, ignored=0.0, ignore_index=0, seed=3)
    t[:4] = 0
    skip = t == 0
    loss64, lse64, dloss, grad64 = _float64(x, t, skip, 0.2, ignore_index=0)
    loss, lse = cross_entropy_fwd(CrossEntropyFwdArgs(x, t, 0, 0.2), CHUNKED)
    _close(loss, loss64, 1e-5, "loss")
    grad = cross_entropy_bwd(CrossEntropyBwdArgs(dloss.float(), x, t, lse, 0, 0.2), CHUNKED)
    _close(grad, grad64, 1e-2, "dlogits")
    assert torch.equal(grad[:4], torch.zeros(4, 300, dtype=torch.bfloat16))


def test_an_out_of_range_target_gives_a_nan_row_and_reads_nothing_outside_the_row():
    """What a GPU call gets where the host cannot check the targets: the row's loss and gradients NaN,
    its lse the row's, every other row exact. The logits sit inside a NaN-filled buffer, so a read
    past the row (the target as an offset) would show as NaN elsewhere too."""
    buf = torch.full((6 * 50 + 100,), float("nan"))
    x = buf[50:350].view(6, 50)
    x.copy_(torch.randn(6, 50))
    t = torch.tensor([3, 50, -7, 10**6, 0, 49])
    loss, lse = cross_entropy_fwd(CrossEntropyFwdArgs(x, t))
    assert loss.isnan().tolist() == [False, True, True, True, False, False]
    torch.testing.assert_close(lse, torch.logsumexp(x, 1))
    grad = cross_entropy_bwd(CrossEntropyBwdArgs(torch.ones(6), x, t, lse))
    assert grad[1:4].isnan().all() and grad[[0, 4, 5]].isfinite().all()
    ok = [0, 4, 5]
    torch.testing.assert_close(loss[ok], F.cross_entropy(x[ok], t[ok], reduction="none"))


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_a_chunk_of_masked_classes_before_the_first_finite_logit():
    """The running max stays -Inf over the first chunks: the shift is 0 there, never -Inf - -Inf."""
    x = torch.randn(3, 300)
    x[:, :260] = float("-inf")  # chunks 0 and 1 of 128: only -Inf; the target is finite
    x[2] = float("-inf")  # only -Inf: lse -Inf, loss NaN (as -Inf - -Inf)
    t = torch.tensor([270, 299, 5])
    loss, lse = cross_entropy_fwd(CrossEntropyFwdArgs(x, t), CHUNKED)
    want = F.cross_entropy(x[:2].double(), t[:2], reduction="none")
    torch.testing.assert_close(loss[:2].double(), want, rtol=1e-5, atol=1e-5)
    assert lse[2] == float("-inf") and loss[2].isnan()
    smooth, _ = cross_entropy_fwd(CrossEntropyFwdArgs(x, t, -100, 0.1), CHUNKED)
    assert smooth[:2].isposinf().all()  # a class of probability 0 under smoothing: infinite loss
    grad = cross_entropy_bwd(CrossEntropyBwdArgs(torch.ones(3), x, t, lse), CHUNKED)
    assert torch.equal(grad[:2, :260], torch.zeros(2, 260)) and grad[2].isnan().all()


def test_a_small_loss_from_large_logits_keeps_its_accuracy():
    """Logits near 2**20 with the target the largest by 12: the loss (about 5e-5) is a small difference
    of numbers of order 1e6. ``lse - x[t]`` in fp32 would be off by up to the spacing there (0.125);
    ``(m - x[t]) + log(s)`` is off by about fp32's epsilon (the rounding of ``s`` near 1)."""
    x = 2.0**20 - torch.arange(300.0).repeat(2, 1) * 0.125  # exactly representable in fp32
    x[:, 7] = 2.0**20 + 12.0
    t = torch.tensor([7, 7])
    loss, _ = cross_entropy_fwd(CrossEntropyFwdArgs(x, t), CHUNKED)
    want = F.cross_entropy(x.double(), t, reduction="none")
    assert 1e-5 < want.max() < 1e-4
    torch.testing.assert_close(loss.double(), want, rtol=0, atol=2e-7)


def test_zero_rows():
    x, t = torch.empty(0, 300, dtype=torch.bfloat16), torch.empty(0, dtype=torch.int64)
    loss, lse = cross_entropy_fwd(CrossEntropyFwdArgs(x, t))
    assert loss.shape == lse.shape == (0,)
    assert cross_entropy_bwd(CrossEntropyBwdArgs(loss, x, t, lse)).shape == (0, 300)


def test_capability_check_and_heuristic():
    x, t = torch.randn(4, 10), torch.tensor([0, 1, 2, 3])
    assert can_handle(CrossEntropyFwdArgs(x, t)) is None
    assert "contiguous logits" in can_handle(CrossEntropyFwdArgs(torch.randn(10, 4).t(), t))
    assert "contiguous lse" in can_handle(CrossEntropyBwdArgs(torch.ones(4), x, t, torch.ones(8)[::2]))
    assert "CPU tensors only" in can_handle(CrossEntropyFwdArgs(x.to("meta"), t.to("meta")))
    assert pick(1, True) == RowConfig(1, 4) and pick(1000, True).block_v == 256
    assert pick(128256, False) == RowConfig(4096, 8) and pick(300, False) == RowConfig(512, 1)
