"""pytest plugin shared by turbo-core and every backend package: test selection and GPU pinning.

Registered through the ``pytest11`` entry point of turbo-core (entry-point name = this module's
name, so a conftest's ``pytest_plugins = ["turbo_core.testing.pytest_plugin"]`` on top of the entry
point is a no-op rather than a double registration); ``-p no:turbo_core.testing.pytest_plugin``
turns it off.

Markers (registered here, so each package's tests run standalone):

- ``gpu``: needs a CUDA/ROCm device. Skipped automatically, with the reason, where torch sees none.
- ``deterministic``: the run-to-run bit-exactness suite (see :func:`deterministic_check`).
- ``distributed``: spawns several processes (torch.distributed, gloo on the CPU).

The report header names the hypothesis profile of the property tests (``ci`` on the CPU, ``gpu`` on
a GPU, or ``$TURBO_HYPOTHESIS_PROFILE``).

Options:

- ``--turbo-only=gpu|deterministic|distributed`` (repeatable): keep only tests with one of these
  markers; the others are reported as deselected.
- ``--turbo-skip=gpu|deterministic|distributed`` (repeatable): deselect tests with these markers.
- ``--turbo-no-gpu-pinning``: see below.

GPU pinning under pytest-xdist: a worker ``gwN`` on a machine where torch sees ``count > 1`` GPUs
sets ``CUDA_VISIBLE_DEVICES`` (``HIP_VISIBLE_DEVICES`` on ROCm torch) to the ``N mod count``-th
visible GPU in its ``pytest_configure``, so ``pytest -n 8`` on an 8-GPU box runs one worker per
GPU and each worker's ``cuda:0`` is its own device. The variable is read once, when the CUDA/HIP
runtime initialises: pinning only works if nothing in the worker has created a CUDA context
before (conftest modules may import torch, but must not touch ``torch.cuda`` beyond
``is_available()``/``device_count()``, which use NVML/amdsmi and do not initialise CUDA). When
CUDA is already initialised the plugin warns and leaves the worker unpinned.
"""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
import torch

MARKERS = {
    "gpu": "needs a GPU; runs on the GPU machine, skipped elsewhere with the reason",
    "deterministic": "run-to-run determinism suite: each op runs twice, outputs must be bit-identical",
    "distributed": "multi-process torch.distributed test (several processes; gloo on the CPU)",
}
SELECTABLE = tuple(MARKERS)

_GPU_VISIBLE = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("turbo", "turbo test selection")
    group.addoption("--turbo-only", action="append", default=[], choices=SELECTABLE, metavar="MARKER",
                    help="run only tests marked MARKER (gpu, deterministic, distributed); repeatable")
    group.addoption("--turbo-skip", action="append", default=[], choices=SELECTABLE, metavar="MARKER",
                    help="deselect tests marked MARKER (gpu, deterministic, distributed); repeatable")
    group.addoption("--turbo-no-gpu-pinning", action="store_true", default=False,
                    help="under pytest-xdist, do not pin each worker to its own GPU")


def worker_index(worker_id: str | None) -> int | None:
    """``N`` of a pytest-xdist worker id ``"gwN"``; None for anything else (the controller, no xdist)."""
    m = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(m.group(1)) if m else None


def worker_device(worker_id: str | None, count: int) -> int | None:
    """Index (among the visible GPUs) that xdist worker ``worker_id`` is pinned to: ``N mod count``
    for ``"gwN"``; None when not an xdist worker or when fewer than two GPUs are visible."""
    n = worker_index(worker_id)
    if n is None or count < 2:
        return None
    return n % count


def pinned_visible_devices(current: str | None, worker_id: str | None, count: int) -> str | None:
    """New value of the ``*_VISIBLE_DEVICES`` variable for ``worker_id``, or None to leave it alone.

    ``current`` is the variable's present value: when set (``"4,5,6,7"``), the worker gets one
    entry of that list, so a restriction made by the user is kept; when unset, the plain index.
    """
    index = worker_device(worker_id, count)
    if index is None:
        return None
    entries = [e.strip() for e in current.split(",") if e.strip()] if current else []
    if entries:
        return entries[index % len(entries)]
    return str(index)


def _visible_env_var(is_hip: bool) -> str:
    if is_hip and "CUDA_VISIBLE_DEVICES" in os.environ and "HIP_VISIBLE_DEVICES" not in os.environ:
        return "CUDA_VISIBLE_DEVICES"  # the user restricts ROCm devices through the CUDA variable
    return "HIP_VISIBLE_DEVICES" if is_hip else "CUDA_VISIBLE_DEVICES"


def _pin_xdist_worker(config: pytest.Config) -> None:
    worker_id = getattr(config, "workerinput", {}).get("workerid") or os.environ.get("PYTEST_XDIST_WORKER")
    if worker_index(worker_id) is None or config.getoption("turbo_no_gpu_pinning"):
        return
    if not torch.cuda.is_available():
        return
    if torch.cuda.is_initialized():
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"turbo: xdist worker {worker_id} not pinned to a GPU: CUDA was initialised before "
            "pytest_configure (something touched torch.cuda at import time)"), stacklevel=2)
        return
    count = torch.cuda.device_count()  # NVML/amdsmi: does not initialise CUDA
    var = _visible_env_var(bool(torch.version.hip))
    value = pinned_visible_devices(os.environ.get(var), worker_id, count)
    if value is not None:
        os.environ[var] = value


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    declared = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, text in MARKERS.items():
        if name not in declared:
            config.addinivalue_line("markers", f"{name}: {text}")
    _pin_xdist_worker(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    """The hypothesis profile the property tests use (``turbo_core.testing.properties.profiles``)."""
    if importlib.util.find_spec("hypothesis") is None:
        return None
    from turbo_core.testing.properties.profiles import PROFILE_ENV, active_profile

    try:
        cpu, gpu = active_profile(device="cpu"), active_profile(device="cuda")
    except ValueError as exc:
        return f"turbo: {exc}"
    where = f"{cpu.name}" if cpu == gpu else f"{cpu.name} on the CPU, {gpu.name} on a GPU"
    source = f" (${PROFILE_ENV})" if os.environ.get(PROFILE_ENV, "").strip() else ""
    return f"turbo: hypothesis profile {where}{source}"


def _gpu_skip_reason() -> str:
    restrict = [f"{v}={os.environ[v]!r}" for v in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
                if v in os.environ]
    extra = f" ({', '.join(restrict)})" if restrict else ""
    return f"gpu test: no CUDA/ROCm device visible to torch{extra}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = set(config.getoption("turbo_only") or ())
    skip = set(config.getoption("turbo_skip") or ())
    if only or skip:
        kept, dropped = [], []
        for item in items:
            marks = {name for name in SELECTABLE if item.get_closest_marker(name) is not None}
            keep = (not only or bool(marks & only)) and not (marks & skip)
            (kept if keep else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    if _GPU_VISIBLE not in config.stash:
        config.stash[_GPU_VISIBLE] = torch.cuda.is_available()
    if not config.stash[_GPU_VISIBLE]:
        # a test's own skipif (evaluated before skip marks) keeps its reason; this covers the rest
        mark = pytest.mark.skip(reason=_gpu_skip_reason())
        for item in gpu_items:
            item.add_marker(mark)
