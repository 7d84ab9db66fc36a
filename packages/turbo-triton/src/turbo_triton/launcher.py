"""Launching compiled Triton kernels with less host work than ``kernel[grid](...)``.

``kernel[grid](*args, **kwargs)`` runs Triton's whole per-call path every time: it reads the current
device and stream, binds and specializes every argument, builds the cache key of the specialization,
looks the compiled kernel up, checks the kernel's globals, and only then calls the compiled
launcher. At the small shapes of a training step that is most of an eager op's host cost.

``fast_kernel(kernel)[grid](*args, **kwargs)`` takes that path once per *launch key* and afterwards calls the
compiled launcher directly. The launch key holds everything Triton's specialization reads from a
call, each at least as finely as Triton does, so that two calls with one key get the same compiled
kernel:

* the current device;
* per positional argument: a tensor's dtype and whether its address is 16-byte aligned; an int's
  equality to 1, divisibility by 16 and integer width (i32, i64, u64); a float's type; a bool's or
  ``None``'s value; a host TMA ``TensorDescriptor``'s dtype, shape, strides, block shape and options;
* the keyword arguments (constexprs and launch options such as ``num_warps``) by value.

The table holds no tensor (``turbo_core.graph_pool``'s rule: nothing a call allocates outlives it
unless it is an output): positional tensors enter the key as dtype and alignment only, and a launch
with a tensor passed by keyword is never stored.

On the fast path a positional ``torch.Tensor`` reaches the compiled launcher as its address (the
``data_ptr()`` the key already read). Triton's launcher takes an int pointer argument as the
address itself; for a tensor it calls ``data_ptr()`` again and asks the driver
(``cuPointerGetAttribute`` / ``hipPointerGetAttribute``) whether the device can reach it, a driver
call a pointer a launch. The first launch of every key takes Triton's path, checks included; the
ops' argument checks (one device for every tensor, ``turbo_core.dispatch.specs.validate``) run
before any launch.

Any other argument type, a callable grid, or launch hooks installed (``triton.knobs.runtime``
``launch_enter_hook``, which profilers such as proton set) take Triton's own path for that call. In the
interpreter (``TRITON_INTERPRET=1``) every call takes Triton's path. The compiled kernels themselves
are Triton's (its cache); the table here holds, per key, the compiled kernel and the constexpr values
appended after the positional arguments, and is cleared by :func:`clear`.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch

from turbo_triton import _runtime

__all__ = ["MAX_KEYS", "FastKernel", "arg_key", "clear", "fast_kernel", "stats"]

_TENSOR = torch.Tensor
#: Launch keys kept per kernel; past it, new keys take Triton's path (a keyword argument that varies
#: per call, e.g. a size passed by name, would otherwise add a key a call).
MAX_KEYS = 512
_I32 = (-(2**31), 2**31 - 1)
_I64_MAX = 2**63 - 1


class _Unkeyed(Exception):
    """An argument whose specialization the launch key does not model."""


def _int_key(v: int) -> tuple:
    width = 0 if _I32[0] <= v <= _I32[1] else (1 if v <= _I64_MAX else 2)
    return (v == 1, v % 16 == 0, width)


def _descriptor_key(d: Any) -> tuple:
    base = d.base
    return (type(d), base.dtype, base.data_ptr() % 16 == 0, tuple(d.shape), tuple(d.strides), tuple(d.block_shape),
            getattr(d, "padding", None), getattr(d, "round_f32_to_tf32", None))


#: ``_int_key`` of the ints seen (sizes, strides, offsets: few distinct values); cleared past
#: :data:`_INT_KEYS_MAX` entries.
_int_keys: dict[int, tuple] = {}
_INT_KEYS_MAX = 4096


def _args_key(args: tuple) -> tuple:
    """``tuple(map(arg_key, args))``, with the two common kinds (plain tensors, ints) inline and the
    ints' keys memoized."""
    return _key_and_launch_args(args)[0]


def _key_and_launch_args(args: tuple) -> tuple[tuple, list]:
    """``(_args_key(args), the arguments as the compiled launcher takes them)``: each plain
    ``torch.Tensor`` as its address (module doc), everything else as given; one pass, one
    ``data_ptr()`` a tensor."""
    out = []
    append = out.append
    passed = []
    pass_ = passed.append
    for v in args:
        t = type(v)
        if t is _TENSOR:
            ptr = v.data_ptr()
            append((v.dtype, ptr % 16 == 0))
            pass_(ptr)
            continue
        if t is int:
            k = _int_keys.get(v)
            if k is None:
                if len(_int_keys) >= _INT_KEYS_MAX:
                    _int_keys.clear()
                k = _int_keys[v] = _int_key(v)
            append(k)
        else:
            append(arg_key(v))
        pass_(v)
    return tuple(out), passed


def arg_key(v: Any) -> Any:
    """The launch-key part of one positional argument (see the module doc)."""
    t = type(v)
    if t is _TENSOR or isinstance(v, _TENSOR):
        return (v.dtype, v.data_ptr() % 16 == 0)
    if t is bool or v is None:
        return v
    if t is int:
        return _int_key(v)
    if t is float:
        return float
    if t.__name__ == "TensorDescriptor":
        return _descriptor_key(v)
    raise _Unkeyed(t.__name__)


class _Entry:
    __slots__ = ("compiled", "tail")

    def __init__(self, compiled: Any, tail: tuple) -> None:
        self.compiled = compiled
        self.tail = tail


_stats = {"fast": 0, "slow": 0, "entries": 0}
_kernels: dict[Any, FastKernel] = {}
_lock = threading.Lock()
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


try:
    from triton import knobs as _knobs
except ImportError:  # a Triton without knobs: every call takes Triton's path
    _knobs = None


def _hook_set(hook: Any) -> bool:
    """Whether a launch hook slot holds a hook: a callable, or a non-empty ``HookChain`` (recent
    Triton keeps an empty chain there rather than ``None``)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else True


def _holds_tensor(kwargs: dict) -> bool:
    """Whether a keyword argument is a tensor: the key (by identity) and the tail would keep it alive
    past the call, so such a launch is not stored and always takes Triton's path."""
    return any(isinstance(v, _TENSOR) for v in kwargs.values())


def _hooks() -> bool:
    """Whether Triton launch hooks are installed (then every call takes Triton's path)."""
    if _knobs is None:
        return True
    rt = _knobs.runtime
    return _hook_set(rt.launch_enter_hook) or _hook_set(rt.launch_exit_hook)


class FastKernel:
    """A ``@triton.jit`` kernel whose launches skip Triton's per-call path after the first one of
    each launch key (module doc). ``fast_kernel(kernel)[grid](*args, **kwargs)`` launches like
    ``kernel[grid](*args, **kwargs)``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._entries: dict[tuple, _Entry | None] = {}
        try:  # the kernel's Python signature (anything else launched this way takes Triton's path)
            params = list(inspect.signature(getattr(fn, "fn", fn)).parameters.values())
        except (TypeError, ValueError):
            params = None
        self._names = [p.name for p in params] if params is not None else None
        self._defaults = {p.name: p.default for p in params or () if p.default is not inspect.Parameter.empty}

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def _tail(self, nargs: int, kwargs: dict) -> tuple | None:
        """The values of the parameters after the positional ones, in signature order (from the
        keyword arguments, else the defaults), or ``None`` when they cannot be laid out."""
        if self._names is None:
            return None
        tail = []
        for name in self._names[nargs:]:
            if name in kwargs:
                tail.append(kwargs[name])
            elif name in self._defaults:
                tail.append(self._defaults[name])
            else:
                return None
        return tuple(tail)

    def launch(self, grid: Any, args: tuple, kwargs: dict) -> None:
        if _runtime.interpreting() or type(grid) is not tuple or _raw_stream is None or _hooks():
            _stats["slow"] += 1
            self.fn[grid](*args, **kwargs)
            return
        device = torch.cuda.current_device()
        try:
            args_key, passed = _key_and_launch_args(args)
            key = (device, args_key, tuple(kwargs.items()))
            entry = self._entries.get(key, False)
        except (_Unkeyed, TypeError):  # TypeError: an unhashable keyword value
            _stats["slow"] += 1
            self.fn[grid](*args, **kwargs)
            return
        if entry is False:
            compiled = self.fn[grid](*args, **kwargs)
            if len(self._entries) >= MAX_KEYS or _holds_tensor(kwargs):
                _stats["slow"] += 1
                return
            tail = self._tail(len(args), kwargs) if compiled is not None else None
            with _lock:
                self._entries[key] = _Entry(compiled, tail) if tail is not None else None
                _stats["entries"] += 1
            _stats["slow"] += 1
            return
        if entry is None:  # a key whose arguments could not be laid out: Triton's path
            _stats["slow"] += 1
            self.fn[grid](*args, **kwargs)
            return
        _stats["fast"] += 1
        c = entry.compiled
        n = len(grid)
        c.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, _raw_stream(device), c.function,
              c.packed_metadata, None, None, None, *passed, *entry.tail)


def fast_kernel(fn: Any) -> FastKernel:
    """The :class:`FastKernel` of a ``@triton.jit`` kernel (one per kernel)."""
    k = _kernels.get(fn)
    if k is None:
        with _lock:
            k = _kernels.get(fn)
            if k is None:
                k = _kernels[fn] = FastKernel(fn)
    return k


def clear() -> None:
    """Forget every launch key (the compiled kernels stay in Triton's cache) and the counters."""
    with _lock:
        for k in _kernels.values():
            k._entries.clear()
        _stats.update(fast=0, slow=0, entries=0)


def stats() -> dict[str, int]:
    """``{"fast": launches that skipped Triton's path, "slow": launches that took it, "entries":
    launch keys stored}`` since the last :func:`clear`."""
    return dict(_stats)
