"""``turbo bench async-tp``: the async tensor-parallel ops against the unfused collective + GEMM of the
same tensors, in the same run, across ``world`` processes it starts itself (NCCL over the visible
GPUs, at most 8; gloo on the CPU with ``--quick``; fewer than 2 devices: every row says so).

Cases per model (the dense layers of ``turbo_core.bench.models.DENSE``, tensor parallel over ``world``
ranks, ``--tokens`` rows in the TP group, default 8192; ``--quick``: 64 rows, hidden 128), bf16:

* ``ag-mm`` (``fused_all_gather_matmul``): the sequence-parallel input ``[tokens / world, in]``
  gathered and multiplied by a column-parallel weight ``[out / world, in]``: ``qkv`` and ``gate_up``,
  each its own case;
* ``mm-rs`` (``fused_matmul_reduce_scatter``): the row-parallel ``o`` and ``down``: ``[tokens, in / world]``
  by ``[out, in / world]``, the output reduce-scattered along the tokens.

Providers: ``turbo`` (the fused op, ``num_splits`` 2 and 4) and the baseline ``unfused``:
``all_gather_into_tensor`` then ``torch.matmul``, or ``torch.matmul`` then ``reduce_scatter_tensor``.
Metric: TFLOP/s of a rank's GEMM (``2 M N K``) over the call's time, the slowest rank's median of
barrier-started timings; ``ratio`` = unfused time / provider time. ``max_rel_err``: the largest
error on the output's first 64 rows against float64 math of the case, relative to the largest
reference value.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from turbo_core.bench import ranks
from turbo_core.bench.console import print_tables
from turbo_core.bench.models import DENSE
from turbo_core.ops import fused_all_gather_matmul, fused_matmul_reduce_scatter

__all__ = ["MODELS", "print_table", "run"]

PASSES = ("ag-mm", "mm-rs")
BASELINE = "unfused"
SPLITS = (2, 4)


#: The passes of the dense layers: column-parallel layers gather their input, row-parallel ones scatter.
PASS_OF = {"qkv": "ag-mm", "gate_up": "ag-mm", "o": "mm-rs", "down": "mm-rs"}
MODELS = {name: DENSE[name] for name in ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b")}
#: --quick: hidden 128, 4 query and 2 key/value heads of 32, FFN 256.
QUICK = {"quick": [("qkv", 256, 128), ("o", 128, 128), ("gate_up", 512, 128), ("down", 128, 256)]}


def _models(quick: bool, names: list[str] | None) -> dict[str, list]:
    if quick:
        return QUICK
    if names:
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            raise ValueError(f"models: unknown {', '.join(unknown)} (async-tp has {', '.join(MODELS)})")
        return {n: MODELS[n] for n in names}
    return MODELS


def _layers(layers: list, world: int) -> list[tuple[str, str, int, int]]:
    """(pass, layer, N of the local weight, K of the local weight) per case, the gathers first:
    column-parallel weights keep ``out / world`` rows, row-parallel ones ``in / world`` columns."""
    cases = [(PASS_OF[name], name, out // world, inp) if PASS_OF[name] == "ag-mm" else
             (PASS_OF[name], name, out, inp // world) for name, out, inp in layers]
    return sorted(cases, key=lambda c: PASSES.index(c[0]))


def _rank_rows(rank: int, world: int, group, dev: torch.device, args: dict) -> list[dict]:
    rows = []
    tokens, warmup, iters = args["tokens"], args["warmup"], args["iters"]
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    for name, layers in args["models"].items():
        for pass_, layer, n, k in _layers(layers, world):
            w = torch.randn((n, k), generator=g, device=dev, dtype=torch.float32).mul_(k ** -0.5).to(torch.bfloat16)
            base = {"suite": "async_tp", "case": f"{name} {layer} T{tokens} tp{world}", "pass": pass_,
                    "model": name, "layer": layer, "tokens": tokens, "world": world, "m": tokens,
                    "n": n, "k": k, "dtype": "bf16", "flops": 2 * tokens * n * k}
            if pass_ == "ag-mm":
                x = torch.randn((tokens // world, k), generator=g, device=dev).to(torch.bfloat16)
                full = torch.empty((tokens, k), device=dev, dtype=torch.bfloat16)

                def unfused(x=x, w=w, full=full):
                    dist.all_gather_into_tensor(full, x, group=group)
                    return torch.matmul(full, w.t())

                def fused(splits, x=x, w=w):
                    return fused_all_gather_matmul(x, [w], ["NT"], 0, group, num_splits=splits, return_A=False)[1][0]

                shards = [torch.empty_like(x) for _ in range(world)]
                dist.all_gather(shards, x, group=group)
                want = torch.cat(shards)[:64].double() @ w.double().t()

                def err(out, want=want):
                    return _rel_err(out[:64], want)
            else:
                x = torch.randn((tokens, k), generator=g, device=dev).to(torch.bfloat16)
                per = tokens // world
                recv = torch.empty((per, n), device=dev, dtype=torch.bfloat16)

                def unfused(x=x, w=w, recv=recv):
                    dist.reduce_scatter_tensor(recv, torch.matmul(x, w.t()), group=group)
                    return recv

                def fused(splits, x=x, w=w):
                    return fused_matmul_reduce_scatter(x, w, "NT", "sum", 0, group, num_splits=splits)

                # float64 of every destination's first rows from this rank's x and weight, summed over
                # the ranks; this rank's output is destination ``rank``
                rows64 = min(64, per)
                part = torch.stack([x[r * per:r * per + rows64].double() @ w.double().t() for r in range(world)])
                dist.all_reduce(part, group=group)

                def err(out, want=part[rank], rows64=rows64):
                    return _rel_err(out[:rows64], want)
            providers = [(BASELINE, unfused)] + [(f"turbo:splits{s}", lambda s=s, fused=fused: fused(s))
                                                 for s in SPLITS]
            times = {}
            for name, fn in providers:
                row = dict(base, provider=name, role="baseline" if name == BASELINE else "turbo", baseline=BASELINE)
                try:
                    e = err(fn())
                    t = ranks.time_calls(fn, dev, warmup, iters)
                    med, p10, p90 = t.median_ms, t.p10_ms, t.p90_ms
                    times[name] = med
                    row.update(status="ok", median_ms=med, p10_ms=p10, p90_ms=p90, max_rel_err=e,
                               tflops=base["flops"] / med / 1e9, ratio=times[BASELINE] / med)
                except Exception as exc:  # a provider that fails gets a row saying why; the others run
                    row.update(status=f"error: {type(exc).__name__}: {str(exc)[:200]}")
                rows.append(row)
    return rows


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item())


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None, world: int | None = None
        ) -> list[dict]:
    """Rows as the module docstring describes (``providers`` and ``include_reference`` are unused:
    every case times the unfused baseline and the fused op)."""
    chosen = _models(quick, models)
    tokens = tokens or (64 if quick else 8192)
    world, backend = ranks.world_and_backend(device, world)
    if world < 2:
        return [{"suite": "async_tp", "case": f"{name} {layer} T{tokens}", "pass": pass_, "model": name,
                 "provider": p, "status": f"skipped: needs 2 or more {device} devices (found {world})"}
                for name, layers in chosen.items() for pass_, layer, _, _ in _layers(layers, 1)
                for p in [BASELINE, *(f"turbo:splits{s}" for s in SPLITS)]]
    if tokens % world:
        raise ValueError(f"tokens: {tokens} rows do not split over {world} ranks")
    return ranks.spawn(_rank_rows, world, backend, {"models": chosen, "tokens": tokens,
                                                    "warmup": warmup, "iters": iters}, progress, "async-tp")


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != BASELINE else ""
    err = f" [{r['max_rel_err']:.1e}]" if r.get("max_rel_err") is not None else ""
    return f"{r['tflops']:.4g}{ratio}{err}"


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s per provider, the ratio to the unfused composition, the error."""
    print_tables(rows, console, title="turbo bench async-tp: TFLOP/s (ratio to unfused) [rel err vs float64]",
                 cell=_cell)
