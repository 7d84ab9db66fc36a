"""Running a :class:`~turbo_core.testing.graph_cases.GraphCase` forward and backward in each way a
training job runs turbo inside a graph, and comparing every output and gradient with the eager call
on the same inputs (the eager results are checked against the reference by the conformance suite).

* :func:`check_compiled`: ``torch.compile(fullgraph=True)`` in a mode ("default", "reduce-overhead",
  "max-autotune"; the last two run CUDA-graph trees on a GPU, which refuse a call that leaves a
  tensor in the graph's pool that is not an output), three calls on new data (warm-up, recording,
  replay);
* :func:`check_graphed`: ``torch.cuda.make_graphed_callables``, two calls on new data;
* :func:`check_captured`: a hand-captured ``torch.cuda.CUDAGraph`` of the forward and the backward,
  warmed up on a side stream outside the capture, replayed twice with new data copied into the
  captured inputs.

The backward is that of ``sum(mean(out.float() ** 2))`` over the float outputs that require a gradient.
A mismatch names the case, the mode, the call and the output or gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from turbo_core.testing.graph_cases import GraphCase

__all__ = ["COMPILE_MODES", "check_captured", "check_compiled", "check_graphed", "run_eager"]

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
Result = tuple[list[torch.Tensor], list[torch.Tensor]]


def _flat(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flat(r)]
    if result is None:
        return []
    raise TypeError(f"a case returned {type(result).__name__}; expected tensors")


def _params(target: Callable) -> list[torch.nn.Parameter]:
    return list(target.parameters()) if isinstance(target, torch.nn.Module) else []


def _leaves(case: GraphCase, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(i in case.grads) for i, t in enumerate(inputs)]


def _loss(outs: list[torch.Tensor]) -> torch.Tensor | None:
    terms = [o.float().square().mean() for o in outs if o.requires_grad]
    return torch.stack(terms).sum() if terms else None


def _step(case: GraphCase, fn: Callable, target: Callable, leaves: list[torch.Tensor]) -> Result:
    """One forward + backward of ``fn`` (``target`` or a compiled/graphed form of it) on ``leaves``;
    copies of the outputs and of the input and parameter gradients."""
    for p in _params(target):
        p.grad = None
    outs = _flat(fn(*leaves))
    loss = _loss(outs)
    if loss is not None:
        loss.backward()
    grads = [leaves[i].grad for i in case.grads] + [p.grad for p in _params(target)]
    return [o.detach().clone() for o in outs], [g.detach().clone() if g is not None else None for g in grads]


def run_eager(case: GraphCase, target: Callable, inputs: Sequence[torch.Tensor]) -> Result:
    """Outputs and gradients of the eager call of ``target`` on copies of ``inputs``."""
    return _step(case, target, target, _leaves(case, inputs))


def _same(case: GraphCase, got: Result, want: Result, what: str) -> None:
    for kind, g_list, w_list in (("output", got[0], want[0]), ("gradient", got[1], want[1])):
        assert len(g_list) == len(w_list), f"{case.name} {what}: {len(g_list)} {kind}s, eager has {len(w_list)}"
        for i, (g, w) in enumerate(zip(g_list, w_list, strict=True)):
            label = f"{case.name} {what}: {kind} {i}"
            if w is None or g is None:
                assert g is None and w is None, f"{label}: one of the two is None"
                continue
            assert g.shape == w.shape and g.dtype == w.dtype, \
                f"{label}: {tuple(g.shape)} {g.dtype}, eager {tuple(w.shape)} {w.dtype}"
            if w.is_floating_point() and w.element_size() > 1:
                torch.testing.assert_close(g.float(), w.float(), rtol=case.tol, atol=case.tol,
                                           msg=lambda m, label=label: f"{label}: {m}")
            else:  # integers, booleans, FP8/FP4 bits: exactly
                assert torch.equal(g.view(torch.uint8) if w.element_size() == 1 else g,
                                   w.view(torch.uint8) if w.element_size() == 1 else w), f"{label}: bits differ"


def check_compiled(case: GraphCase, device: torch.device | str, mode: str, calls: int = 3) -> None:
    """``torch.compile(target, mode=mode, fullgraph=True)`` equals the eager call, forward and
    backward, on ``calls`` successive inputs."""
    device = torch.device(device)
    torch._dynamo.reset()
    target = case.build(device)
    compiled = torch.compile(target, mode=mode, fullgraph=True)
    for seed in range(calls):
        inputs = case.inputs(device, seed)
        got = _step(case, compiled, target, _leaves(case, inputs))
        _same(case, got, run_eager(case, target, inputs), f"under torch.compile(mode={mode!r}), call {seed}")
    torch._dynamo.reset()


def check_graphed(case: GraphCase, device: torch.device | str) -> None:
    """``torch.cuda.make_graphed_callables`` of the case equals the eager call on new data."""
    device = torch.device(device)
    target = case.build(device)
    # make_graphed_callables replaces a module's forward: the eager results come from a second build
    # (a case builds its modules from a fixed seed, so the parameters are equal).
    reference = case.build(device)
    graphed = torch.cuda.make_graphed_callables(target, tuple(_leaves(case, case.inputs(device, 0))))
    for seed in (1, 2):
        inputs = case.inputs(device, seed)
        got = _step(case, graphed, target, _leaves(case, inputs))
        _same(case, got, run_eager(case, reference, inputs), f"under make_graphed_callables, call {seed}")


def check_captured(case: GraphCase, device: torch.device | str) -> None:
    """A hand-captured CUDA graph of the forward and backward, replayed on new data copied into its
    inputs, equals the eager call on that data."""
    device = torch.device(device)
    target = case.build(device)
    params = _params(target)
    static = _leaves(case, case.inputs(device, 0))

    def step() -> list[torch.Tensor]:
        for t in (*static, *params):
            t.grad = None
        outs = _flat(target(*static))
        loss = _loss(outs)
        if loss is not None:
            loss.backward()
        return outs

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # outside the capture: selection, compilation, kept workspaces
        for _ in range(2):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    grads = [static[i].grad for i in case.grads] + [p.grad for p in params]  # written by every replay
    for seed in (1, 2):
        inputs = case.inputs(device, seed)
        with torch.no_grad():
            for s, new in zip(static, inputs, strict=True):
                s.copy_(new)
        graph.replay()
        torch.cuda.synchronize(device)
        got = ([o.detach().clone() for o in outs], [g.detach().clone() if g is not None else None for g in grads])
        _same(case, got, run_eager(case, target, inputs), f"in a hand-captured CUDA graph, replay {seed}")
