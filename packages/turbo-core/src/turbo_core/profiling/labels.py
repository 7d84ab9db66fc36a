"""Labelling turbo calls for profilers: ``turbo::<primitive>[<backend>]`` ranges.

``dispatch.call()`` reads :data:`state` ``._is_profiler_enabled`` on every call (a module attribute
read, about 10 ns) and only when it is true runs the kernel through :func:`run_labelled`, inside a
``torch.profiler.record_function`` range named by :func:`label`. Under ``torch.profiler.profile``
the range appears in the table and the Chrome trace, and the device kernels launched inside it are
attributed to it; under ``torch.autograd.profiler.emit_nvtx()`` (what ``turbo profile --tool nsys``
uses) it becomes an NVTX / roctx range.

The flag is the Python-side one that torch's own profilers (``torch.profiler.profile``,
``torch.autograd.profiler.profile``, ``emit_nvtx``, ``emit_itt``) set on enter and clear on exit
(torch 2.11..2.14). A profiler started from C++ only (e.g. an on-demand Kineto trace) does not set
it, so such traces show no turbo ranges; ``torch._C._autograd._profiler_enabled()`` would see them
but costs about 60 ns a call, several times the flag.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.autograd.profiler as _autograd_profiler

__all__ = ["LABEL_PREFIX", "label", "parse_label", "profiler_active", "run_labelled", "state"]

LABEL_PREFIX = "turbo::"


class _CState:
    """Stand-in for a torch without the Python flag: asks the C profiler state instead."""

    @property
    def _is_profiler_enabled(self) -> bool:
        return bool(torch._C._autograd._profiler_enabled())


#: An object whose ``_is_profiler_enabled`` attribute is true while a torch profiler is active.
state: Any = _autograd_profiler if hasattr(_autograd_profiler, "_is_profiler_enabled") else _CState()


def profiler_active() -> bool:
    """True while a torch profiler (kineto, legacy autograd, NVTX or ITT emitter) is active."""
    return bool(state._is_profiler_enabled)


def label(primitive: str, backend: str) -> str:
    """The range name of one turbo call: ``turbo::gemm[TRITON]``."""
    return f"{LABEL_PREFIX}{primitive}[{backend}]"


def parse_label(name: str) -> tuple[str, str] | None:
    """``(primitive, backend)`` of a name made by :func:`label`, else ``None``."""
    if not name.startswith(LABEL_PREFIX) or not name.endswith("]") or "[" not in name:
        return None
    primitive, _, backend = name[len(LABEL_PREFIX):-1].partition("[")
    return (primitive, backend) if primitive and backend else None


def run_labelled(primitive: str, backend: str, kernel: Any, args: Any) -> Any:
    """``kernel.run(args)`` inside a ``record_function`` range named ``label(primitive, backend)``."""
    with torch.profiler.record_function(label(primitive, backend)):
        return kernel.run(args)
