"""Primitive specs: the named kernel entry points that backends implement.

A primitive has a typed argument object (a frozen dataclass whose fields are the tensors and
attributes of one call), a fixed :class:`PrecisionType`, a *family* (the setting and environment
variable that selects its backend, e.g. ``gemm`` for ``gemm``/``gemm_fp8``/``gemm_fp4``), a
validator that rejects bad input with an error naming the argument, and the names of the fields
it writes in place (auto-tune times those on scratch copies).

This module holds the registry the spec modules fill (:func:`define_primitive`); it imports none
of them. Lookups by name go through ``turbo_core.dispatch.catalog``, which imports every spec.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from turbo_core.backend import PrecisionType

__all__ = ["Primitive", "args_key", "define_primitive"]


@dataclass(frozen=True)
class Primitive:
    """The spec of one primitive.

    Attributes:
        name: e.g. ``"gemm"``.
        args_type: the frozen dataclass a call passes to ``Kernel.impl``/``Kernel.check``.
        precision: the precision class its settings are keyed by.
        family: the selection family (``gemm``, ``grouped_gemm``, ``attn``,
            ``moe_dispatch_combine``, or the primitive's own name).
        validate: raises ``ValueError``/``TypeError`` naming the bad argument; runs before selection.
        mutates: fields a kernel writes in place (e.g. ``out`` for accumulate-into-out).
        tunable: whether auto-tune may pick its backend (collectives must not be tuned per rank).
        doc: one paragraph of semantics.
    """

    name: str
    args_type: type
    precision: PrecisionType
    family: str
    validate: Callable[[Any], None] | None = None
    mutates: tuple[str, ...] = ()
    tunable: bool = True
    doc: str = ""

    def check_args(self, args: Any) -> None:
        if not isinstance(args, self.args_type):
            raise TypeError(
                f"{self.name}: expected {self.args_type.__name__} arguments, got {type(args).__name__}"
            )
        if self.validate is not None:
            self.validate(args)

    def first_tensor(self, args: Any) -> torch.Tensor | None:
        for f in dataclasses.fields(args):
            value = getattr(args, f.name)
            if isinstance(value, torch.Tensor):
                return value
        return None


_lock = threading.Lock()
_PRIMITIVES: dict[str, Primitive] = {}


def define_primitive(prim: Primitive) -> Primitive:
    if not dataclasses.is_dataclass(prim.args_type):
        raise TypeError(f"primitive {prim.name}: args_type must be a dataclass")
    with _lock:
        if prim.name in _PRIMITIVES and _PRIMITIVES[prim.name] != prim:
            raise ValueError(f"primitive {prim.name!r} is already defined")
        _PRIMITIVES[prim.name] = prim
    return prim


def _value_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        dev = value.device
        return (
            "tensor", tuple(value.shape), str(value.dtype), tuple(value.stride()),
            dev.type, dev.index, value.data_ptr() % 16 == 0 if value.numel() else True,
        )
    if isinstance(value, (list, tuple)):
        return tuple(_value_key(v) for v in value)
    if isinstance(value, torch.dtype):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def args_key(args: Any) -> tuple:
    """Everything a capability check can read of a call: for each field, a tensor's shape,
    dtype, strides, device and 16-byte alignment, or the attribute's value. Tensor *contents*
    are not part of it: capability checks must not read them (that would be a host sync)."""
    return tuple((f.name, _value_key(getattr(args, f.name))) for f in dataclasses.fields(args))
