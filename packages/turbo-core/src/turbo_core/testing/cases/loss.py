"""Conformance cases for ``cross_entropy`` (forward and backward).

Vocabularies V = 1, 300 and 1000 (one class; not powers of two, several chunks of a row-walking
kernel) times 1, 5 and 33 rows in fp32/fp16/bf16, reduction ``mean``. Then ``sum`` and ``none``,
label smoothing 0.1 and 1, ignored rows (``ignore_index`` -100, and 0: a class, whose rows are then
ignored) holding NaN logits (never read), every row ignored (``mean`` is NaN, the gradient zero),
classes masked with ``-Inf``, leading dims, and zero rows. The expected values are float64 autograd
of ``torch.nn.functional.cross_entropy`` on the same (rounded) logits, never a backend's output. The
backward is driven with a gradient of order V per row, so that ``dlogits`` is of order 1 and the
dtype's tolerance means something.
"""

from __future__ import annotations

import functools
import itertools

import torch
import torch.nn.functional as F

from turbo_core.ops import cross_entropy
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

CLASSES = [1, 300, 1000]
ROWS = [1, 5, 33]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Within the tolerance of ``dtype``; NaN exactly where the float64 value is NaN."""
    got = got.detach().cpu()
    if not torch.equal(got.isnan(), want.isnan()):
        raise AssertionError(f"{what}: NaN at the wrong places: got {got.tolist()}, expected {want.tolist()}")
    keep = ~want.isnan()
    assert_close_to_reference(got[keep], want[keep], dtype=dtype, what=what)


def _run(shape, dtype, *, reduction="mean", eps=0.0, ignore_index=-100, ignored=0.0, masked=False, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    classes = shape[-1]
    gen = torch.Generator().manual_seed(sum(shape) * 13 + classes + int(eps * 10) + len(shape))
    x = (2.0 * torch.randn(shape, generator=gen)).to(dtype)
    target = torch.randint(0, classes, shape[:-1], generator=gen)
    if masked:  # classes of probability 0, never the target
        hide = torch.rand(shape, generator=gen) < 0.3
        hide.scatter_(-1, target.unsqueeze(-1), False)
        x = x.masked_fill(hide, float("-inf"))
    drop = torch.rand(shape[:-1], generator=gen) < ignored
    target = torch.where(drop, ignore_index, target)
    skipped = target == ignore_index
    x[skipped] = float("nan")  # ignored rows are never read

    x64 = torch.where(skipped.unsqueeze(-1), 0.0, x.double()).requires_grad_()
    want = F.cross_entropy(x64.reshape(-1, classes), target.reshape(-1), ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=eps)
    counted = int((~skipped).sum())
    if reduction == "none":
        want = want.reshape(target.shape)
        weight = torch.randn(target.shape, generator=gen, dtype=torch.float64) * classes
    else:
        weight = torch.tensor(float(classes * (max(counted, 1) if reduction == "mean" else 1)), dtype=torch.float64)
    (want * weight).sum().backward()
    want_grad = torch.where(skipped.unsqueeze(-1), 0.0, x64.grad)

    xt = x.to(device).requires_grad_()
    got = cross_entropy(xt, target.to(device), ignore_index=ignore_index, reduction=reduction, label_smoothing=eps)
    assert got.dtype == torch.float32 and got.shape == want.shape, f"loss: {got.dtype} {tuple(got.shape)}"
    _close(got, want.detach(), torch.float32, "loss")
    (got * weight.to(device, torch.float32)).sum().backward()
    assert xt.grad.dtype == dtype and xt.grad.shape == x.shape, f"grad: {xt.grad.dtype} {tuple(xt.grad.shape)}"
    _close(xt.grad, want_grad, dtype, "grad_logits")


_PRIMS = ("cross_entropy_fwd", "cross_entropy_bwd")


def _case(label, shape, dtype, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"cross_entropy-{label}-{dims}-{_name(dtype)}", _PRIMS, functools.partial(_run, shape, dtype, **kw))


CASES = (
    [_case("mean", (n, v), dt) for v, n, dt in itertools.product(CLASSES, ROWS, DTYPES)]
    + [_case(red, (33, 300), dt, reduction=red) for red, dt in itertools.product(("sum", "none"), DTYPES)]
    + [_case(f"label_smoothing{eps}", (5, 1000), dt, eps=eps) for eps, dt in itertools.product((0.1, 1.0), DTYPES)]
    + [_case("ignore_index", (33, 300), dt, ignored=0.3) for dt in DTYPES]
    + [_case("ignore_index0-label_smoothing", (33, 7), torch.bfloat16, ignore_index=0, ignored=0.2, eps=0.2),
       _case("ignore_index-none", (33, 300), torch.float32, ignored=0.3, reduction="none"),
       _case("all_ignored", (5, 300), torch.bfloat16, ignored=1.0),
       _case("masked", (5, 300), torch.float32, masked=True),
       _case("masked-label_smoothing", (5, 300), torch.bfloat16, masked=True, eps=0.1, reduction="none"),
       _case("leading_dims", (2, 3, 300), torch.bfloat16, ignored=0.2),
       _case("zero_rows", (0, 300), torch.float32),
       _case("zero_rows-sum", (0, 300), torch.bfloat16, reduction="sum")]
)
