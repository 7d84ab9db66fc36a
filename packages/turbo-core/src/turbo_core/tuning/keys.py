"""Tuning keys: what a tuned choice is keyed by, per primitive.

A :class:`Key` is ``(arch, shape, dtypes, layout)``:

* ``arch``: where it was tuned — the GPU arch (``"sm90"``, ``"gfx942"``), ``"cpu"``, or for a
  kernel-config key the label the backend's launcher uses (TRITON's interpreter: ``"interpreter"``);
* ``shape``: the problem's sizes (GEMM: ``(M, N, K)``);
* ``dtypes``: short dtype names (GEMM: operand and result, ``("bf16", "bf16")``);
* ``layout``: layout flags as a short string (GEMM: ``"NT"`` = ``trans_a=False, trans_b=True``,
  then ``"C"`` for ``trans_c`` and ``"+acc"`` when accumulating into ``out``; FP8 GEMM: the same,
  then ``/`` and the scaling: ``tensorwise``, ``rowwise``, ``mx``, or ``blockwise-`` with each
  operand's block layout, ``1d`` or ``2d``: ``"NT/blockwise-1d2d"`` is 1 x 128 activations times
  128 x 128 weights).

``gemm_fp8`` keys have dtypes ``(a, b, result)`` (``("float8_e4m3fn", "float8_e4m3fn", "bf16")``).

Backend-choice entries use the primitive's key function (:func:`key_for`; the dispatch layer
registers those of ``gemm`` and ``gemm_fp8`` with :func:`register_key`, ``turbo_core.dispatch.tuning_keys``);
kernel-config entries use a key the backend builds from what its config choice depends on (see
``turbo_core.tuning.spaces``). Keys hold no tensors; building one reads metadata only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from turbo_core.platform import Platform

__all__ = ["Key", "arch_of", "args_for", "bucket", "dtype_name", "dtype_of", "key_for", "register_key"]

_SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
_LONG = {v: k for k, v in _SHORT.items()}


class Key(NamedTuple):
    arch: str
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]
    layout: str

    def to_json(self) -> dict:
        return {"arch": self.arch, "shape": list(self.shape), "dtypes": list(self.dtypes), "layout": self.layout}

    @classmethod
    def from_json(cls, obj: Any, *, what: str = "key") -> Key:
        """A key from its JSON object; ``ValueError`` naming ``what`` and the bad field."""
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: expected an object with arch, shape, dtypes, layout; got {obj!r}")
        arch, shape, dtypes, layout = (obj.get(f) for f in ("arch", "shape", "dtypes", "layout"))
        if not isinstance(arch, str) or not arch:
            raise ValueError(f"{what}.arch: expected a non-empty string, got {arch!r}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"{what}.shape: expected a list of sizes >= 0, got {shape!r}")
        if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
            raise ValueError(f"{what}.dtypes: expected a list of dtype names, got {dtypes!r}")
        if not isinstance(layout, str):
            raise ValueError(f"{what}.layout: expected a string, got {layout!r}")
        return cls(arch, tuple(shape), tuple(dtypes), layout)

    def label(self) -> str:
        return f"{self.arch} {'x'.join(map(str, self.shape))} {','.join(self.dtypes)} {self.layout}"


def bucket(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Each size rounded up to a power of two (0 and 1 stay): the shape bucket of a key."""
    return tuple(s if s <= 1 else 1 << (s - 1).bit_length() for s in shape)


def dtype_name(dtype: torch.dtype) -> str:
    """``"bf16"``, ``"fp16"``, ``"fp32"``; other dtypes by torch's name (``"float8_e4m3fn"``)."""
    return _SHORT.get(dtype) or str(dtype).replace("torch.", "")


def dtype_of(name: str) -> torch.dtype:
    """The inverse of :func:`dtype_name`."""
    dt = _LONG.get(name) or getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"dtypes: unknown dtype name {name!r}")
    return dt


def arch_of(platform: Platform) -> str:
    return platform.arch or platform.kind


KeyFunction = Callable[[Any, Platform], Key]
_KEYS: dict[str, KeyFunction] = {}
_ARGS: dict[str, Callable[..., Any]] = {}


ArgsBuilder = Callable[[Key, str, torch.Generator], Any]


def register_key(primitive: str, key: KeyFunction, args: ArgsBuilder | None = None) -> None:
    """Make ``primitive`` tunable in the database: ``key(args, platform) -> Key`` (metadata only), and
    optionally ``args(key, device, generator)`` building random arguments of a key (for ``--check``)."""
    if not callable(key):
        raise TypeError(f"key: expected a callable, got {key!r}")
    _KEYS[primitive] = key
    if args is not None:
        _ARGS[primitive] = args


def key_for(primitive: str, args: Any, platform: Platform) -> Key | None:
    """The database key of a call, or ``None`` when ``primitive`` has no key function."""
    fn = _KEYS.get(primitive)
    return None if fn is None else fn(args, platform)


def args_for(primitive: str, key: Key, device: str, generator: torch.Generator) -> Any:
    fn = _ARGS.get(primitive)
    if fn is None:
        raise ValueError(f"primitive: no argument builder for {primitive!r} (known: {', '.join(sorted(_ARGS))})")
    return fn(key, device, generator)
