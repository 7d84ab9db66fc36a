"""``TurboCrossEntropyLoss`` against TorchTitan's own ``CrossEntropyLoss``: the same loss (summed,
divided by the global valid-token count, ignored labels left out) and the same logits' gradient, built
through TorchTitan's config as a trainer builds it."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TURBO_TORCHTITAN_TESTS") == "1":
    import torchtitan  # noqa: F401  (nox -s integrations-torchtitan: missing is an error, not a skip)
else:
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (nox -s integrations-torchtitan runs this)")

from torchtitan.components.loss import IGNORE_INDEX, CrossEntropyLoss  # noqa: E402

from turbo_core.dispatch import stats  # noqa: E402
from turbo_core.integrations.torchtitan_loss import TurboCrossEntropyLoss  # noqa: E402


@pytest.mark.parametrize("valid", [None, 11])
def test_matches_torchtitans_loss_and_gradient(valid):
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(2, 6, 37, generator=gen)
    labels = torch.randint(0, 37, (2, 6), generator=gen)
    labels[0, 1] = labels[1, 4] = IGNORE_INDEX
    tokens = torch.tensor(valid) if valid is not None else None
    ours, theirs = TurboCrossEntropyLoss.Config().build(), CrossEntropyLoss.Config().build()
    assert type(ours) is TurboCrossEntropyLoss
    x1, x2 = pred.clone().requires_grad_(True), pred.clone().requires_grad_(True)
    before = sum(n for (prim, _, _), n in stats().items() if prim == "cross_entropy_fwd")
    got, metrics = ours(x1, labels, tokens)
    want, _ = theirs(x2, labels, tokens)
    assert sum(n for (prim, _, _), n in stats().items() if prim == "cross_entropy_fwd") == before + 1
    assert metrics == {} and got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    got.backward()
    want.backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-7)


def test_bf16_logits_are_not_cast():
    gen = torch.Generator().manual_seed(1)
    pred = torch.randn(1, 5, 19, generator=gen).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 19, (1, 5), generator=gen)
    got, _ = TurboCrossEntropyLoss.Config().build()(pred, labels)
    want = torch.nn.functional.cross_entropy(pred.detach().double().flatten(0, 1), labels.flatten(0, 1),
                                             reduction="sum")
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    got.backward()
    assert pred.grad.dtype == torch.bfloat16
