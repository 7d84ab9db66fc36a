"""Cross-entropy loss over a language model's logits (``turbo bench cross-entropy``), bf16, forward and
forward + backward.

Cases: logits ``[T, V]`` for the vocabularies of Llama-3.1-8B (128256), Qwen3 (151936) and Mixtral-8x7B
(32000) at :data:`DEFAULT_TOKENS` tokens (``--tokens``: that count), targets drawn uniformly from the
vocabulary (no row ignored), reduction ``mean``, no label smoothing. Two passes: ``fwd`` (the loss with
autograd recording, as in training) and ``fwd+bwd`` (the loss, then the gradient of the logits).

Providers: ``torch``, ``F.cross_entropy(logits.float().reshape(-1, V), target.reshape(-1))`` eagerly, as
a training loop writes it (an fp32 copy of the logits, the log-softmax and their gradients
materialized); ``torch.compile`` of that function (GPUs only: on the CPU its build would dominate a
``--quick`` run); ``turbo:<B>`` for every available backend with a ``cross_entropy_fwd`` kernel:
``turbo_core.ops.cross_entropy`` with both primitives pinned to ``B`` (the reference TORCH only with
``--include-reference``); ``liger``: liger-kernel's ``LigerCrossEntropyLoss`` where importable (else a
declined row with the reason). liger computes the gradient in its forward and writes it over the
logits (its forward row includes that work); it gets a private copy of the logits, made outside the
timed region, so the values it runs on after its first call are its own gradients (the work does not
depend on them; its accuracy is checked on the first call).

Timing: the wall clock per call (:func:`turbo_core.timing.measure_batched`, ``clock="wall"``, one call
a batch): host cost and any host syncs included, the time an eager training step pays. Scored in GB/s
of the logits' bytes that a fused loss moves: ``fwd`` reads them once (``2 T V`` bytes in bf16),
``fwd+bwd`` reads them twice and writes their gradient once (``6 T V``); the same count for every
provider, so GB/s is a speed (eager torch moves several times that). ``copy_fraction``: of the
device-to-device copy bandwidth measured in the same process. ``peak_bytes``: the largest allocation
above what was allocated before a call (the inputs), over one call after a warm-up call (GPUs only:
the gradient itself, ``2 T V`` bytes, is part of it for ``fwd+bwd``). Accuracy: ``max_rel_err``, the
largest ``max|out - ref| / max|ref|`` over the loss and (``fwd+bwd``) the gradient, against float64
math on the same device in row slices.

Rows: the suite's keys plus ``op = "cross_entropy"``, ``vocab``, ``timing = "wall clock"``, ``role``,
``baseline = "torch"``, ``calls``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.bench.runner import available_backends
from turbo_core.bench.suites.norm import compile_skip_reason, copy_bandwidth, liger_attr
from turbo_core.dispatch import decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.loss import CrossEntropyFwdArgs
from turbo_core.ops import cross_entropy
from turbo_core.platform import platform_of

__all__ = ["PASSES", "VOCAB", "CeCase", "cases", "logits_bytes", "print_table", "reference", "run"]

#: Vocabulary sizes (Hugging Face configs).
VOCAB = {"llama3.1-8b": 128256, "qwen3": 151936, "mixtral-8x7b": 32000}
QUICK_VOCAB = {"tiny": 1000}
DEFAULT_TOKENS = 8192
QUICK_TOKENS = 32
PASSES = ("fwd", "fwd+bwd")
WALL = "wall clock"
DTYPE = torch.bfloat16
_PRIMS = ("cross_entropy_fwd", "cross_entropy_bwd")
_SLICE = 2**25


@dataclass(frozen=True)
class CeCase:
    model: str
    vocab: int
    tokens: int
    pass_: str

    @property
    def label(self) -> str:
        return f"cross_entropy/{self.pass_} {self.model} {self.tokens}x{self.vocab}"


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[CeCase]:
    table = QUICK_VOCAB if quick else VOCAB
    count = tokens or (QUICK_TOKENS if quick else DEFAULT_TOKENS)
    return [CeCase(name, vocab, count, p) for name, vocab in table.items() if not models or name in models
            for p in PASSES]


def logits_bytes(case: CeCase) -> int:
    """Bytes a fused loss moves: the bf16 logits read once (``fwd``), or read twice and their gradient
    written once (``fwd+bwd``)."""
    once = case.tokens * case.vocab * torch.empty((), dtype=DTYPE).element_size()
    return once if case.pass_ == "fwd" else 3 * once


def make_inputs(case: CeCase, device: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits [T, V] bf16, target [T] int64)``; logits of a trained model's spread (std 2)."""
    logits = (2.0 * torch.randn(case.tokens, case.vocab, device=device, generator=gen)).to(DTYPE)
    target = torch.randint(0, case.vocab, (case.tokens,), device=device, generator=gen)
    return logits, target


def torch_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss as a training loop writes it: fp32 logits, ``F.cross_entropy``, mean."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))


def _turbo(backend: str) -> Callable:
    def fn(logits, target):
        with use_backend(backend, primitives=_PRIMS):
            return cross_entropy(logits, target)

    return fn


def _liger():
    """``(loss function, None)`` over liger-kernel's ``LigerCrossEntropyLoss``, or ``(None, why not)``."""
    cls, info = liger_attr("liger_kernel.transformers", "LigerCrossEntropyLoss")
    if cls is None:
        return None, info
    return cls(), info


def _step(fn: Callable, logits: torch.Tensor, target: torch.Tensor, backward: bool) -> Callable[[], list]:
    """A zero-argument call: the loss of ``fn`` on a leaf sharing ``logits``' storage (and with
    ``backward`` the leaf's gradient)."""
    leaf = logits.detach().requires_grad_()

    def call() -> list[torch.Tensor]:
        loss = fn(leaf, target)
        if not backward:
            return [loss.detach()]
        return [loss.detach(), torch.autograd.grad(loss, leaf)[0]]

    return call


def reference(logits: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor | float | None = None, *,
              ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """float64 ``(loss [T], lse [T], dlogits [T, V] or None)`` of ``logits [T, V]`` against ``target [T]``
    (every target a class or ``ignore_index``): ``loss = lse - x[t]``; with ``dloss`` (``[T]`` or one
    value for every row) ``dlogits = dloss * (softmax(x) - onehot(t))``; ignored rows 0 in all three."""
    x = logits.double()
    keep = target != ignore_index
    t = torch.where(keep, target, 0)
    lse = torch.logsumexp(x, 1)
    loss = torch.where(keep, lse - x.gather(1, t[:, None])[:, 0], 0.0)
    grad = None
    if dloss is not None:
        grad = torch.exp(x - lse[:, None])
        grad[torch.arange(grad.shape[0], device=grad.device), t] -= 1.0
        d = dloss.double()[:, None] if isinstance(dloss, torch.Tensor) else dloss
        grad = torch.where(keep[:, None], grad * d, 0.0)
    return loss, torch.where(keep, lse, 0.0), grad


def _error(outs: list[torch.Tensor], logits: torch.Tensor, target: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|`` over the mean loss and its gradient, :func:`reference` in row slices."""
    rows, classes = logits.shape
    step = max(1, _SLICE // classes)
    loss_parts, grad_err, grad_scale = [], 0.0, 0.0
    for start in range(0, rows, step):
        sl = slice(start, start + step)
        loss, _, ref = reference(logits[sl], target[sl], 1.0 / rows if len(outs) > 1 else None)
        loss_parts.append(loss)
        if ref is not None:
            grad_scale = max(grad_scale, ref.abs().max().item())
            grad_err = max(grad_err, (outs[1][sl].double() - ref).abs().max().item())
    loss_ref = torch.cat(loss_parts).mean() if rows else torch.tensor(float("nan"), dtype=torch.float64)
    err = abs(outs[0].double().item() - loss_ref.item()) / (abs(loss_ref.item()) or 1.0)
    if len(outs) > 1 and rows:
        err = max(err, grad_err / (grad_scale or 1.0))
    return err


def _peak(call: Callable, device: str) -> tuple[list, int | None]:
    """``call()``'s outputs and, on a GPU, the largest allocation above what was allocated before it."""
    if device != "cuda":
        return call(), None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outs = call()
    torch.cuda.synchronize()
    return outs, torch.cuda.max_memory_allocated() - base


def _measure(fn: Callable, logits: torch.Tensor, target: torch.Tensor, backward: bool, *, private: bool, device: str,
             warmup: int, iters: int) -> tuple[timing.Timing, int | None, float]:
    """``(wall-clock timing, peak bytes, max_rel_err)`` of one provider: a warm-up call (compilation,
    autotuning, workspaces), a call measured for memory and checked against float64, then the timed
    calls. ``private``: every step gets its own copy of the logits (a provider that writes over them)."""
    def own() -> torch.Tensor:
        return logits.clone() if private else logits

    _step(fn, own(), target, backward)()
    outs, peak = _peak(_step(fn, own(), target, backward), device)
    err = _error(outs, logits, target)
    del outs
    call = _step(fn, own(), target, backward)
    return timing.measure_batched(call, device=device, warmup=warmup, iters=iters, calls=1, clock="wall"), peak, err


def _row(case: CeCase, name: str, role: str) -> dict:
    return {"suite": "cross-entropy", "case": case.label, "op": "cross_entropy", "model": case.model,
            "pass": case.pass_, "tokens": case.tokens, "vocab": case.vocab, "dtype": "bfloat16",
            "bytes": logits_bytes(case), "timing": WALL, "provider": name, "role": role, "baseline": "torch",
            "calls": 1}


def _providers(case: CeCase, backends: list[str], no_compile: str | None, inputs) -> list[tuple]:
    """``(name, role, loss function or None, status or None, note or None)`` of every provider."""
    table: list[tuple] = [("torch", "baseline", torch_loss, None, None),
                          ("torch.compile", "reference", None, f"skipped: {no_compile}" if no_compile else None,
                           None)]
    logits, target = inputs
    for b in backends:
        reason = decline_reason(get_primitive("cross_entropy_fwd"), b, CrossEntropyFwdArgs(logits, target),
                                platform_of(logits.device))
        table.append((f"turbo:{b}", "turbo", _turbo(b), f"declined: {reason}" if reason else None, None))
    liger, info = _liger()
    note = (f"liger-kernel {info}: LigerCrossEntropyLoss(); the gradient is computed in the forward and written "
            "over (a private copy of) the logits") if liger is not None else None
    table.append(("liger", "reference", liger, None if liger is not None else f"declined: {info}", note))
    return table


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every provider on every case (module docstring): rows with ``status``, and when ok ``median_ms`` /
    ``p10_ms`` / ``p90_ms`` (wall clock per call), ``gbps``, ``copy_gbps``, ``copy_fraction``, ``ratio``
    (torch's time / this one), ``peak_bytes`` (GPUs) and ``max_rel_err``."""
    all_cases = cases(tokens, quick, models)
    no_compile = compile_skip_reason(device)
    backends = available_backends("cross_entropy_fwd", include_reference=include_reference)
    copy_gbps = copy_bandwidth(device)
    gen = torch.Generator(device=device).manual_seed(0)
    task = progress.add_task("cross-entropy", total=len(all_cases)) if progress and all_cases else None
    rows: list[dict] = []
    for case in all_cases:
        logits, target = make_inputs(case, device, gen)
        backward = case.pass_ != "fwd"
        table = _providers(case, backends, no_compile, (logits, target))
        if providers:
            table = [p for p in table if p[0] in providers]
        base_ms = None
        for name, role, fn, status, note in table:
            row = _row(case, name, role) | ({"note": note} if note else {})
            if status is not None:
                rows.append({**row, "status": status})
                continue
            try:
                if name == "torch.compile":
                    torch._dynamo.reset()
                    fn = torch.compile(torch_loss)
                t, peak, err = _measure(fn, logits, target, backward, private=name == "liger", device=device,
                                        warmup=warmup, iters=iters)
            except Exception as exc:  # one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                continue
            if name == "torch":
                base_ms = t.median_ms
            gbps = row["bytes"] / t.median_ms / 1e6
            rows.append({**row, "status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "gbps": gbps, "copy_gbps": copy_gbps, "copy_fraction": gbps / copy_gbps,
                         "ratio": base_ms / t.median_ms if base_ms else None, "peak_bytes": peak,
                         "max_rel_err": err})
        del logits, target
        if progress:
            progress.advance(task)
    return rows


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    peak = f" {r['peak_bytes'] / 2**30:.2f} GiB" if r.get("peak_bytes") is not None else ""
    return f"{r['gbps']:.4g}{ratio}{peak} [{r['max_rel_err']:.1e}]"


def print_table(rows: list[dict], console) -> None:
    """Per case: GB/s, the ratio to eager torch, the peak memory above the inputs, the error."""
    title = ("turbo bench cross-entropy: GB/s of the logits (ratio to torch) peak above inputs [max rel err]; "
             "wall clock")
    print_tables(rows, console, title=title, cell=_cell,
                 legend="GB/s: the bytes a fused loss moves (fwd 2 T V, fwd+bwd 6 T V) / the wall clock per call")
