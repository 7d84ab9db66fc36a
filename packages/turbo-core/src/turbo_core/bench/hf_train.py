"""``turbo bench train --hf``: whole training steps of Hugging Face Transformers models, unpatched
and patched, each provider from the same bf16 weights on the same batches.

Models (:mod:`turbo_core.bench.hf_models`): ``llama3.1-8b`` (2 layers, sequence 8192) and
``qwen3-30b-a3b`` (2 layers, sequence 4096), batch 1; ``--quick`` runs tiny versions on the CPU
(the reference backend). A step is the model's own forward with ``labels`` (transformers shifts
them and computes the cross-entropy in fp32 over the whole vocabulary, unless a provider's patch
replaces that), the backward and an AdamW step (the ``train`` suite's: lr
:data:`~turbo_core.bench.suites.train.LR`, weight decay, bf16 parameters and states, ``fused``
on a GPU).

Providers (:data:`HF_PROVIDERS`):

* ``hf``: transformers as loaded: SDPA attention, its default ``"grouped_mm"`` experts
  (``torch._grouped_mm`` after a torch sort) — the baseline of ``ratio`` and of ``loss_diff``;
* ``hf:eager-experts``: the same with transformers' ``"eager"`` experts (a loop over the experts
  hit), MoE models only;
* ``liger``: Liger-Kernel's ``apply_liger_kernel_to_<model_type>(model=...)`` with its defaults
  (RoPE, RMSNorm, SwiGLU, fused linear cross-entropy), where liger-kernel is importable;
* ``turbo:bf16``: ``turbo_core.integrations.transformers.apply_turbo(model)`` — the denominator of
  ``bf16_ratio``;
* ``turbo:fp8-tensorwise`` / ``-rowwise`` / ``-blockwise``: ``apply_turbo(model, fp8=recipe)`` with
  that E4M3 recipe (:func:`turbo_core.demo.fp8_recipe`) on the linear layers, the fused gate/up
  GEMMs and the experts; ``lm_head`` stays in bf16 (``apply_turbo``'s default ``exclude``);
* ``turbo:fp8-<recipe>+head``: the same with ``exclude=()``, the output projection in FP8 too. At a
  vocabulary of 128k and two layers that projection holds more than half of the step's GEMM work,
  which the plain FP8 rows leave in bf16 (the ``train`` suite's decoder quantizes its head too).

Clock, peak memory, the loss run and gradient accumulation (``--micro-batches N``) are the ``train``
suite's (:mod:`turbo_core.bench.train_loop`):
wall clock per step (median, p10, p90), CUDA-synchronized; ``torch.cuda.max_memory_allocated``
after the model is built; the loss of a held-out batch after ``LOSS_STEPS`` steps from the init,
beside ``hf``'s (``hf_loss``, ``loss_diff``), and that batch's loss before the first step
(``init_loss``).

Rows: the ``train`` suite's fields with ``mode`` ``"hf"`` (a table of its own on the performance
page), ``baseline`` ``"hf"``, ``hf_loss`` in place of ``torch_loss``, ``note`` (a turbo row: what
``apply_turbo`` replaced; a Liger row: the function applied) and ``vs`` (a turbo row: those of
``hf``, ``hf:eager-experts``, ``liger`` and, for an FP8 recipe, ``turbo:bf16`` that ran).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from collections.abc import Callable

import torch
from rich.table import Table

from turbo_core.bench.hf_models import HF_MODELS, QUICK_HF_MODELS, HFTrainModel
from turbo_core.bench.suites.train import LOSS_STEPS, LR, QUICK_LOSS_STEPS, SEED, WEIGHT_DECAY, _gib, _x
from turbo_core.bench.train_loop import (
    accumulation_fields,
    check_micro_batches,
    check_profile_top,
    loss_run_and_time,
    print_profiles,
    step_fn,
)
from turbo_core.demo.data import SparseMarkovData
from turbo_core.demo.model import fp8_recipe

__all__ = ["BASELINE", "HF_PROVIDERS", "OK_FIELDS", "build", "print_table", "run"]

BASELINE = "hf"
BF16 = "turbo:bf16"
EAGER_EXPERTS = "hf:eager-experts"
LIGER = "liger"
FP8_RECIPES = ("tensorwise", "rowwise", "blockwise")
#: Provider suffix: the output projection (``lm_head``) in FP8 too.
HEAD = "+head"

#: provider -> role (``baseline``: the denominator of ``ratio``; ``turbo``; ``reference``).
HF_PROVIDERS: dict[str, str] = {
    BASELINE: "baseline",
    EAGER_EXPERTS: "reference",
    LIGER: "reference",
    BF16: "turbo",
    **{f"turbo:fp8-{r}": "turbo" for r in FP8_RECIPES},
    **{f"turbo:fp8-{r}{HEAD}": "turbo" for r in FP8_RECIPES},
}

#: The fields of a row whose status is ``ok`` besides the model's.
OK_FIELDS = ("median_ms", "p10_ms", "p90_ms", "tokens_per_s", "peak_bytes", "init_loss", "loss", "hf_loss",
             "loss_diff", "loss_steps", "ratio", "bf16_ratio", "vs")


def _transformers():
    try:
        return importlib.import_module("transformers")
    except ImportError as exc:
        raise ImportError("turbo bench train --hf needs transformers (pip install turbo-core[hf])") from exc


def _liger_patch(model_type: str) -> Callable:
    """Liger-Kernel's ``apply_liger_kernel_to_<model_type>`` (ImportError: not installed, or it has no
    function for this architecture)."""
    liger = importlib.import_module("liger_kernel.transformers")
    name = f"apply_liger_kernel_to_{model_type}"
    fn = getattr(liger, name, None)
    if fn is None:
        raise ImportError(f"liger_kernel.transformers has no {name}")
    return fn


def _new(model: HFTrainModel, device: str) -> torch.nn.Module:
    """The model in bf16 on ``device`` (initialized by transformers: overwritten by the caller)."""
    tf = _transformers()
    with torch.device(device):
        net = tf.AutoModelForCausalLM.from_config(model.config(), dtype=torch.bfloat16)
    return net.to(device)  # (a no-op where transformers honored the device context)


def build(provider: str, model: HFTrainModel, state: dict[str, torch.Tensor], device: str) -> tuple[torch.nn.Module, str | None]:
    """The provider's model of ``model`` with the weights ``state`` and its note.

    Raises:
        ValueError: an unknown provider, or ``hf:eager-experts`` on a model without experts.
        ImportError: transformers missing, or Liger (or its function for the architecture) missing.
    """
    if provider not in HF_PROVIDERS:
        raise ValueError(f"provider: expected one of {', '.join(HF_PROVIDERS)}, got {provider!r}")
    if provider == EAGER_EXPERTS and not model.moe:
        raise ValueError(f"{EAGER_EXPERTS}: {model.name} has no experts")
    patch = _liger_patch(model.model_type) if provider == LIGER else None
    net = _new(model, device)
    net.load_state_dict(state, strict=True)
    net.set_attn_implementation("sdpa")
    if model.moe:
        net.set_experts_implementation("eager" if provider == EAGER_EXPERTS else "grouped_mm")
    note = None
    if patch is not None:
        patch(model=net)
        note = f"liger_kernel.transformers.{patch.__name__}(model=...) with its defaults"
    elif provider.startswith("turbo:"):
        from turbo_core.integrations.transformers import KINDS, apply_turbo

        recipe = provider.removeprefix("turbo:fp8-").removesuffix(HEAD) if provider != BF16 else "none"
        report = apply_turbo(net, fp8=fp8_recipe(recipe), **({"exclude": ()} if provider.endswith(HEAD) else {}))
        note = "apply_turbo: " + ", ".join(f"{report.count(k)} {k}" for k in KINDS if report.count(k))
    return net.train(), note


def _init_state(model: HFTrainModel, device: str) -> dict[str, torch.Tensor]:
    """transformers' init of the model under :data:`SEED`, bf16, kept on the CPU."""
    torch.manual_seed(SEED)
    net = _new(model, device)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    del net
    return state


def _data(model: HFTrainModel, vocab: int, batches: int, device: str) -> list[torch.Tensor]:
    """``batches + 1`` batches of token ids (the loss run's, then the held-out one)."""
    inputs, _ = SparseMarkovData(vocab, seed=SEED + 1).batch(model.batch * (batches + 1), model.seq)
    return [i.to(device) for i in inputs.split(model.batch)]


def _loss(net: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return net(input_ids=ids, labels=ids).loss


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _measure(provider: str, model: HFTrainModel, state: dict, batches: list, *, warmup: int, iters: int,
             device: str, micro_batches: int = 1, profile_top: int | None = None) -> dict:
    """One provider: the loss run, then the timed steps (:func:`turbo_core.bench.train_loop.loss_run_and_time`,
    ``micro_batches`` a step). Exceptions become the status."""
    try:
        net, note = build(provider, model, state, device)
        opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=device == "cuda" or None)

        def loss_of(ids: torch.Tensor) -> torch.Tensor:
            return _loss(net, ids)

        out = loss_run_and_time(loss_of, step_fn(loss_of, opt), batches, micro_batches=micro_batches,
                                tokens=model.tokens, timed=True, warmup=warmup, iters=iters, device=device,
                                profile_top=profile_top)
        return {"status": "ok", **out, "note": note}
    except ImportError as exc:
        return {"status": f"skipped: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - a provider that fails says why; the suite goes on
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}


def _fields(model: HFTrainModel, cfg, micro_batches: int) -> dict:
    moe = model.moe
    heads = cfg.num_attention_heads
    case = f"{model.name} hf d{cfg.hidden_size} L{cfg.num_hidden_layers} b{model.batch}x{model.seq}"
    return {"suite": "train", "mode": "hf", **accumulation_fields(case, micro_batches),
            "model": model.name, "pass": "step", "timing": "wall clock", "dtype": "bfloat16", "batch": model.batch,
            "seq": model.seq, "tokens": model.tokens, "hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers,
            "heads": heads, "kv_heads": cfg.num_key_value_heads,
            "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
            "experts": cfg.num_experts if moe else None, "local_experts": cfg.num_experts if moe else None,
            "topk": cfg.num_experts_per_tok if moe else None, "baseline": BASELINE, "source": model.source}


def _vs(provider: str, ran: list[str]) -> list[str] | None:
    """The providers the performance page compares a turbo row with, among those that ran (None for
    references, and when none of them ran)."""
    if not provider.startswith("turbo:"):
        return None
    out = [BASELINE, EAGER_EXPERTS, LIGER] + ([BF16] if provider != BF16 else [])
    listed = [p for p in out if p in ran]
    return listed or None


def _models(quick: bool, models: list[str] | None, tokens: int | None) -> list[HFTrainModel]:
    table = QUICK_HF_MODELS if quick else HF_MODELS
    unknown = [m for m in models or () if m not in table]
    if unknown:
        raise ValueError(f"--models: train --hf has no model {', '.join(unknown)} (it has {', '.join(table)})")
    chosen = [table[m] for m in table if not models or m in models]
    return [m.with_seq(tokens) for m in chosen] if tokens else chosen


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        micro_batches: int = 1, profile_top: int | None = None) -> list[dict]:
    """Every model x provider (``include_reference`` is unused: every provider is a whole model);
    ``micro_batches`` forward + backward passes per optimizer step; ``profile_top``: each timed
    provider's row also gets one profiled step (:func:`turbo_core.bench.train_loop.profile_step`).

    Raises:
        ValueError: an unknown model or provider name, or ``micro_batches`` below 1 (before any model
            is built).
        ImportError: transformers is not installed.
    """
    check_micro_batches(micro_batches)
    check_profile_top(profile_top)
    chosen = _models(quick, models, tokens)
    unknown = [p for p in providers or () if p not in HF_PROVIDERS]
    if unknown:
        raise ValueError(f"--providers: train --hf has no provider {', '.join(unknown)} "
                         f"(it has {', '.join(HF_PROVIDERS)})")
    _transformers()
    names = [p for p in HF_PROVIDERS if not providers or p in providers]
    loss_steps = QUICK_LOSS_STEPS if quick else LOSS_STEPS
    have_liger = importlib.util.find_spec("liger_kernel") is not None
    task = progress.add_task("train --hf", total=len(chosen) * (len(names) + 1)) if progress else None
    rows: list[dict] = []
    for model in chosen:
        cfg = model.config()
        state = _init_state(model, device)
        _free(device)
        batches = _data(model, cfg.vocab_size, loss_steps * micro_batches, device)
        base = {**_fields(model, cfg, micro_batches), "params": sum(v.numel() for v in state.values()),
                "loss_steps": loss_steps}
        timing_args = {"warmup": warmup, "iters": iters, "device": device, "micro_batches": micro_batches,
                       "profile_top": profile_top}
        ref = _measure(BASELINE, model, state, batches, **timing_args)
        _free(device)
        if progress:
            progress.advance(task)
        results: dict[str, dict] = {}
        for name in names:
            if name == BASELINE:
                results[name] = ref
            elif name == EAGER_EXPERTS and not model.moe:
                results[name] = {"status": "skipped: the model has no experts"}
            elif name == LIGER and not have_liger:
                results[name] = {"status": "skipped: liger-kernel is not importable (pip install liger-kernel)"}
            else:
                results[name] = _measure(name, model, state, batches, **timing_args)
                _free(device)
            if progress:
                progress.advance(task)
        hf_loss = ref.get("loss")
        ms = {p: r["median_ms"] for p, r in results.items() if r["status"] == "ok"}
        for name in names:
            r = dict(results[name])
            note = r.pop("note", None)
            row = {**base, "provider": name, "role": HF_PROVIDERS[name], **r, "hf_loss": hf_loss}
            if note:
                row["note"] = note
            if r["status"] == "ok":
                row["loss_diff"] = r["loss"] - hf_loss if hf_loss is not None else None
                row["ratio"] = ms[BASELINE] / r["median_ms"] if BASELINE in ms else None
                row["bf16_ratio"] = ms[BF16] / r["median_ms"] if BF16 in ms else None
                row["vs"] = _vs(name, list(ms))
            rows.append(row)
        del state, batches
        _free(device)
    return rows


def print_table(rows: list[dict], console) -> None:
    """One table per model: per provider, ms per step (wall clock, median and p10-p90), tokens/s,
    peak GiB, the loss after the loss run and its difference to ``hf``'s, and the ratios to ``hf``
    and to ``turbo:bf16`` (reference ms / this ms; above 1: faster); a provider that did not run
    shows its status."""
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, case_rows in by_case.items():
        table = Table(title=f"turbo bench train --hf {case}: ms per training step, wall clock")
        for col in ("provider", "ms", "p10-p90", "tokens/s", "peak GiB", "loss", "- hf", "x hf", "x bf16"):
            table.add_column(col, justify="left" if col == "provider" else "right", overflow="fold")
        for r in case_rows:
            if r["status"] != "ok":
                table.add_row(r["provider"], r["status"][:60], *[""] * 7)
                continue
            loss = f"{r['loss']:.4f}" if math.isfinite(r["loss"]) else str(r["loss"])
            diff = f"{r['loss_diff']:+.1e}" if r.get("loss_diff") is not None else "-"
            table.add_row(r["provider"], f"{r['median_ms']:.2f}", f"{r['p10_ms']:.1f}-{r['p90_ms']:.1f}",
                          f"{r['tokens_per_s']:.0f}", _gib(r.get("peak_bytes")), loss, diff, _x(r.get("ratio")),
                          _x(r.get("bf16_ratio")))
        console.print(table)
    print_profiles(rows, console)
