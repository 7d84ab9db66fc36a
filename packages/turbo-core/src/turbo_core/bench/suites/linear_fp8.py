"""Training steps of one linear layer (``turbo bench linear-fp8``): turbo's ``Float8Linear`` per
recipe beside bf16 ``torch.nn.Linear`` (the baseline), turbo's bf16 ``Linear``, and torchao's float8
training (``torchao.float8.convert_to_float8_training``), eager and under ``torch.compile``, where
torchao is importable.

A step is what a training loop runs for the layer: forward, backward from a fixed output gradient,
and an SGD step on the weight (``torch.optim.SGD``, lr 1e-6: every provider updates its weight in
place, so FP8 layers quantize a changed weight each step). Clock: the wall clock per step
(:func:`turbo_core.timing.measure_batched`, ``clock="wall"``), host cost included, CUDA-synchronized
once a batch of :data:`CALLS` steps. ``tflops`` counts the step's three GEMMs, ``6 * T * K * N``.

Cases (``tokens x in -> out``, bf16 activations and weights, no bias): :data:`SHAPES`, from the
Llama-3 / Mixtral / DeepSeek-V3 projections; ``--tokens`` replaces the token counts; ``--quick``:
:data:`QUICK_SHAPES` on the CPU (the TORCH backend).

Rows: ``ratio`` is nn.Linear's step time / this step time (above 1: faster than bf16);
``max_rel_err`` compares the forward output with nn.Linear's on the same inputs and weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.modules import Float8Linear, Linear

__all__ = ["CALLS", "QUICK_SHAPES", "SHAPES", "print_table", "run"]

#: ``(tokens, in_features, out_features)``.
SHAPES = ((2048, 4096, 6144), (4096, 4096, 4096), (8192, 4096, 14336), (8192, 8192, 28672), (16384, 7168, 2048))
QUICK_SHAPES = ((16, 32, 48),)
#: Steps per timed batch.
CALLS = 5
_RECIPES = {"tensorwise": ScalingGranularity.TENSORWISE, "rowwise": ScalingGranularity.ROWWISE,
            "blockwise": ScalingGranularity.BLOCKWISE}


def _turbo_fp8(name: str) -> Callable[[torch.nn.Linear], torch.nn.Module]:
    gran = _RECIPES[name]
    config = Float8QuantConfig(granularity=gran, block_size=128 if gran == ScalingGranularity.BLOCKWISE else None)
    return lambda ref: Float8Linear.from_float(ref, config, inplace=False)


def _turbo_bf16(ref: torch.nn.Linear) -> torch.nn.Module:
    mod = Linear(ref.in_features, ref.out_features, bias=False, device=ref.weight.device, dtype=ref.weight.dtype)
    mod.load_state_dict(ref.state_dict())
    return mod


def _torchao(recipe: str, compiled: bool) -> Callable[[torch.nn.Linear], torch.nn.Module]:
    def build(ref: torch.nn.Linear) -> torch.nn.Module:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        model = torch.nn.Sequential(_copy(ref))
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
        if not compiled:
            return model
        torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, no dynamic-shape graph
        return torch.compile(model)

    return build


def _copy(ref: torch.nn.Linear) -> torch.nn.Module:
    mod = torch.nn.Linear(ref.in_features, ref.out_features, bias=False, device=ref.weight.device,
                          dtype=ref.weight.dtype)
    mod.load_state_dict(ref.state_dict())
    return mod


#: ``provider -> (role, builder from the reference nn.Linear)``; torchao rows need it importable.
PROVIDERS: dict[str, tuple[str, Callable]] = {
    "torch": ("baseline", _copy),
    "turbo:bf16": ("turbo", _turbo_bf16),
    **{f"turbo:fp8-{r}": ("turbo", _turbo_fp8(r)) for r in _RECIPES},
    **{f"torchao:fp8-{r}": ("peer", _torchao(r, False)) for r in ("tensorwise", "rowwise")},
    **{f"torchao:fp8-{r}+compile": ("peer", _torchao(r, True)) for r in ("tensorwise", "rowwise")},
}


def _step(mod: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor) -> tuple[Callable[[], None], Callable]:
    opt = torch.optim.SGD(mod.parameters(), lr=1e-6)

    def step():
        mod(x).backward(dy)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def forward():
        with torch.no_grad():
            return mod(x)

    return step, forward


def run(*, quick: bool, tokens: list[int] | int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every shape x provider (``models`` and ``include_reference`` are unused)."""
    shapes = QUICK_SHAPES if quick else SHAPES
    if tokens:
        counts = tokens if isinstance(tokens, list) else [tokens]
        shapes = tuple((t, k, n) for t in counts for _, k, n in dict.fromkeys((0, k, n) for _, k, n in shapes))
    names = [p for p in PROVIDERS if not providers or p in providers]
    task = progress.add_task("linear-fp8", total=len(shapes) * len(names)) if progress else None
    rows: list[dict] = []
    for t, k, n in shapes:
        gen = torch.Generator(device=device).manual_seed(0)
        ref = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        with torch.no_grad():
            ref.weight.copy_(torch.randn(n, k, device=device, generator=gen) * k**-0.5)
        x = torch.randn(t, k, device=device, generator=gen).to(torch.bfloat16).requires_grad_(True)
        dy = torch.randn(t, n, device=device, generator=gen).to(torch.bfloat16)
        base = {"suite": "linear-fp8", "case": f"{t}x{k}->{n}", "model": "linear", "m": t, "k": k, "n": n,
                "pass": "step", "dtype": "bfloat16", "baseline": "torch", "calls": CALLS, "timing": "wall clock"}
        want, base_ms = None, None
        for name in names:
            role, build = PROVIDERS[name]
            row = {**base, "provider": name, "role": role}
            try:
                mod = build(ref)
                step, forward = _step(mod, x, dy)
                out = forward()
                t_ = timing.measure_batched(step, device=device, warmup=warmup, iters=iters, calls=CALLS,
                                            clock="wall")
            except Exception as exc:  # noqa: BLE001 - a provider that cannot run says why; the suite goes on
                status = "skipped" if isinstance(exc, ImportError) else "error"
                rows.append({**row, "status": f"{status}: {type(exc).__name__}: {str(exc)[:300]}"})
                if progress:
                    progress.advance(task)
                continue
            if name == "torch":
                want, base_ms = out, t_.median_ms
            err = None
            if want is not None:
                scale = want.double().abs().max().item() or 1.0
                err = (out.double() - want.double()).abs().max().item() / scale
            rows.append({**row, "status": "ok", "median_ms": t_.median_ms, "p10_ms": t_.p10_ms, "p90_ms": t_.p90_ms,
                         "tflops": 6 * t * k * n / (t_.median_ms * 1e-3) / 1e12,
                         "ratio": base_ms / t_.median_ms if base_ms else None, "max_rel_err": err})
            del mod, step, forward
            if progress:
                progress.advance(task)
        if device != "cpu":
            torch.cuda.empty_cache()
    return rows


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    return f"{r['median_ms']:.3f} ms{ratio}"


def print_table(rows: list[dict], console) -> None:
    """Per shape: ms per step (wall clock) and the ratio to bf16 nn.Linear (above 1: faster)."""
    print_tables(rows, console, title="turbo bench linear-fp8: ms per training step (ratio to bf16 nn.Linear)",
                 cell=_cell)
