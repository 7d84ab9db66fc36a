"""A leaner launch of the fused path's Triton kernels.

``kernel[grid](*args, **constexprs)`` goes through ``JITFunction.run`` on every call: option parsing, argument
binding and specialization, the cache-key string, the global-value check, then the compiled kernel's launcher;
in an eager dispatch (four launches) that is much of the host time. :func:`launch` makes the first call of
each specialization that way and keeps the :class:`~triton.compiler.CompiledKernel` it returns; later calls
with the same specialization go straight to its launcher (``CompiledKernel.run``, with the same arguments
``JITFunction.run`` passes it: the grid, the stream, the function, the packed metadata, the launch metadata
and hooks, then every argument of the kernel in its signature's order).

The key is what Triton specializes on: each tensor's dtype and whether its address is a multiple
of 16; each int's width (i32 / i64 / u64), whether it is a multiple of 16 and whether it is 1 (a
constant then); bools, floats and None; the constexpr values and ``num_warps``; the device.

Opt-in (``TURBO_DEEPEP_LAUNCH=lean``): the key mirrors Triton 3.6's specialization rules, which another Triton
version may extend, and the host time it saves (the ``moe-dispatch`` suite measures a dispatch's host time) is
small next to the risk of bypassing Triton's own checks by default. Without the opt-in, and whenever the fast
path is not there (Triton's interpreter, a Triton without ``triton.knobs`` or whose compiled kernels lack the
launcher's attributes), every call is ``kernel[grid](...)``.
"""

from __future__ import annotations

import os

import torch

__all__ = ["ENV", "clear", "launch", "spec"]

ENV = "TURBO_DEEPEP_LAUNCH"
_I32 = (-(1 << 31), 1 << 31)
_I64 = 1 << 63
_cache: dict[tuple, tuple] = {}
_state: dict[str, object] = {}  # "ok": the fast path is usable (None: not checked yet); its helpers


def clear() -> None:
    """Forget every kept kernel and the availability check (tests; after changing ``ENV``)."""
    _cache.clear()
    _state.clear()


def spec(a) -> object:
    """What Triton specializes on for one runtime argument (a hashable value)."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() & 15 == 0
    if isinstance(a, bool):
        return "u1"
    if isinstance(a, int):
        if a == 1:
            return 1
        width = 32 if _I32[0] <= a < _I32[1] else (64 if -_I64 <= a < _I64 else 65)
        return width, a & 15 == 0
    if isinstance(a, float):
        return "fp32"
    if a is None:
        return None
    return type(a).__name__, a  # anything else: by value (must be hashable)


def _available() -> bool:
    ok = _state.get("ok")
    if ok is not None:
        return ok
    ok = False
    if os.environ.get(ENV, "").strip().lower() == "lean" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        try:
            from triton import knobs
            from triton.runtime import driver

            _state["knobs"] = knobs.runtime
            _state["driver"] = driver
            ok = True
        except Exception:  # noqa: BLE001 - an older or different Triton: its own launch path
            ok = False
    _state["ok"] = ok
    return ok


def _usable(compiled) -> bool:
    return all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata", "launch_metadata")) \
        and compiled.function is not None


def launch(kernel, grid: tuple, args: tuple, consts: dict, num_warps: int = 4) -> None:
    """``kernel[grid](*args, **consts, num_warps=num_warps)``: ``args`` are the kernel's leading
    runtime arguments in order, ``consts`` its remaining (constexpr) arguments by name."""
    if not _available():
        kernel[grid](*args, **consts, num_warps=num_warps)
        return
    drv = _state["driver"].active
    dev = drv.get_current_device()
    key = (id(kernel), num_warps, dev, tuple(consts.items()), tuple(map(spec, args)))
    hit = _cache.get(key)
    if hit is None:
        compiled = kernel[grid](*args, **consts, num_warps=num_warps)
        rest = list(getattr(kernel, "arg_names", None) or [])[len(args):]
        if compiled is not None and _usable(compiled) and sorted(rest) == sorted(consts):
            _cache[key] = (compiled, tuple(consts[n] for n in rest))  # the signature's order
        return
    compiled, tail = hit
    g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
    stream = drv.get_current_stream(dev)
    full = args + tail
    knobs = _state["knobs"]
    enter = knobs.launch_enter_hook
    # the launch metadata is for the enter hook alone: none to build when no hook would read it
    idle = enter is None or getattr(enter, "calls", None) == []
    meta = None if idle else compiled.launch_metadata(grid, stream, *full)
    compiled.run(g0, g1, g2, stream, compiled.function, compiled.packed_metadata, meta, enter, knobs.launch_exit_hook,
                 *full)
