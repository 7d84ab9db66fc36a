"""turbo's pytest plugin (``turbo_core.testing.pytest_plugin``): marker selection, the automatic
skip of gpu tests, xdist GPU pinning, and ``deterministic_check``."""

from __future__ import annotations

import importlib.metadata
import math
import os
import struct

import pytest
import torch

from turbo_core.testing import deterministic_check
from turbo_core.testing import pytest_plugin as plugin

pytest_plugins = ["pytester"]

PLUGIN = "turbo_core.testing.pytest_plugin"

# One test per marker, one with two markers, one with none.
SUITE = """
import pytest

@pytest.mark.gpu
def test_gpu():
    pass

@pytest.mark.deterministic
def test_det():
    pass

@pytest.mark.distributed
def test_dist():
    pass

@pytest.mark.gpu
@pytest.mark.deterministic
def test_gpu_det():
    pass

def test_plain():
    pass
"""


def _run(pytester, *args):
    pytester.makepyfile(test_suite=SUITE)
    # -p: loads the plugin even where the entry point is not installed (a no-op where it is)
    return pytester.runpytest("-p", PLUGIN, "-rs", "--collect-only", "-q", *args)


def _collected(result) -> set[str]:
    return {line.split("::")[1] for line in result.outlines if "::" in line}


def test_entry_point_is_declared_under_the_module_name():
    eps = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.value == PLUGIN]
    assert [ep.name for ep in eps] == [PLUGIN]


@pytest.mark.parametrize(("args", "expected"), [
    ((), {"test_gpu", "test_det", "test_dist", "test_gpu_det", "test_plain"}),
    (("--turbo-only=gpu",), {"test_gpu", "test_gpu_det"}),
    (("--turbo-only=deterministic",), {"test_det", "test_gpu_det"}),
    (("--turbo-only=distributed",), {"test_dist"}),
    (("--turbo-only=distributed", "--turbo-only=deterministic"), {"test_dist", "test_det", "test_gpu_det"}),
    (("--turbo-skip=gpu",), {"test_det", "test_dist", "test_plain"}),
    (("--turbo-skip=gpu", "--turbo-skip=distributed"), {"test_det", "test_plain"}),
    (("--turbo-only=deterministic", "--turbo-skip=gpu"), {"test_det"}),
])
def test_only_and_skip_select_by_marker(pytester, args, expected):
    result = _run(pytester, *args)
    assert _collected(result) == expected
    if len(expected) < 5:
        result.stdout.fnmatch_lines([f"*{len(expected)}/5 tests collected ({5 - len(expected)} deselected)*"])


def test_unknown_marker_name_is_a_usage_error(pytester):
    result = _run(pytester, "--turbo-only=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--turbo-only*invalid choice*'cpu'*"])


def test_markers_are_registered_and_strict_markers_accepts_them(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", PLUGIN, "--strict-markers", "-q", "--turbo-skip=gpu")
    result.assert_outcomes(passed=3, deselected=2)
    markers = pytester.runpytest("-p", PLUGIN, "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.gpu:*", "@pytest.mark.deterministic:*bit-identical*",
                                  "@pytest.mark.distributed:*multi-process*"])


def test_loading_twice_through_conftest_is_harmless(pytester):
    pytester.makeconftest(f"pytest_plugins = [{PLUGIN!r}]")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", PLUGIN, "-q", "--turbo-only=distributed")
    result.assert_outcomes(passed=1, deselected=4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the no-GPU skip does not apply")
def test_gpu_tests_skip_with_the_reason_without_a_device(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", PLUGIN, "-rs")
    result.assert_outcomes(passed=3, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_suite.py:3: gpu test: no CUDA/ROCm device visible to torch*",
                                 "SKIPPED [[]1[]] test_suite.py:15: gpu test: no CUDA/ROCm device visible*"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the no-GPU skip does not apply")
def test_a_tests_own_skipif_keeps_its_reason(pytester):
    pytester.makepyfile(test_own="""
        import pytest, torch
        pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]
        def test_x():
            pass
    """)
    result = pytester.runpytest("-p", PLUGIN, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: no GPU here"])
    result.stdout.no_fnmatch_line("*no CUDA/ROCm device*")


# ---------------------------------------------------------------------------- xdist GPU pinning

@pytest.mark.parametrize(("worker", "count", "expected"), [
    ("gw0", 8, 0), ("gw7", 8, 7), ("gw9", 8, 1), ("gw5", 2, 1), ("gw12", 3, 0),
    ("gw3", 1, None), ("gw3", 0, None),              # one GPU or none: nothing to spread over
    (None, 8, None), ("master", 8, None), ("gwx", 8, None), ("", 8, None),
])
def test_worker_device(worker, count, expected):
    assert plugin.worker_device(worker, count) == expected


@pytest.mark.parametrize(("current", "worker", "count", "expected"), [
    (None, "gw5", 4, "1"),
    ("", "gw2", 4, "2"),
    ("4,5,6,7", "gw1", 4, "5"),        # the user's restriction is kept: entry 1 of the list
    ("GPU-aa, GPU-bb", "gw3", 2, "GPU-bb"),
    ("4,5", "gw1", 1, None),
    ("4,5", None, 2, None),
])
def test_pinned_visible_devices(current, worker, count, expected):
    assert plugin.pinned_visible_devices(current, worker, count) == expected


class _FakeConfig:
    def __init__(self, worker: str | None, no_pinning: bool = False):
        if worker is not None:
            self.workerinput = {"workerid": worker}
        self._no_pinning = no_pinning
        self.warnings: list[Warning] = []

    def getoption(self, name):
        assert name == "turbo_no_gpu_pinning"
        return self._no_pinning

    def issue_config_time_warning(self, warning, stacklevel):
        self.warnings.append(warning)


@pytest.fixture
def four_gpus(monkeypatch):
    """torch reporting 4 uninitialised CUDA GPUs; no *_VISIBLE_DEVICES and no xdist variable set."""
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.version, "hip", None)


def test_worker_is_pinned_in_configure(four_gpus):
    plugin._pin_xdist_worker(_FakeConfig("gw6"))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"


def test_worker_pinning_uses_hip_variable_on_rocm(four_gpus, monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2")
    plugin._pin_xdist_worker(_FakeConfig("gw1"))
    assert os.environ["HIP_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_worker_pinning_opt_out_and_controller(four_gpus):
    plugin._pin_xdist_worker(_FakeConfig("gw1", no_pinning=True))
    plugin._pin_xdist_worker(_FakeConfig(None))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_worker_pinning_reads_the_xdist_variable(four_gpus, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    plugin._pin_xdist_worker(_FakeConfig(None))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


def test_worker_not_pinned_once_cuda_is_initialised(four_gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    config = _FakeConfig("gw1")
    plugin._pin_xdist_worker(config)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert len(config.warnings) == 1 and "CUDA was initialised" in str(config.warnings[0])


# ------------------------------------------------------------------------- deterministic_check

def _nan(bits: int) -> torch.Tensor:
    return torch.tensor(struct.unpack("<f", struct.pack("<I", bits)), dtype=torch.float32)


def test_deterministic_fn_passes_and_returns_the_first_run():
    x = torch.randn(5, 7)
    out = deterministic_check(lambda t: (t * 2, {"s": t.sum()}, 3), x)
    torch.testing.assert_close(out[0].double(), x.double() * 2, rtol=0, atol=0)
    assert out[2] == 3


def test_tiny_random_noise_is_caught_with_the_output_index():
    x = torch.randn(4, 6)
    with pytest.raises(AssertionError) as err:
        deterministic_check(lambda t: (t.clone(), t + torch.randn_like(t) * 1e-7), x)
    msg = str(err.value)
    assert "output [1]" in msg and "run 0 and run 1" in msg
    assert "first differing element at index (" in msg and "of 24 elements differ" in msg


def test_first_differing_element_is_named():
    calls = []

    def fn(t):
        calls.append(1)
        out = t.clone()
        if len(calls) == 3:
            out[1, 2] = torch.nextafter(out[1, 2], torch.tensor(math.inf))  # one ulp up
        return out

    with pytest.raises(AssertionError, match=r"output 0 differs between run 0 and run 2 .*index \(1, 2\).*"
                                             r"1 of 12 elements differ"):
        deterministic_check(fn, torch.ones(3, 4), runs=3)


def test_inputs_are_fresh_clones_each_run():
    x = torch.zeros(3)
    deterministic_check(lambda t: t.add_(1), x, runs=4)  # in place: same result only on fresh inputs
    assert torch.equal(x, torch.zeros(3))


def test_nan_payloads_and_signed_zero_compare_by_bits():
    quiet, other = 0x7FC00000, 0x7FC00001
    deterministic_check(lambda: _nan(quiet))  # same NaN bits: identical
    seq = iter([_nan(quiet), _nan(other)])
    with pytest.raises(AssertionError, match="output 0"):
        deterministic_check(lambda: next(seq))
    zeros = iter([torch.tensor([0.0]), torch.tensor([-0.0])])
    with pytest.raises(AssertionError, match="index \\(0,\\)"):
        deterministic_check(lambda: next(zeros))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.bool,
                                   getattr(torch, "float8_e4m3fn", torch.float16)], ids=str)
def test_every_dtype_is_compared(dtype):
    seq = iter([torch.zeros(2, 3), torch.ones(2, 3)])
    with pytest.raises(AssertionError, match=str(dtype)):
        deterministic_check(lambda: next(seq).to(dtype))
    deterministic_check(lambda: torch.ones(2, 3).to(dtype))


def test_shape_and_plain_value_differences_are_caught():
    shapes = iter([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(AssertionError, match=r"\[2\] vs torch.float32 \[3\]"):
        deterministic_check(lambda: next(shapes))
    values = iter([1, 2])
    with pytest.raises(AssertionError, match="output 0 differs between run 0 and run 1: 1 vs 2"):
        deterministic_check(lambda: next(values))


def test_seed_reseeds_before_each_run_and_runs_is_checked():
    deterministic_check(lambda: torch.randn(4), seed=3)
    with pytest.raises(ValueError, match="runs must be an int >= 2"):
        deterministic_check(lambda: 0, runs=1)
