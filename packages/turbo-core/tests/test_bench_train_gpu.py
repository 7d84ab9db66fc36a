"""``turbo bench train`` on the GPU (``gpu`` marker; skipped, with the reason, where torch sees no
GPU), with every installed backend as ``turbo bench train`` runs it: each provider on the quick
models (inductor compiles the tiny Llama), and the four real-width models at 512 tokens, so that a
provider that cannot run on the GPU (a kernel that declines a shape, a compile error) shows up in
minutes rather than in the long recording run. Rows: status ok (torchao's: ok, or skipped where it
is not installed), peak memory measured, the loss after the loss run beside plain PyTorch's.

Band: 3e-2 of plain PyTorch's loss, the per-step band of ``test_demo_parity``'s GPU tests (turbo's
kernels round differently from cuBLAS and SDPA: flash attention rounds P to bf16; E4M3 operands for
the FP8 recipes), over the few steps of the loss run here.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import math
import os

import pytest
import torch

from turbo_core.bench.suites import train
from turbo_core.bench.train_models import MODELS, QUICK_MODELS
from turbo_core.dispatch.manager import GlobalBackendManager
from turbo_core.plugins import host as plugin_host
from turbo_core.plugins.hookspecs import ENTRY_POINT_GROUP

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

# The user's turbo settings, read at import, before the conftest's per-test isolation clears them.
_USER_SETTINGS = {k: v for k, v in os.environ.items() if k.startswith(("TURBO_", "PRIMUS_TURBO_"))}
LOSS_BAND = 3e-2
TOKENS = 512


@contextlib.contextmanager
def _every_backend():
    """Every installed backend and the user's TURBO_* settings, as ``turbo bench`` sees them (the
    conftest limits each core test to turbo-core's own entry points)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plugin_host, "_entry_points", lambda: list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)))
        for name, value in _USER_SETTINGS.items():
            mp.setenv(name, value)
        plugin_host.reset_host()
        GlobalBackendManager.reset()
        try:
            yield
        finally:
            plugin_host.reset_host()
            GlobalBackendManager.reset()


def _check(rows: list[dict]) -> None:
    have_torchao = importlib.util.find_spec("torchao") is not None
    for r in rows:
        if r["provider"].startswith("torchao:") and not have_torchao:
            assert r["status"].startswith("skipped: torchao is not importable"), r
            continue
        assert r["status"] == "ok", r
        assert isinstance(r["peak_bytes"], int) and r["peak_bytes"] > 0, r
        assert math.isfinite(r["loss"]) and r["median_ms"] > 0, r
        assert abs(r["loss_diff"]) <= LOSS_BAND * r["torch_loss"], r


@pytest.mark.parametrize("name", list(QUICK_MODELS))
def test_every_provider_on_the_quick_models(name):
    compiled = name == "llama3.1-8b"  # inductor once; the other models' compiled rows wait for the suite
    providers = [p for p in train.PROVIDERS if compiled or not p.endswith("compile")]
    with _every_backend():
        rows = train.run(quick=True, tokens=None, models=[name], providers=providers, include_reference=False,
                         warmup=1, iters=2, device="cuda")
    assert [r["provider"] for r in rows] == providers
    _check(rows)


@pytest.mark.parametrize("name", list(MODELS))
def test_real_widths_at_512_tokens(name):
    providers = ["torch", "turbo:bf16", "turbo:fp8-rowwise"]
    with _every_backend():
        rows = train.run(quick=False, tokens=TOKENS, models=[name], providers=providers, include_reference=False,
                         warmup=1, iters=2, device="cuda")
    assert [(r["provider"], r["tokens"]) for r in rows] == [(p, TOKENS) for p in providers]
    _check(rows)
    # weights, gradients and two AdamW states in bf16: 8 bytes a parameter at least
    assert all(r["peak_bytes"] >= 8 * r["params"] for r in rows)
