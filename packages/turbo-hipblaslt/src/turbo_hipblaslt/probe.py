"""Availability of the hipBLASLt/cuBLASLt backend. Never compiles: with ``TURBO_HIPBLASLT_JIT=1`` and
a toolkit found, the backend is reported available and the build happens on first use."""

from __future__ import annotations


def probe() -> str | None:
    from turbo_hipblaslt import _ext, _jit

    reason = _ext.missing_reason()
    if reason:
        return reason
    torch_platform = _ext.torch_platform()
    if torch_platform is None:
        return "needs a CUDA or ROCm build of torch (this torch is CPU-only)"
    if _ext.installed() or _ext._module is not None:
        try:
            module = _ext.load()  # loads the library (no GPU context is created)
        except _ext.ExtensionUnavailable as exc:
            return str(exc)
        if module.PLATFORM != torch_platform:
            return (f"the extension was built for {module.PLATFORM} ({module.LIBRARY}) but this torch is a "
                    f"{torch_platform} build")
    elif _jit.jit_enabled():
        tc, _ = _ext.jit_toolchain()
        if tc is not None and tc.platform != torch_platform:  # cannot happen: the search follows torch
            return f"the JIT toolkit is {tc.platform} but this torch is a {torch_platform} build"
    from turbo_core.platform import gpu_count

    if gpu_count() == 0:
        return "no GPU"
    return None
