"""The demo's training loop, per-op statistics and profiled op times."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from turbo_core.demo.data import MarkovData
from turbo_core.demo.model import DemoConfig, TurboDecoder, fp8_recipe
from turbo_core.dispatch import dispatcher, stats
from turbo_core.profiling.session import profile_call
from turbo_core.profiling.table import hot_rows

__all__ = ["DemoResult", "op_table", "profile_step", "train"]


@dataclass
class DemoResult:
    """What :func:`train` returns: per-step losses and milliseconds, dispatch statistics
    ``{(primitive, backend): calls}`` over the whole run, and profiled op times
    ``{(primitive, backend): (calls, total_us)}`` of one extra step (empty when not profiled)."""

    losses: list[float]
    step_ms: list[float]
    calls: dict[tuple[str, str], int]
    op_us: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    floor: float = 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model, opt, inputs, targets) -> torch.Tensor:
    logits = model(inputs)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 or wider
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def profile_step(fn: Callable[[], object]) -> dict[tuple[str, str], tuple[int, float]]:
    """``{(primitive, backend): (calls, total_us)}`` of the turbo calls in one ``fn()`` under
    ``torch.profiler``: device-kernel time on a GPU, the ``turbo::`` ranges' inclusive CPU time
    otherwise."""
    prof, _ = profile_call(fn)
    rows = hot_rows(prof.events())
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for r in rows:
        if r.op is None or (r.kind == "cpu" and not r.name.startswith("turbo::")):
            continue
        calls, us = out.get((r.op, r.backend), (0, 0.0))
        out[(r.op, r.backend)] = (calls + r.calls, us + r.total_us)
    return out


def train(cfg: DemoConfig | None = None, *, steps: int = 30, batch: int = 8, seq: int = 64, lr: float = 1e-2,
          fp8: str = "none", device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, profile: bool = False, model: torch.nn.Module | None = None,
          log: Callable[[int, float, float], None] | None = None) -> DemoResult:
    """Train the demo decoder (``cfg``; ``None``: the default :class:`DemoConfig`) with AdamW
    (weight decay 0.01) on Markov-chain batches.

    ``model`` replaces the turbo decoder (the parity test passes its plain-PyTorch twin); it must
    map int64 ``[batch, seq]`` tokens to ``[batch, seq, vocab]`` logits. The data and the initial
    weights depend on ``seed`` only. The loss is cross-entropy in fp32 (or the logits' dtype if wider). ``log(step, loss, ms)``
    is called after each step (1-based). Dispatch statistics are reset at the start (the
    selection settings are kept).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected an int >= 1, got {steps!r}")
    cfg = DemoConfig() if cfg is None else cfg
    device = torch.device(device)
    torch.manual_seed(seed)
    if model is None:
        model = TurboDecoder(cfg, fp8_recipe(fp8))
    model = model.to(device=device, dtype=dtype)
    data = MarkovData(cfg.vocab, seed=seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    dispatcher.clear_warnings()  # resets the call statistics
    losses, step_ms = [], []
    for i in range(steps):
        inputs, targets = (t.to(device) for t in data.batch(batch, seq))
        _sync(device)
        t0 = time.perf_counter()
        loss = _step(model, opt, inputs, targets)
        value = float(loss.detach())  # syncs
        ms = 1e3 * (time.perf_counter() - t0)
        losses.append(value)
        step_ms.append(ms)
        if log is not None:
            log(i + 1, value, ms)
    calls: dict[tuple[str, str], int] = {}
    for (prim, backend, _how), n in stats().items():
        calls[(prim, backend)] = calls.get((prim, backend), 0) + n
    result = DemoResult(losses, step_ms, calls, floor=data.entropy())
    if profile:
        inputs, targets = (t.to(device) for t in data.batch(batch, seq))
        result.op_us = profile_step(lambda: _step(model, opt, inputs, targets))
    return result


def op_table(result: DemoResult) -> str:
    """Plain-text table: primitive, backend, calls over the run, and (when profiled) calls and
    time per call in the profiled step."""
    head = ["primitive", "backend", "calls", "profiled calls", "time/call"]
    body = []
    for (prim, backend), n in sorted(result.calls.items()):
        pc, us = result.op_us.get((prim, backend), (0, 0.0))
        per = f"{us / pc:.1f} us" if pc else "-"
        body.append([prim, backend, str(n), str(pc) if pc else "-", per])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
