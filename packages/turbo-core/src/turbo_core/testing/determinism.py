"""Bit-exact run-to-run determinism check for ops and kernels (the ``deterministic`` test suite).

:func:`deterministic_check` runs a callable several times on fresh clones of its inputs and
asserts that every output tensor is bit-identical between the runs: the raw bytes are compared,
so ``-0.0`` differs from ``+0.0`` and two NaNs are equal only when their payloads (bit patterns)
are equal. This is what "deterministic mode bit-exact" means in the architecture contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["assert_same_outputs", "clone_inputs", "deterministic_check"]


def _clone(obj: Any) -> Any:
    """A deep copy of the tensors in ``obj`` (tuples, lists, dicts and dataclasses are walked);
    ``requires_grad`` is kept, so a run may call ``backward`` on its own fresh leaves."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone().requires_grad_(obj.requires_grad)
    if isinstance(obj, (list, tuple)):
        items = [_clone(o) for o in obj]
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*items)
        return type(obj)(items)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _clone(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _leaves(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf of a nested output, in a fixed order."""
    if isinstance(obj, (list, tuple)):
        return [leaf for i, o in enumerate(obj) for leaf in _leaves(o, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, f"{path}[{k!r}]")]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [leaf for f in dataclasses.fields(obj) for leaf in _leaves(getattr(obj, f.name), f"{path}.{f.name}")]
    return [(path, obj)]


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """``[numel, itemsize]`` uint8 view of ``t``'s values in logical (row-major) order, on the CPU."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    try:
        raw = flat.view(torch.uint8)
    except RuntimeError:  # a dtype torch cannot reinterpret: compare its value in float64 bits
        raw = flat.to(torch.float64).view(torch.uint8)
    return raw.reshape(flat.numel(), -1).cpu()


def _value(t: torch.Tensor, flat: int) -> Any:
    try:
        return t.detach().reshape(-1)[flat].item()
    except (RuntimeError, TypeError):  # sub-byte or exotic dtypes: the bytes say it all
        return "?"


def _compare(where: str, first: torch.Tensor, other: torch.Tensor, run: int) -> None:
    head = f"deterministic_check: output {where or '0'} differs between run 0 and run {run}"
    if first.dtype != other.dtype or first.shape != other.shape:
        raise AssertionError(f"{head}: {first.dtype} {list(first.shape)} vs {other.dtype} {list(other.shape)}")
    if first.numel() == 0:
        return
    a, b = _as_bytes(first), _as_bytes(other)
    diff = (a != b).any(dim=1)
    n_diff = int(diff.sum())
    if n_diff == 0:
        return
    flat = int(diff.nonzero()[0, 0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), first.shape)) if first.dim() else ()
    va, vb = _value(first, flat), _value(other, flat)
    raise AssertionError(
        f"{head} ({first.dtype}, shape {list(first.shape)}): first differing element at index {index}: "
        f"{va!r} (bytes {a[flat].tolist()}) vs {vb!r} (bytes {b[flat].tolist()}); "
        f"{n_diff} of {first.numel()} elements differ")


def deterministic_check(fn: Callable[..., Any], *args: Any, runs: int = 2, seed: int | None = None,
                        **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` ``runs`` times and assert every output is bit-identical.

    Args:
        fn: the op or kernel launcher under test. Its outputs may be a tensor or any nesting of
            tuples, lists, dicts and dataclasses of tensors and plain values (compared with ``==``).
            To check a backward pass, let ``fn`` run forward and backward and return the gradients.
        *args, **kwargs: inputs; every run gets fresh clones of the tensors in them (nested in
            tuples, lists, dicts and dataclasses such as ``GemmArgs``), so an op that writes into
            an input (``out=``, accumulate) starts from the same values each time.
        runs: how many runs (>= 2); all are compared with run 0.
        seed: when given, ``torch.manual_seed(seed)`` before each run, for ops that draw random
            numbers on purpose (stochastic rounding). ``None`` (default) leaves the RNG alone, so
            any use of the global RNG shows up as a difference.

    Tensors are compared by their raw bytes (``.view(torch.uint8)``): equal values with different
    bit patterns (``-0.0`` and ``0.0``, NaNs with different payloads) count as different; dtype and
    shape must match too. Strides are not compared.

    Returns:
        The outputs of run 0 (so a test can also check them against a float64 reference).

    Raises:
        AssertionError: naming the output (its index path, e.g. ``[1]``), its dtype and shape, the
            first differing element's index and both values, and how many elements differ.
        ValueError: ``runs`` < 2.
    """
    if not isinstance(runs, int) or runs < 2:
        raise ValueError(f"deterministic_check: runs must be an int >= 2, got {runs!r}")
    results = []
    for _ in range(runs):
        if seed is not None:
            torch.manual_seed(seed)
        results.append(fn(*_clone(args), **_clone(kwargs)))
    for run, result in enumerate(results[1:], start=1):
        assert_same_outputs(results[0], result, run)
    return results[0]


def clone_inputs(obj: Any) -> Any:
    """A copy of ``obj`` with every tensor in it cloned (tuples, lists, dicts and dataclasses such as a
    primitive's argument object are walked; ``requires_grad`` is kept): what each run of
    :func:`deterministic_check` gets."""
    return _clone(obj)


def assert_same_outputs(first: Any, other: Any, run: int = 1) -> None:
    """Assert that ``other`` (the result of run ``run``) is bit-identical to ``first`` (run 0), as
    :func:`deterministic_check` compares its runs: the same nesting, tensors with the same dtype,
    shape and bytes, other leaves equal."""
    lhs, rhs = _leaves(first), _leaves(other)
    if [p for p, _ in lhs] != [p for p, _ in rhs]:
        raise AssertionError(f"deterministic_check: run {run} returned a different output structure "
                             f"than run 0: {[p for p, _ in rhs]} vs {[p for p, _ in lhs]}")
    for (where, a), (_, b) in zip(lhs, rhs, strict=True):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
                raise AssertionError(f"deterministic_check: output {where or '0'} is a tensor in one "
                                     f"run and {type(a if not isinstance(a, torch.Tensor) else b).__name__} "
                                     f"in run {run}")
            _compare(where, a, b, run)
        elif a != b:
            raise AssertionError(f"deterministic_check: output {where or '0'} differs between run 0 "
                                 f"and run {run}: {a!r} vs {b!r}")
