"""The property tests (hypothesis, every primitive against float64 math) against the reference
backend TORCH, exactly as a backend package runs them against itself; and the kit's own checks: the
profiles, the per-backend budgets, and that the properties catch a backend's mistakes and print a
reproducible example."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis.errors import FailedHealthCheck, Unsatisfiable

from turbo_core.dispatch.catalog import primitive_names
from turbo_core.testing.properties import all_properties, property_tests
from turbo_core.testing.properties.profiles import PROFILE_ENV, PROFILES, active_profile, pick

TestPropertiesTorch = property_tests("TORCH")


def test_every_primitive_has_a_property():
    assert sorted(p.primitive for p in all_properties()) == sorted(primitive_names())


def test_the_ci_profile_runs_at_least_200_examples_per_primitive_with_a_fixed_seed():
    assert TestPropertiesTorch.profile == "ci" and TestPropertiesTorch.max_examples >= 200
    assert PROFILES["ci"].derandomize and PROFILES["gpu"].derandomize and PROFILES["gpu"].max_examples >= 2000


def test_profile_selection(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    assert active_profile().name == "ci"
    assert active_profile(device="cpu").name == "ci"
    if not torch.cuda.is_available():
        assert active_profile(device="cuda").name == "ci"  # no GPU here: a GPU class skips anyway
    monkeypatch.setenv(PROFILE_ENV, "dev")
    assert active_profile(device="cpu").name == "dev"
    assert active_profile("gpu").name == "gpu"  # the argument wins
    assert property_tests("TORCH", primitives=["gemm"]).profile == "dev"
    monkeypatch.setenv(PROFILE_ENV, "nightly")
    with pytest.raises(ValueError, match=rf"^profile \(\${PROFILE_ENV}\): unknown hypothesis profile 'nightly'"):
        active_profile()


def test_budgets_per_backend():
    ci, gpu = PROFILES["ci"], PROFILES["gpu"]
    assert pick(None, ci, 200, "max_examples") == 200
    assert pick(40, gpu, 2000, "max_examples") == 40
    assert pick({"ci": 40}, ci, 200, "max_examples") == 40
    assert pick({"ci": 40}, gpu, 2000, "max_examples") == 2000
    cls = property_tests("TORCH", max_examples={"ci": 7}, max_dim=5, primitives=["gemm", "rmsnorm_fwd"], profile="ci")
    assert (cls.max_examples, cls.max_dim) == (7, 5)
    assert sorted(n for n in dir(cls) if n.startswith("test_")) == ["test_gemm", "test_rmsnorm_fwd"]
    with pytest.raises(ValueError, match="^max_examples: unknown profile"):
        property_tests("TORCH", max_examples={"nightly": 3})
    with pytest.raises(ValueError, match="^max_dim: expected a positive int"):
        property_tests("TORCH", max_dim=0)
    with pytest.raises(ValueError, match="^primitives: no property for gemm_fp16"):
        property_tests("TORCH", primitives=["gemm_fp16"])


# -- the properties catch mistakes -----------------------------------------------------------------

@pytest.mark.parametrize("primitive, caught", [
    ("gemm", "gemm on WRONG (cpu): gemm"),
    ("quantize_fp8", "scale_inv values"),
    ("rmsnorm_fwd", "rmsnorm_fwd: "),
    ("moe_permute_preprocess", "tokens_per_expert"),
    ("swiglu_fwd", "wrote its input 'x'"),
    ("attention_fwd", "attention_fwd: "),
])
def test_a_wrong_backend_fails_with_a_reproducible_example(use_plugins, primitive, caught):
    use_plugins("fake_wrong")
    suite = property_tests("WRONG", primitives=[primitive], max_examples=60, profile="ci")
    with pytest.raises(AssertionError, match=re.escape(caught)) as info:
        getattr(suite(), f"test_{primitive}")()
    report = "\n".join([str(info.value), *getattr(info.value, "__notes__", [])])
    assert "@reproduce_failure(" in report, report  # the blob that replays the failing example
    assert "case=" in report, report  # the falsifying case: shapes, flags and the seed of its tensors


def test_a_backend_that_declines_every_example_fails(use_plugins):
    use_plugins("fake_wrong")
    suite = property_tests("WRONG", primitives=["dequantize_fp8"], max_examples=10, profile="ci")
    with pytest.raises((FailedHealthCheck, Unsatisfiable)):  # never a pass
        suite().test_dequantize_fp8()


def test_a_primitive_the_backend_lacks_is_skipped_with_the_reason(use_plugins):
    use_plugins("fake_wrong")
    from _pytest.outcomes import Skipped

    with pytest.raises(Skipped, match="WRONG has no kernel for gemm_fp4"):
        property_tests("WRONG", primitives=["gemm_fp4"])().test_gemm_fp4()
