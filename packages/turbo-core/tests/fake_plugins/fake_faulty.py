"""Fake plugin: backend FAULTY, whose gemm kernel and capability check fail on demand.

Tests set ``FAULTS[...]`` (the module is fresh in every test, see conftest):

* ``"run"``: an exception instance the kernel raises, or ``None`` to compute ``op(a) @ op(b)`` in
  float64 (rounded once to the result dtype) as the other fake backends do;
* ``"nested"``: a backend name: the kernel calls the gemm primitive itself, pinned to that backend
  (a composite kernel whose inner call may fail to be served);
* ``"check"``: an exception instance the capability check raises.
"""

from __future__ import annotations

from turbo_core.dispatch import call, use_backend
from turbo_core.plugins import BackendInfo, Kernel, hookimpl

FAULTS: dict = {"run": None, "nested": None, "check": None}
CALLS = {"run": 0}


def _impl(args):
    CALLS["run"] += 1
    if FAULTS["run"] is not None:
        raise FAULTS["run"]
    if FAULTS["nested"] is not None:
        with use_backend(FAULTS["nested"]):
            return call("gemm", args)
    a = args.a.t() if args.trans_a else args.a
    b = args.b.t() if args.trans_b else args.b
    res = a.double() @ b.double()
    if args.trans_c:
        res = res.t()
    if args.out is not None:
        args.out.add_(res.to(args.out.dtype))
        return args.out
    return res.to(args.result_dtype).contiguous()


def _check(args):
    if FAULTS["check"] is not None:
        raise FAULTS["check"]
    return None


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="FAULTY", package="turbo-faulty", version="0.0.1", platforms=("cpu", "cuda", "rocm"),
                       description="fake backend whose kernel fails on demand")


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("gemm", "FAULTY", _impl, _check, variants=("fp32",)))
