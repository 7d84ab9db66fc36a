"""Whole training steps of real-width models (``turbo bench train``): one step is the forward, the
cross-entropy loss, the backward and an AdamW step, of the same model (same init, same data) built
by each provider in turn.

Gradient accumulation (``--micro-batches N``, default 1; the loop of :mod:`turbo_core.bench.train_loop`):
a step is then N forward + loss + backward passes over N batches, each loss divided by N, and one
AdamW step. The turbo FP8 providers' layers keep their weights' FP8 copies in their weight caches
(``turbo_core.ops.weight_cache``), so a weight is quantized once per optimizer step, not once per
micro-batch; torchao's float8 training casts its weights in every forward. ``tokens`` stays the
tokens of one micro-batch and ``tokens_per_s`` counts all N.

Models (:mod:`turbo_core.bench.train_models`, the source of every number there): ``llama3.1-8b``
(2 layers, sequence 8192), ``mixtral-8x7b`` (2 layers, sequence 4096), ``deepseek-v3-ep8`` (one MoE
layer as one rank of 8-way expert parallelism holds it, 4096 tokens) and ``qwen3-30b-a3b`` (2
layers, sequence 4096), batch 1. ``--tokens N`` sets the sequence; ``--models`` picks models;
``--quick`` runs a tiny version of each on the CPU through the reference backend.

Providers (:data:`PROVIDERS`), every one from the same bf16 weights
(:class:`turbo_core.demo.TurboDecoder`'s init under a fixed seed, copied in by state_dict):

* ``torch``: :class:`turbo_core.demo.PlainDecoder`, eager (``nn.Linear``, SDPA, a loop over the
  experts after one sort per layer);
* ``torch.compile``: the same model under ``torch.compile`` (default mode; the expert loop runs
  eagerly, see :func:`turbo_core.demo.plain.expert_loop`) — the baseline of ``ratio``;
* ``turbo:bf16``: :class:`turbo_core.demo.TurboDecoder` (turbo modules and ops, the dispatcher's
  default backends) — the denominator of ``bf16_ratio``;
* ``turbo:fp8-tensorwise`` / ``-rowwise`` / ``-blockwise``: the turbo decoder with that E4M3 recipe
  (:func:`turbo_core.demo.fp8_recipe`) on every projection and expert;
* ``turbo:fp8-tensorwise+bf16-wgrad`` / ``turbo:fp8-rowwise+bf16-wgrad``: the same, with the experts'
  weight gradients in bf16 (``GroupedLinear(wgrad_fp8=False)``: forward and input gradients in FP8);
  skipped on a model without experts, where it is the plain recipe;
* ``torchao:fp8-tensorwise`` / ``-rowwise``, eager and ``+compile``: the plain model after
  ``torchao.float8.convert_to_float8_training`` (its ``nn.Linear`` layers whose sizes are multiples
  of 16, the routers excepted; the experts' weights stay bf16), where torchao is importable.

Precision: bf16 parameters, gradients and AdamW states (``torch.optim.AdamW``, lr
:data:`LR`, weight decay :data:`WEIGHT_DECAY`, ``fused=True`` on a GPU); the router logits and the
loss in fp32. The loss is the mean cross entropy over every token: the turbo providers compute it
with turbo's fused ``cross_entropy`` (fp32 math on the bf16 logits, read once forward and once
backward), the others with ``F.cross_entropy`` on the logits cast to fp32, as PyTorch users write it
(``torch.compile`` fuses that cast and the log-softmax itself).

Clock: the wall clock per step (:func:`turbo_core.timing.measure_batched`, ``clock="wall"``, one
step a batch, CUDA-synchronized), host cost and the MoE layers' host syncs included; ``--warmup``
steps first. Peak memory: ``torch.cuda.max_memory_allocated`` over the provider's steps, after
``reset_peak_memory_stats`` once its model is built (weights, gradients, optimizer states,
activations); None on the CPU.

Loss: every provider also runs :data:`LOSS_STEPS` steps (:data:`QUICK_LOSS_STEPS` with
``--quick``; N micro-batches each) from the init on the same fixed sequence of batches
(:class:`turbo_core.demo.data.SparseMarkovData`), before its timed steps and whatever ``--iters``
says, then the loss of a held-out batch (``init_loss``: that batch's loss before the first step, so
a row shows whether the steps lowered it); ``torch_loss`` is plain PyTorch's (always run, timed only
when ``torch`` is among the providers) and ``loss_diff`` the difference.

Rows: the model's fields (``model``, ``batch``, ``seq``, ``tokens``, ``hidden``, ``layers``,
``heads``, ``kv_heads``, ``head_dim``, ``experts``, ``local_experts``, ``topk``, ``params``),
``micro_batches`` (and ``accumulation`` when above 1),
``provider``, ``role``, ``status`` (``ok``, ``skipped: ...``, ``error: ...``: a provider that
fails, out of memory or in its compiler, says so and the suite goes on), ``median_ms``, ``p10_ms``,
``p90_ms``, ``tokens_per_s``, ``peak_bytes``, ``init_loss``, ``loss``, ``torch_loss``, ``loss_diff``,
``loss_steps``, ``ratio`` (``torch.compile``'s ms / this ms; above 1: faster), ``bf16_ratio``
(``turbo:bf16``'s ms / this ms), and ``vs`` (the providers the performance page compares a turbo
row with: ``torch.compile``, ``turbo:bf16`` and, for an FP8 recipe, torchao's compiled one).
"""

from __future__ import annotations

import gc
import importlib.util
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from rich.table import Table

from turbo_core.bench.train_loop import (
    accumulation_fields,
    check_micro_batches,
    check_profile_top,
    loss_run_and_time,
    print_profiles,
    step_fn,
)
from turbo_core.bench.train_models import MODELS, QUICK_MODELS, TrainModel
from turbo_core.demo.data import SparseMarkovData
from turbo_core.demo.model import TurboDecoder, fp8_recipe
from turbo_core.demo.plain import PlainDecoder
from turbo_core.modules import GroupedLinear
from turbo_core.ops import cross_entropy

__all__ = ["LOSS_STEPS", "LR", "OK_FIELDS", "PROVIDERS", "QUICK_LOSS_STEPS", "WEIGHT_DECAY", "build", "print_table", "run"]

#: Steps before the reported loss (``--quick``: :data:`QUICK_LOSS_STEPS`).
LOSS_STEPS = 20
QUICK_LOSS_STEPS = 3
LR = 3e-4
WEIGHT_DECAY = 0.01
#: Seeds of the init and of the data.
SEED = 0
#: The baseline of ``ratio`` and the denominator of ``bf16_ratio``.
BASELINE = "torch.compile"
BF16 = "turbo:bf16"
#: torchao's float8 training recipes timed (by ``Float8LinearConfig.from_recipe_name``).
TORCHAO_RECIPES = ("tensorwise", "rowwise")
#: Suffix of the FP8 providers whose experts compute their weight gradients in bf16.
HP_WGRAD = "+bf16-wgrad"
#: Keyword arguments of every ``torch.compile`` call here (tests may narrow the backend).
COMPILE_OPTIONS: dict = {}

#: The fields of a row whose status is ``ok`` besides the model's (see the module docstring).
OK_FIELDS = ("median_ms", "p10_ms", "p90_ms", "tokens_per_s", "peak_bytes", "init_loss", "loss", "torch_loss", "loss_diff",
             "loss_steps", "ratio", "bf16_ratio", "vs")

#: provider -> role (``baseline``: the denominator of ``ratio``; ``turbo``; ``reference``: the others).
PROVIDERS: dict[str, str] = {
    "torch": "reference",
    BASELINE: "baseline",
    BF16: "turbo",
    **{f"turbo:fp8-{r}": "turbo" for r in ("tensorwise", "rowwise", "blockwise")},
    **{f"turbo:fp8-{r}{HP_WGRAD}": "turbo" for r in ("tensorwise", "rowwise")},
    **{f"torchao:fp8-{r}": "reference" for r in TORCHAO_RECIPES},
    **{f"torchao:fp8-{r}+compile": "reference" for r in TORCHAO_RECIPES},
}


def _torchao_filter(module: torch.nn.Module, fqn: str) -> bool:
    """The layers torchao converts: ``nn.Linear`` with both sizes multiples of 16 (``torch._scaled_mm``'s
    rule), routers excepted (turbo keeps its routers in bf16 too)."""
    return (isinstance(module, torch.nn.Linear) and not fqn.endswith("router")
            and module.in_features % 16 == 0 and module.out_features % 16 == 0)


def _empty(cls: Callable[..., torch.nn.Module], *args, device: str) -> torch.nn.Module:
    """``cls(*args)`` with bf16 parameters on ``device``, uninitialized (built on the meta device)."""
    with torch.device("meta"):
        model = cls(*args)
    return model.to(torch.bfloat16).to_empty(device=device)


def build(provider: str, model: TrainModel, state: dict[str, torch.Tensor], device: str) -> torch.nn.Module:
    """The provider's model of ``model`` with the weights ``state`` (bf16, turbo decoder names).

    Raises:
        ValueError: an unknown provider.
        ImportError: a torchao provider without torchao.
    """
    cfg = model.config
    if provider not in PROVIDERS:
        raise ValueError(f"provider: expected one of {', '.join(PROVIDERS)}, got {provider!r}")
    if provider.startswith("turbo:"):
        recipe = provider.removeprefix("turbo:fp8-").removesuffix(HP_WGRAD) if provider != BF16 else "none"
        net = _empty(TurboDecoder, cfg, fp8_recipe(recipe), device=device)
        net.load_state_dict(state, strict=True)
        if provider.endswith(HP_WGRAD):
            for layer in net.modules():
                if isinstance(layer, GroupedLinear):
                    layer.wgrad_fp8 = False
        return net
    net = _empty(PlainDecoder, cfg, device=device)
    net.load_state_dict(state, strict=True)
    if provider.startswith("torchao:"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        recipe = provider.removeprefix("torchao:fp8-").removesuffix("+compile")
        convert_to_float8_training(net, config=Float8LinearConfig.from_recipe_name(recipe),
                                   module_filter_fn=_torchao_filter)
    if provider.endswith("compile"):
        return torch.compile(net, **COMPILE_OPTIONS)
    return net


def _loss(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, fused: bool = False) -> torch.Tensor:
    """The mean cross entropy of ``net``'s logits: turbo's fused ``cross_entropy`` (``fused``, the turbo
    providers) or ``F.cross_entropy`` on the logits cast to fp32 (the others); fp32 math either way."""
    logits = net(inputs)
    if fused:
        return cross_entropy(logits, targets)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


Batch = tuple[torch.Tensor, torch.Tensor]


def _data(model: TrainModel, batches: int, device: str) -> list[Batch]:
    """``batches + 1`` batches of the model's chain: the loss run's, then the held-out one."""
    data = SparseMarkovData(model.config.vocab, seed=SEED + 1)
    inputs, targets = data.batch(model.batch * (batches + 1), model.seq)
    return [(i.to(device), t.to(device)) for i, t in zip(inputs.split(model.batch), targets.split(model.batch),
                                                         strict=True)]


def _init_state(model: TrainModel, device: str) -> dict[str, torch.Tensor]:
    """The turbo decoder's init under :data:`SEED`, in bf16, on the CPU (so that no provider's peak
    memory holds it)."""
    torch.manual_seed(SEED)
    with torch.device(device):
        net = TurboDecoder(model.config)
    state = {k: v.detach().to(torch.bfloat16).cpu() for k, v in net.state_dict().items()}
    del net
    return state


def _measure(provider: str, model: TrainModel, state: dict, batches: list[Batch], *, timed: bool, warmup: int,
             iters: int, device: str, micro_batches: int = 1, profile_top: int | None = None) -> dict:
    """One provider: the loss run (``micro_batches`` of ``batches`` a step, the last batch held out),
    then (``timed``) the timed steps, each over the first ``micro_batches`` batches. Exceptions
    become the status."""
    try:
        net = build(provider, model, state, device)
        opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=device == "cuda" or None)
        fused = provider.startswith("turbo:")

        def loss_of(batch: Batch) -> torch.Tensor:
            return _loss(net, *batch, fused)

        out = loss_run_and_time(loss_of, step_fn(loss_of, opt), batches, micro_batches=micro_batches,
                                tokens=model.tokens, timed=timed, warmup=warmup, iters=iters, device=device,
                                profile_top=profile_top)
        return {"status": "ok", **out}
    except ImportError as exc:
        return {"status": f"skipped: {type(exc).__name__}: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - a provider that fails says why; the suite goes on
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}


def _free(device: str, compiled: bool) -> None:
    """Release what the last provider held (its model, optimizer states, compiled graphs) and, on a
    GPU, return the freed blocks to the device before the next model is built."""
    if compiled:
        torch._dynamo.reset()
    if device == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def _torchao_note(model: TrainModel) -> str:
    note = "torchao converts the nn.Linear layers with sizes that are multiples of 16, routers excepted"
    if model.config.moe_layers != "none":
        note += "; the routed experts' weights stay bf16 (not nn.Linear)"
    return note


def _vs(provider: str, names: list[str]) -> list[str] | None:
    """The providers the performance page compares a turbo row with (None for references, and when
    none of them is among ``names``)."""
    if not provider.startswith("turbo:"):
        return None
    out = [BASELINE] + ([BF16] if provider != BF16 else [])
    recipe = provider.removeprefix("turbo:fp8-").removesuffix(HP_WGRAD)
    if provider.endswith(HP_WGRAD):
        out.append(provider.removesuffix(HP_WGRAD))
    if recipe in TORCHAO_RECIPES:
        out.append(f"torchao:fp8-{recipe}+compile")
    listed = [p for p in out if p in names]
    return listed or None  # none of them ran: the page compares it with every reference


def _has_experts(model: TrainModel) -> bool:
    cfg = model.config
    return any(cfg.is_moe(i) for i in range(cfg.layers))


def _fields(model: TrainModel, micro_batches: int) -> dict:
    cfg = model.config
    moe = cfg.moe_layers != "none"
    case = f"{model.name} d{cfg.d_model} L{cfg.layers} b{model.batch}x{model.seq}"
    return {"suite": "train", **accumulation_fields(case, micro_batches),
            "model": model.name, "pass": "step", "timing": "wall clock", "dtype": "bfloat16", "batch": model.batch,
            "seq": model.seq, "tokens": model.tokens, "hidden": cfg.d_model, "layers": cfg.layers,
            "heads": cfg.heads if cfg.attention else None, "kv_heads": cfg.n_kv_heads if cfg.attention else None,
            "head_dim": cfg.d_head if cfg.attention else None, "experts": cfg.experts if moe else None,
            "local_experts": cfg.n_local_experts if moe else None, "topk": cfg.topk if moe else None,
            "baseline": BASELINE}


def _param_count(state: dict[str, torch.Tensor]) -> int:
    return sum(v.numel() for v in state.values())


def _models(quick: bool, models: list[str] | None, tokens: int | None) -> list[TrainModel]:
    table = QUICK_MODELS if quick else MODELS
    unknown = [m for m in models or () if m not in table]
    if unknown:
        raise ValueError(f"--models: train has no model {', '.join(unknown)} (it has {', '.join(table)})")
    chosen = [table[m] for m in table if not models or m in models]
    if tokens:
        chosen = [TrainModel(m.name, m.config, tokens, 1, m.source) for m in chosen]
    return chosen


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        micro_batches: int = 1, profile_top: int | None = None) -> list[dict]:
    """Every model x provider (``include_reference`` is unused: every provider here is a whole model);
    ``micro_batches`` forward + backward passes per optimizer step; ``profile_top``: each timed
    provider's row also gets one profiled step (:func:`turbo_core.bench.train_loop.profile_step`).

    Raises:
        ValueError: an unknown model or provider name, or ``micro_batches`` below 1 (before any model
            is built).
    """
    check_micro_batches(micro_batches)
    check_profile_top(profile_top)
    chosen = _models(quick, models, tokens)
    unknown = [p for p in providers or () if p not in PROVIDERS]
    if unknown:
        raise ValueError(f"--providers: train has no provider {', '.join(unknown)} (it has {', '.join(PROVIDERS)})")
    names = [p for p in PROVIDERS if not providers or p in providers]
    loss_steps = QUICK_LOSS_STEPS if quick else LOSS_STEPS
    have_torchao = importlib.util.find_spec("torchao") is not None
    task = progress.add_task("train", total=len(chosen) * (len(names) + 1)) if progress else None
    rows: list[dict] = []
    for model in chosen:
        state = _init_state(model, device)
        _free(device, compiled=False)
        batches = _data(model, loss_steps * micro_batches, device)
        base = {**_fields(model, micro_batches), "params": _param_count(state), "loss_steps": loss_steps}
        timing_args = {"warmup": warmup, "iters": iters, "device": device, "micro_batches": micro_batches,
                       "profile_top": profile_top}
        ref = _measure("torch", model, state, batches, timed="torch" in names, **timing_args)
        _free(device, compiled=False)
        if progress:
            progress.advance(task)
        torch_loss = ref.get("loss")
        results: dict[str, dict] = {}
        for name in names:
            if name == "torch":
                results[name] = ref
            elif name.startswith("torchao:") and not have_torchao:
                results[name] = {"status": "skipped: torchao is not importable (pip install torchao)"}
            elif name.endswith(HP_WGRAD) and not _has_experts(model):
                results[name] = {"status": f"skipped: {model.name} has no experts (the provider is "
                                           f"{name.removesuffix(HP_WGRAD)} there)"}
            else:
                results[name] = _measure(name, model, state, batches, timed=True, **timing_args)
                _free(device, compiled=name.endswith("compile"))
            if progress:
                progress.advance(task)
        ms = {p: r["median_ms"] for p, r in results.items() if r["status"] == "ok"}
        for name in names:
            r = results[name]
            row = {**base, "provider": name, "role": PROVIDERS[name], **r, "torch_loss": torch_loss}
            if name.startswith("torchao:"):
                row["note"] = _torchao_note(model)
            if r["status"] == "ok":
                row["loss_diff"] = r["loss"] - torch_loss if torch_loss is not None else None
                row["ratio"] = ms[BASELINE] / r["median_ms"] if BASELINE in ms else None
                row["bf16_ratio"] = ms[BF16] / r["median_ms"] if BF16 in ms else None
                row["vs"] = _vs(name, names)
            rows.append(row)
        del state, batches
        _free(device, compiled=False)
    return rows


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.1f}" if value else "-"


def print_table(rows: list[dict], console) -> None:
    """One table per model: per provider, ms per step (wall clock, median and p10-p90), tokens/s,
    peak GiB, the loss after the loss run and its difference to plain PyTorch's, and the ratios to
    ``torch.compile`` and to ``turbo:bf16`` (reference ms / this ms; above 1: faster); a provider
    that did not run shows its status."""
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, case_rows in by_case.items():
        table = Table(title=f"turbo bench train {case}: ms per training step, wall clock")
        for col in ("provider", "ms", "p10-p90", "tokens/s", "peak GiB", "loss", "- torch", "x compile", "x bf16"):
            table.add_column(col, justify="left" if col == "provider" else "right", overflow="fold")
        for r in case_rows:
            if r["status"] != "ok":
                table.add_row(r["provider"], r["status"][:60], *[""] * 7)
                continue
            timed = r.get("median_ms") is not None
            loss = f"{r['loss']:.4f}" if math.isfinite(r["loss"]) else str(r["loss"])
            diff = f"{r['loss_diff']:+.1e}" if r.get("loss_diff") is not None else "-"
            table.add_row(r["provider"], f"{r['median_ms']:.2f}" if timed else "-",
                          f"{r['p10_ms']:.1f}-{r['p90_ms']:.1f}" if timed else "-",
                          f"{r['tokens_per_s']:.0f}" if timed else "-", _gib(r.get("peak_bytes")), loss, diff,
                          _x(r.get("ratio")), _x(r.get("bf16_ratio")))
        console.print(table)
    print_profiles(rows, console)
