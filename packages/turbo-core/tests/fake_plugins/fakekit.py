"""Shared, test-configurable behaviour of the fake gemm backends (not a plugin itself).

Tests set ``cfg(NAME)[...]`` and ``PRIMITIVES`` *before* the plugins load (loading is lazy: the
first ``get_host()``). conftest drops every module of this directory from ``sys.modules`` around
each test, so the state starts fresh every time.
"""

from __future__ import annotations

import threading
import time

from turbo_core.dispatch.specs.gemm import gemm_dims
from turbo_core.plugins import BackendInfo, Kernel

#: Primitives every fake backend registers a kernel for (tests add test-only primitives here).
PRIMITIVES: list[str] = ["gemm"]

_lock = threading.Lock()
_STATE: dict[str, dict] = {}


def cfg(name: str) -> dict:
    with _lock:
        return _STATE.setdefault(name, {
            "decline": None,        # a reason string: decline every call
            "decline_odd": False,   # decline when M, N or K is odd
            "unavailable": None,    # what the probe returns
            "sleep": 0.0,           # seconds per kernel call
            "raise": None,          # the kernel raises RuntimeError(this)
            "priority": 0,
            "autotune": True,
            "calls": 0,
            "checks": 0,
            "probes": 0,
        })


def _bump(name: str, counter: str) -> dict:
    c = cfg(name)
    with _lock:
        c[counter] += 1
    return c


def probe_for(name: str):
    def probe():
        return _bump(name, "probes")["unavailable"]
    return probe


def check_for(name: str):
    def check(args):
        c = _bump(name, "checks")
        if c["decline"]:
            return c["decline"]
        if c["decline_odd"]:
            m, n, k = gemm_dims(args)
            if m % 2 or n % 2 or k % 2:
                return f"{name} declines odd dims (M={m}, N={n}, K={k})"
        return None
    return check


def impl_for(name: str):
    def impl(args):
        c = _bump(name, "calls")
        if c["raise"]:
            raise RuntimeError(c["raise"])
        if c["sleep"]:
            time.sleep(c["sleep"])
        a = args.a.t() if args.trans_a else args.a
        b = args.b.t() if args.trans_b else args.b
        res = a.double() @ b.double()
        if args.trans_c:
            res = res.t()
        if args.out is not None:
            args.out.add_(res.to(args.out.dtype))  # accumulate: out += C
            return args.out
        return res.to(args.result_dtype).contiguous()
    return impl


def info(name: str) -> BackendInfo:
    return BackendInfo(name=name, package=f"turbo-{name.lower()}", version="0.0.1",
                       platforms=("cpu", "cuda", "rocm"), probe=probe_for(name),
                       description=f"fake backend {name} for tests")


def kernels(name: str) -> list[Kernel]:
    c = cfg(name)
    return [Kernel(p, name, impl_for(name), check_for(name), variants=("fp32",),
                   priority=c["priority"], autotune=c["autotune"]) for p in PRIMITIVES]
