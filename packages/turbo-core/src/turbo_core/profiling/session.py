"""Running a ``turbo bench`` suite or a user's Python command under a profiler.

* :func:`profile_call` runs a callable under ``torch.profiler.profile`` (CPU activity, plus CUDA
  when a GPU is there), so ``dispatch.call()`` labels every turbo call (``labels``); kineto's trace
  marks (``USDT: ... profiler_start``) are kept off the terminal.
* :func:`python_target` turns ``python script.py args`` / ``python -m module args`` into a callable
  that runs it in this process with ``runpy`` and ``sys.argv`` set, so the profiler sees it.
* :func:`tool_command` builds the command line that re-runs ``turbo profile`` under
  nsys / ncu / rocprof, with ``--emit-nvtx`` so the turbo ranges become NVTX / roctx ranges.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["TOOLS", "ProfileError", "emit_nvtx", "profile_call", "python_target", "tool_command",
           "without_kineto_trace_marks"]

#: External profilers ``--tool`` accepts: the default arguments placed before the command, and
#: where to get the tool when it is missing.
TOOLS: dict[str, tuple[list[str], str]] = {
    "nsys": (["profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true", "-o", "turbo_profile"],
             "NVIDIA Nsight Systems (CUDA toolkit, or https://developer.nvidia.com/nsight-systems)"),
    "ncu": (["--nvtx", "--target-processes", "all", "-f", "-o", "turbo_profile"],
            "NVIDIA Nsight Compute (CUDA toolkit, or https://developer.nvidia.com/nsight-compute)"),
    "rocprof": (["--hip-trace", "--roctx-trace", "-o", "turbo_profile.csv"],
                "ROCm rocprofiler (the rocprofiler package of ROCm)"),
}


class ProfileError(RuntimeError):
    """A profile request that cannot run (the message says why)."""


def profile_call(fn: Callable[[], Any], *, with_stack: bool = False) -> tuple[Any, Any]:
    """``(profiler, exit_code)`` after running ``fn()`` under ``torch.profiler.profile``.

    ``exit_code`` is ``fn``'s return value, or the code of a ``SystemExit`` it raised (a script's
    ``sys.exit``); other exceptions propagate after the profiler has stopped.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    code: Any = 0
    prof = torch.profiler.profile(activities=activities, with_stack=with_stack)
    with without_kineto_trace_marks():
        prof.start()
    try:
        code = fn()
    except SystemExit as exc:
        code = exc.code
    finally:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        with without_kineto_trace_marks():
            prof.stop()
    return prof, code


#: The prefix of the lines libkineto writes to file descriptor 2 when a trace starts and stops
#: (``USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``): trace marks for
#: system tools, not messages for the user.
KINETO_MARK = "USDT:"


@contextmanager
def without_kineto_trace_marks():
    """Run the block with file descriptor 2 sent to a temporary file, then write what it received to
    stderr less kineto's trace marks (:data:`KINETO_MARK`); kineto's warnings and errors still show.
    Kineto writes from C++ straight to the descriptor, so ``sys.stderr`` cannot filter it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not line.startswith(KINETO_MARK)]
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


@contextmanager
def emit_nvtx():
    """``torch.autograd.profiler.emit_nvtx`` (needs CUDA/ROCm): the turbo ranges become NVTX/roctx."""
    if not torch.cuda.is_available():
        raise ProfileError("--emit-nvtx needs a CUDA or ROCm device (torch.cuda.is_available() is False)")
    with torch.autograd.profiler.emit_nvtx():
        yield


def _is_python(word: str) -> bool:
    base = os.path.basename(word)
    return word == sys.executable or base == "python" or (base.startswith("python") and base[6:].replace(".", "").isdigit())


def python_target(command: list[str]) -> Callable[[], Any]:
    """A callable that runs ``command`` (``python script.py args`` or ``python -m module args``; the
    leading ``python`` may be left out) in this process, with ``sys.argv`` and ``sys.path[0]`` set as
    ``python`` would and restored after. Raises :class:`ProfileError` for anything else."""
    if not command:
        raise ProfileError("no command given: use `turbo profile -- python train.py [args]`")
    words = list(command)
    if _is_python(words[0]):
        words = words[1:]
    elif not words[0].endswith(".py"):
        raise ProfileError(f"command: {words[0]!r} is not a Python interpreter or script; turbo profile runs "
                           "Python in-process (`-- python train.py args` or `-- python -m pkg args`); "
                           "use --tool nsys|ncu|rocprof to profile any other command")
    if not words:
        raise ProfileError("command: `python` needs a script or -m module")
    if words[0] == "-m":
        if len(words) < 2:
            raise ProfileError("command: `python -m` needs a module name")
        module, rest = words[1], words[2:]

        def run() -> Any:
            with _argv([module, *rest], os.getcwd()):
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            return 0

        return run
    if words[0].startswith("-"):
        raise ProfileError(f"command: python option {words[0]!r} is not supported in-process (script or -m only)")
    script, rest = words[0], words[1:]
    if not os.path.isfile(script):
        raise ProfileError(f"command: script {script!r} does not exist")

    def run_script() -> Any:
        with _argv([script, *rest], os.path.dirname(os.path.abspath(script))):
            runpy.run_path(script, run_name="__main__")
        return 0

    return run_script


@contextmanager
def _argv(argv: list[str], path0: str):
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, path0)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def tool_command(tool: str, turbo_args: list[str], tool_args: list[str] | None = None) -> list[str]:
    """The subprocess command running ``turbo profile --emit-nvtx <turbo_args>`` under ``tool``.

    Raises :class:`ProfileError` naming the tool when it is unknown or not on ``PATH``.
    """
    if tool not in TOOLS:
        raise ProfileError(f"--tool: unknown tool {tool!r} (choose from {', '.join(TOOLS)})")
    path = shutil.which(tool)
    if path is None:
        present = [t for t in TOOLS if shutil.which(t)]
        found = f"on PATH: {', '.join(present)}" if present else "none of nsys, ncu, rocprof is on PATH"
        raise ProfileError(f"--tool {tool}: `{tool}` is not on PATH; install {TOOLS[tool][1]} or add its bin "
                           f"directory to PATH ({found})")
    args = TOOLS[tool][0] if tool_args is None else tool_args
    return [path, *args, sys.executable, "-m", "turbo_core.cli", "profile", "--emit-nvtx", *turbo_args]
