"""``GlobalBackendManager.clear_env_cache`` (Primus-Turbo's ``_clear_env_cache``): the parsed
environment variables and the selections cached from them are dropped; code settings stay."""

from __future__ import annotations

import torch

from turbo_core import BackendChoice, GlobalBackendManager, PrecisionType
from turbo_core.dispatch import env as _env
from turbo_core.dispatch import select
from turbo_core.dispatch.specs.gemm import GemmArgs


def test_clear_env_cache_drops_parses_bumps_the_generation_and_keeps_code_settings(monkeypatch):
    assert GlobalBackendManager._clear_env_cache == GlobalBackendManager.clear_env_cache
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fp8:TORCH")
    assert GlobalBackendManager.get_gemm_backend(PrecisionType.FP8) == BackendChoice("TORCH")
    assert _env._cache  # the value was parsed and memoized
    GlobalBackendManager.set_grouped_gemm_backend("TORCH")
    before = GlobalBackendManager.generation
    GlobalBackendManager._clear_env_cache()
    assert not _env._cache
    assert GlobalBackendManager.generation == before + 1
    assert GlobalBackendManager.get_grouped_gemm_backend() == BackendChoice("TORCH")  # code setting kept
    assert GlobalBackendManager.get_gemm_backend(PrecisionType.FP8) == BackendChoice("TORCH")  # re-read
    GlobalBackendManager.clear_env_cache()
    assert not _env._cache


def test_a_changed_variable_is_seen_with_and_without_clearing(monkeypatch):
    args = GemmArgs(torch.ones(2, 3), torch.ones(3, 4))
    assert select("gemm", args).how == "default"
    monkeypatch.setenv("PRIMUS_TURBO_GEMM_BACKEND", "TORCH")
    assert (select("gemm", args).backend, select("gemm", args).how) == ("TORCH", "env")
    monkeypatch.delenv("PRIMUS_TURBO_GEMM_BACKEND")
    GlobalBackendManager.clear_env_cache()
    assert select("gemm", args).how == "default"
