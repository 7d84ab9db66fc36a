"""Memory checks of a :class:`~turbo_core.testing.graph_cases.GraphCase`: repeated eager calls leave the
allocated device memory flat, and a call keeps no reference to its inputs.

* :func:`check_memory_flat`: ``calls`` eager forward + backward calls on the same inputs;
  ``torch.cuda.memory_allocated()`` after the first call (which fills the documented caches:
  docs/design-notes.md, "Allocations that outlive a call") must equal the value after the last. A
  leak of one small block a call grows it by hundreds of kilobytes over 1,000 calls.
* :func:`inputs_kept`: one forward + backward (or a forward without autograd) on fresh leaf tensors,
  then the outputs and the leaves dropped and a garbage collection: the inputs still alive.

The backward is that of ``sum(mean(out.float() ** 2))`` over the float outputs that require a gradient
(as :mod:`turbo_core.testing.graph_modes`).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Sequence

import torch

from turbo_core.testing.graph_cases import GraphCase

__all__ = ["check_memory_flat", "inputs_kept"]


def _flat(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flat(r)]
    return []


def _leaves(case: GraphCase, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(i in case.grads) for i, t in enumerate(inputs)]


def _step(case: GraphCase, target: Callable, leaves: list[torch.Tensor], grad: bool = True) -> None:
    """One call; with ``grad``, its backward too. Nothing of it is returned (the outputs die here)."""
    if not grad:
        with torch.no_grad():
            assert _flat(target(*leaves)), f"{case.name}: no output"
        return
    outs = _flat(target(*leaves))
    terms = [o.float().square().mean() for o in outs if o.requires_grad]
    assert terms or not case.grads, f"{case.name}: no output requires a gradient"
    if terms:
        torch.stack(terms).sum().backward()
    for i in case.grads:
        assert leaves[i].grad is not None, f"{case.name}: input {i} got no gradient"


def check_memory_flat(case: GraphCase, device: torch.device | str, calls: int = 1000) -> None:
    """``calls`` eager forward + backward calls of ``case`` on one set of inputs (gradients of the
    inputs and of a module's parameters reset before each call) leave
    ``torch.cuda.memory_allocated(device)`` where the first call left it. ``AssertionError`` naming the
    case, the growth and the allocated bytes at ten points along the way."""
    device = torch.device(device)
    if calls < 2:
        raise ValueError(f"calls: expected >= 2, got {calls}")
    target = case.build(device)
    params = list(target.parameters()) if isinstance(target, torch.nn.Module) else []
    leaves = _leaves(case, case.inputs(device, 0))

    def call() -> None:
        for t in (*leaves, *params):
            t.grad = None
        _step(case, target, leaves)

    call()
    torch.cuda.synchronize(device)
    first = torch.cuda.memory_allocated(device)
    every = max(1, (calls - 1) // 10)
    seen = []
    for i in range(1, calls):
        call()
        if i % every == 0 or i == calls - 1:
            torch.cuda.synchronize(device)
            seen.append((i + 1, torch.cuda.memory_allocated(device)))
    last = seen[-1][1]
    assert last == first, (f"{case.name}: allocated memory grew by {last - first} bytes over {calls} eager calls "
                           f"(after call 1: {first}; after call n: {', '.join(f'{n}: {b}' for n, b in seen)})")


def inputs_kept(case: GraphCase, device: torch.device | str, *, grad: bool = True) -> list[str]:
    """The inputs of one call of ``case`` (forward and backward, or with ``grad=False`` a forward under
    ``torch.no_grad``) still alive once the call's outputs and the inputs themselves are dropped and
    garbage is collected: ``["input 0 ((24, 64) torch.float32)", ...]``, empty when none is kept. The
    module a case builds (and its parameters) stays alive: it is not an input."""
    device = torch.device(device)
    target = case.build(device)
    leaves = _leaves(case, case.inputs(device, 0))
    refs = [(i, weakref.ref(t)) for i, t in enumerate(leaves)]
    _step(case, target, leaves, grad)
    del leaves
    gc.collect()
    return [f"input {i} ({tuple(r().shape)} {r().dtype})" for i, r in refs if r() is not None]
