"""What a property is, and how one example runs on one backend.

A :class:`Property` holds a primitive's name, ``cases(max_dim)`` (a hypothesis strategy of plain
case objects: shapes, flags, a seed) and ``check(case, target)``, which builds the primitive's
arguments on ``target.device`` from the case, calls ``target.call(args)`` and compares the result
with float64 math computed on the CPU (raising ``AssertionError``).

:meth:`Target.call` runs the primitive pinned to one backend through the dispatcher (validation,
selection, the kernel), and checks one property common to every primitive on the way: no tensor
argument changes, except the fields the primitive declares it writes (``Primitive.mutates``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from turbo_core.dispatch import call as dispatch_call
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.dispatcher import BackendError
from turbo_core.dispatch.manager import use_backend
from turbo_core.testing.case import host_copy
from turbo_core.testing.numerics import assert_close_to_reference

__all__ = ["Declined", "Property", "Target", "backward_with_given_out", "close", "exact", "f64", "overflowed", "same_bits"]


class Declined(Exception):
    """The backend's capability check declined the call (its reason is the message)."""


@dataclass(frozen=True)
class Property:
    primitive: str
    cases: Callable[[int], Any]
    check: Callable[[Any, Target], None]


@dataclass(frozen=True)
class Target:
    """One backend on one device, for one primitive."""

    backend: str
    device: torch.device
    primitive: str

    def put(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """``t`` (drawn on the CPU) on the target's device, same strides."""
        if t is None or t.device == self.device:
            return t
        if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
            return self.put(t.view(torch.uint8)).view(t.dtype)  # FP8/FP4/E8M0 travel as bytes
        if t.is_contiguous():
            return t.to(self.device)
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=self.device)
        out.copy_(t)
        return out

    def call(self, args: Any) -> Any:
        """Run the primitive on this backend: its result. ``Declined`` when the backend's capability
        check declines; ``AssertionError`` when the call writes a tensor it does not own."""
        prim = get_primitive(self.primitive)
        before = {f.name: _bits(v) for f in dataclasses.fields(args)
                  if f.name not in prim.mutates and isinstance(v := getattr(args, f.name), torch.Tensor)}
        with use_backend(self.backend, primitives=(self.primitive,)):
            try:
                result = dispatch_call(self.primitive, args)
            except BackendError as exc:
                if "cannot run this call" in str(exc):
                    raise Declined(str(exc)) from None
                raise
        for name, bits in before.items():
            if not torch.equal(_bits(getattr(args, name)), bits):
                raise AssertionError(f"{self.primitive} on {self.backend} wrote its input {name!r}")
        return result


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of ``t`` on the CPU (NaN compares equal to itself)."""
    t = host_copy(t.detach())
    if t.element_size() == 1:
        t = t.view(torch.uint8)  # any strides: same element size
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.reshape(-1))
    return flat.view(torch.uint8)


def f64(t: torch.Tensor) -> torch.Tensor:
    """``t`` (any device; FP8/FP4/E8M0 read as their values) as a float64 CPU tensor."""
    return host_copy(t.detach()).to(torch.float64)


def overflowed(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 ``reference`` with ±inf where rounding it to ``dtype`` overflows (IEEE round to
    nearest: a result past the format's range is ±inf, never saturated)."""
    rounded = reference.to(dtype)
    return torch.where(rounded.isinf() & reference.isfinite(), rounded.to(torch.float64), reference)


def close(actual: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Same shape, and within the conformance tolerance of ``dtype`` of the float64 ``reference``
    (:func:`overflowed`: ±inf where the reference is out of ``dtype``'s range)."""
    if tuple(actual.shape) != tuple(reference.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(reference.shape)}")
    assert_close_to_reference(host_copy(actual.detach()), overflowed(reference, dtype), dtype=dtype, what=what)


def exact(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Same shape and the same values (NaN where expected has NaN)."""
    got = host_copy(actual.detach())
    want = torch.as_tensor(expected)
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)} != expected {tuple(want.shape)}")
    if got.dtype == torch.bool or want.dtype == torch.bool or not got.is_floating_point():
        ok = torch.equal(got.to(want.dtype), want)
    else:
        g64, w64 = got.to(torch.float64), want.to(torch.float64)
        ok = bool(((g64 == w64) | (g64.isnan() & w64.isnan())).all())
    if not ok:
        raise AssertionError(f"{what}: got {got.tolist()}, expected {want.tolist()}")


def same_bits(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Same shape, dtype and bytes."""
    if actual.dtype != expected.dtype or tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: {actual.dtype} {tuple(actual.shape)} != expected {expected.dtype} "
                             f"{tuple(expected.shape)}")
    if not torch.equal(_bits(actual), _bits(expected)):
        raise AssertionError(f"{what}: the bytes differ")


def backward_with_given_out(out64: torch.Tensor, lse64: torch.Tensor, out: torch.Tensor, dout: torch.Tensor, *,
                            lse_transposed: bool = False) -> None:
    """float64 gradients of ``(out64 * dout).sum()`` into the leaves of an attention's exact output
    ``out64 [..., rows, heads, d_v]``, with the backward's ``D = rowsum(dout * out)`` taken from the
    ``out`` the primitive is given (rounded to the input dtype) rather than from ``out64``:
    ``dS = P * (dP - D)``, as the attention and sparse MLA specs define it. Where P is close to one
    (a row that sees one key beside a sink, or two keys) ``dP - D`` cancels, and out's rounding moves
    the gradients by more than the dtype's tolerance; that is the contract's answer, so the oracle
    gives it too. Since ``d lse / d s = P`` (the sink's probability for the sink), adding
    ``-(D_given - D_exact) * lse`` to the loss adds exactly ``-P * (D_given - D_exact)`` to dS and
    to dsink. Rows that see nothing (lse -inf) have P = 0 and take no part. ``lse64`` is
    ``[..., rows, heads]``, or ``[..., heads, rows]`` with ``lse_transposed``."""
    d64 = dout.double()
    shift = (d64 * out.double()).sum(-1) - (d64 * out64.detach()).sum(-1)
    if lse_transposed:
        shift = shift.transpose(-1, -2)
    lse_part = torch.where(lse64.isfinite(), lse64, torch.zeros_like(lse64))
    ((out64 * d64).sum() - (shift * lse_part).sum()).backward()
