"""``turbo bench moe-dispatch``: expert-parallel ``moe_dispatch`` / ``moe_combine`` across processes,
against a raw ``torch.distributed.all_to_all_single`` of the same rows in the same run.

The suite starts ``world`` processes itself (``torch.multiprocessing``, spawned): NCCL/RCCL, one GPU
each, on ``cuda`` (``world``: ``--world``, default the visible GPUs, at most 8; fewer than 2: every
row says so), gloo on the CPU (default 2; ``--quick``). Every rank routes its own tokens uniformly at
random (``top-k`` of ``E`` experts, expert ``e`` on rank ``e // (E / world)``; ``world`` must divide
every chosen model's ``E``).

Cases (per model; ``--tokens`` per rank, default 4096; ``--quick``: 64 tokens, hidden 256):
``dispatch`` of bf16 tokens and of FP8 (E4M3) tokens with per-128 fp32 scales, and the bf16
``combine`` of the dispatched rows, each in the exact mode (counts exchanged, one host sync) and
the ``num_worst_tokens`` mode (``world * tokens`` slots, no host sync); ``worst-b2b``: the worst
mode's calls, baseline included, timed in batches of 10 enqueued back to back (a training step's
host runs ahead of the GPU: the launch cost of one call overlaps the previous call's GPU work); on
GPUs also ``worst-graph``: the worst mode's calls captured in a CUDA graph and timed by replay (the
GPU's own time, without the host's launch cost, which dominates single eager calls at these sizes). Models: DeepSeek-V3 (hidden
7168, 256 experts, top-8), Qwen3-235B-A22B (4096, 128, top-8), Mixtral-8x7B (4096, 8, top-2).

Providers: ``turbo:<backend>`` for every backend registered for ``moe_dispatch`` (DEEP_EP; also
DEEP_EP_BUFFER when DeepEP is importable; a backend that declines the call gives a row saying why),
and the baseline ``all_to_all_single``: the same rows of the same bytes (``x``'s dtype, plus the
scales for FP8) with the same split sizes (the worst mode: the fixed slots), nothing else.

Metric: GB/s = token-row bytes sent by a rank (combine: returned) / the time, per rank, median of
CUDA-event (CPU: wall-clock) timings each started after a barrier; the row reports the slowest
rank's median. ``ratio`` = baseline time / provider time. ``max_rel_err``: the dispatch -> combine
round trip against ``x * (ranks the token went to)`` in float64. ``transport``: how the backend moved
the rows, where its handle says (DEEP_EP: ``symm`` or ``collective``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from turbo_core import use_backend
from turbo_core.bench import ranks
from turbo_core.bench.console import print_tables
from turbo_core.dispatch.launch import moe_dispatch as launch
from turbo_core.plugins.host import get_host

__all__ = ["MODELS", "print_table", "run"]

PASSES = ("dispatch", "combine")
BASELINE = "all_to_all_single"


@dataclass(frozen=True)
class EpModel:
    name: str
    hidden: int
    experts: int
    topk: int


MODELS = {
    "deepseek-v3": EpModel("deepseek-v3", 7168, 256, 8),
    "qwen3-235b-a22b": EpModel("qwen3-235b-a22b", 4096, 128, 8),
    "mixtral-8x7b": EpModel("mixtral-8x7b", 4096, 8, 2),
}
QUICK = EpModel("quick", 256, 16, 4)


def _models(quick: bool, names: list[str] | None) -> list[EpModel]:
    if quick:
        return [QUICK]
    if names:
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            raise ValueError(f"models: unknown {', '.join(unknown)} (moe-dispatch has {', '.join(MODELS)})")
        return [MODELS[n] for n in names]
    return list(MODELS.values())


def _backends(wanted: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """``(available, {unavailable backend: why})`` among the backends with a ``moe_dispatch``
    kernel (not the TORCH reference: one process only), restricted to ``wanted`` when given."""
    registry = get_host().registry
    names = list(dict.fromkeys(k.backend for k in registry.kernels_for("moe_dispatch") if k.backend != "TORCH"))
    if wanted is not None:
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise ValueError(f"providers: no moe_dispatch backend {', '.join(unknown)} (registered: "
                             f"{', '.join(names) or 'none'}; the baseline {BASELINE} always runs)")
        names = [n for n in names if n in wanted]
    ok, why = [], {}
    for name in names:
        reason = registry.backend(name).unavailable_reason()
        if reason is None:
            ok.append(name)
        else:
            why[name] = reason
    return ok, why


def _case_rows(m: EpModel, tokens: int, rank: int, world: int, group, dev, providers, warmup, iters) -> list[dict]:
    g = torch.Generator().manual_seed(1234 + rank)
    idx = torch.rand((tokens, m.experts), generator=g).topk(m.topk, dim=1).indices.to(dev)
    x = torch.randn((tokens, m.hidden), generator=g).to(torch.bfloat16).to(dev)
    probs = torch.rand((tokens, m.topk), generator=g).to(dev)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    per = m.experts // world
    n_ranks = torch.zeros((tokens, world), dtype=torch.bool, device=dev)
    n_ranks.scatter_(1, (idx // per).long(), True)
    sends = n_ranks.sum(dim=0).tolist()
    n_send = sum(sends)
    recv_counts = torch.empty(world, dtype=torch.int64, device=dev)
    dist.all_to_all_single(recv_counts, torch.tensor(sends, dtype=torch.int64, device=dev), group=group)
    recvs = recv_counts.tolist()
    rows, want = [], x.double() * n_ranks.sum(dim=1, keepdim=True).double()
    worst = world * tokens
    variants = [("bf16", x, None)]
    if fp8 is not None and m.hidden % 128 == 0:
        variants.append(("fp8", x.float().clamp(-448, 448).to(fp8),
                         torch.rand((tokens, m.hidden // 128), generator=g).to(dev)))
    labels = {"worst-graph": "graph", "worst-b2b": "back to back"}
    for mode in ("exact", "worst", "worst-b2b") + (("worst-graph",) if dev.type == "cuda" else ()):
        nw = 0 if mode == "exact" else worst
        for dtype, xx, scales in variants:
            row_bytes = m.hidden * xx.element_size() + (0 if scales is None else scales.shape[1] * 4)
            base = {"suite": "moe_dispatch", "model": m.name, "tokens": tokens, "hidden": m.hidden,
                    "experts": m.experts, "topk": m.topk, "world": world, "mode": mode, "dtype": dtype}
            ops = [("dispatch", n_send)] + ([("combine", n_send)] if dtype == "bf16" else [])
            for op, n_rows in ops:
                case = {**base, "pass": f"{op} ({labels[mode]})" if mode in labels else op,
                        "case": f"{m.name} T{tokens} {op} {dtype} {mode}", "bytes": n_rows * row_bytes}
                # baseline: the same rows with the same splits (worst: the fixed slots), one collective
                width = row_bytes // xx.element_size() if scales is None else row_bytes
                rdt = xx.dtype if scales is None else torch.uint8
                if mode != "exact":
                    send = torch.empty((worst, width), dtype=rdt, device=dev)
                    recv = torch.empty_like(send)

                    def raw(send=send, recv=recv):
                        dist.all_to_all_single(recv, send, group=group)
                else:
                    s_split, r_split = (recvs, sends) if op == "combine" else (sends, recvs)
                    send = torch.empty((sum(s_split), width), dtype=rdt, device=dev)
                    recv = torch.empty((sum(r_split), width), dtype=rdt, device=dev)

                    def raw(send=send, recv=recv, s_split=s_split, r_split=r_split):
                        dist.all_to_all_single(recv, send, r_split, s_split, group=group)

                timed = {BASELINE: raw}
                errs = {}  # provider: the round trip's max relative error (bf16 combine rows)
                notes = {}  # provider: its transport, where the backend's handle names one
                for backend in providers:
                    try:
                        with use_backend(backend):
                            res = launch.moe_dispatch(xx, scales, idx, probs, m.experts, group, num_worst_tokens=nw)
                    except Exception as exc:  # noqa: BLE001 - a row says why
                        timed[f"turbo:{backend}"] = f"declined: {str(exc).splitlines()[0][:200]}"
                        continue
                    handle = res[5]
                    how = getattr(handle.state, "transport", None)  # a backend's own word on how rows moved
                    if how is not None:
                        notes[f"turbo:{backend}"] = how
                    if op == "dispatch":
                        def fn(backend=backend, xx=xx, scales=scales, nw=nw):
                            with use_backend(backend):
                                launch.moe_dispatch(xx, scales, idx, probs, m.experts, group, num_worst_tokens=nw)
                    else:
                        recv_x = res[0]

                        def fn(backend=backend, recv_x=recv_x, handle=handle):
                            with use_backend(backend):
                                launch.moe_combine(recv_x, handle)
                    timed[f"turbo:{backend}"] = fn
                    if dtype == "bf16" and op == "combine":
                        with use_backend(backend):
                            back, _ = launch.moe_combine(res[0], handle)
                        err = (back.double() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
                        errs[f"turbo:{backend}"] = err
                if mode == "worst-graph":  # every call replayed from a CUDA graph: the GPU's time alone
                    timed = {p: fn if isinstance(fn, str) else ranks.graphed(fn) for p, fn in timed.items()}
                base_ms = None
                for provider, fn in timed.items():
                    row = {**case, "provider": provider,
                           "role": "baseline" if provider == BASELINE else "turbo", "baseline": BASELINE}
                    if isinstance(fn, str):
                        rows.append({**row, "status": fn})
                        dist.barrier()
                        continue
                    calls = 10 if mode == "worst-b2b" else 1
                    t = ranks.time_calls(fn, dev, warmup, iters, calls)
                    med, p10, p90 = t.median_ms, t.p10_ms, t.p90_ms
                    if provider == BASELINE:
                        base_ms = med
                    row.update(status="ok", median_ms=med, p10_ms=p10, p90_ms=p90,
                               gbps=case["bytes"] / med / 1e6, ratio=(base_ms / med) if base_ms else None,
                               max_rel_err=errs.get(provider, 0.0))
                    if provider in notes:
                        row["transport"] = notes[provider]
                    rows.append(row)
    return rows


def _rank_rows(rank: int, world: int, group, dev: torch.device, args: dict) -> list[dict]:
    rows = []
    for m in args["models"]:
        rows += _case_rows(EpModel(**m), args["tokens"], rank, world, group, dev, args["providers"], args["warmup"],
                           args["iters"])
    return rows


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None, world: int | None = None
        ) -> list[dict]:
    """Rows as the module docstring describes (``include_reference`` is unused: the TORCH reference
    serves one process only)."""
    chosen = _models(quick, models)
    tokens = tokens or (64 if quick else 4096)
    world, backend = ranks.world_and_backend(device, world)
    wanted = None if not providers else [p.removeprefix("turbo:") for p in providers if p != BASELINE]
    available, unavailable = _backends(wanted)
    skipped = [{"suite": "moe_dispatch", "case": f"{m.name} T{tokens}", "pass": "dispatch", "model": m.name,
                "provider": f"turbo:{b}", "status": f"skipped: unavailable: {why}"}
               for m in chosen for b, why in unavailable.items()]
    if world < 2:
        return skipped + [{"suite": "moe_dispatch", "case": f"{m.name} T{tokens}", "pass": "dispatch", "model": m.name,
                           "provider": p, "status": f"skipped: needs 2 or more {device} devices (found {world})"}
                          for m in chosen for p in [BASELINE, *(f"turbo:{b}" for b in available)]]
    uneven = [f"{m.name} ({m.experts})" for m in chosen if m.experts % world]
    if uneven:
        raise ValueError(f"world: {world} ranks do not split the experts of {', '.join(uneven)} evenly")
    args = {"models": [asdict(m) for m in chosen], "tokens": tokens, "providers": available, "warmup": warmup,
            "iters": iters}
    return skipped + ranks.spawn(_rank_rows, world, backend, args, progress, "moe-dispatch")


def _gbps_cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != BASELINE else ""
    err = f" [{r['max_rel_err']:.1e}]" if r.get("max_rel_err") else ""
    return f"{r['gbps']:.4g}{ratio}{err}"


def print_table(rows: list[dict], console) -> None:
    """Per case: GB/s per provider, the ratio to the raw all-to-all, the round trip's error."""
    print_tables(rows, console, title="turbo bench moe-dispatch: GB/s (ratio to all_to_all_single) [round-trip rel err]",
                 cell=_gbps_cell)
