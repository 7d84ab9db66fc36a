"""``turbo bench async-tp``: the async tensor-parallel ops against the unfused collective + GEMM and
PyTorch's own symmetric-memory fused ops, in the same run, across ``world`` processes it starts
itself (NCCL over the visible GPUs, at most 8, or ``--world N`` of them; gloo on the CPU with
``--quick``; fewer than 2 devices: every row says so).

Cases per model (the dense layers of ``turbo_core.bench.models.DENSE``: Llama-3.1 8B, 70B, 405B,
tensor parallel over ``world`` ranks, ``--tokens`` rows in the TP group, default 8192; ``--quick``:
64 rows, hidden 128):

* ``ag-mm`` (``fused_all_gather_matmul``, bf16): the sequence-parallel input ``[tokens / world, in]``
  gathered and multiplied by a column-parallel weight ``[out / world, in]``: ``qkv`` and ``gate_up``;
* ``ag-mm-fp8`` (``fused_all_gather_scaled_matmul`` quantizing once, E4M3): the same layers with an FP8
  weight, the bf16 shard quantized before the exchange, TENSORWISE and ROWWISE (``granularity``);
* ``mm-rs`` (``fused_matmul_reduce_scatter``, bf16): the row-parallel ``o`` and ``down``: ``[tokens,
  in / world]`` by ``[out, in / world]``, the output reduce-scattered along the tokens.

Providers:

* ``unfused`` (the baseline): ``all_gather_into_tensor`` then ``torch.matmul``; ``torch.matmul`` then
  ``reduce_scatter_tensor``; FP8: the shard quantized in plain torch (TENSORWISE after an
  ``all_reduce(MAX)`` of the amax), its bytes (and row scales) all-gathered, ``torch._scaled_mm``;
* ``torch:symm_mem``: ``torch.ops.symm_mem.fused_all_gather_matmul`` /
  ``fused_matmul_reduce_scatter`` / ``fused_all_gather_scaled_matmul`` (the FP8 shard quantized as
  ``unfused`` does), where they run (CUDA GPUs a symmetric-memory rendezvous serves; other rows say
  why);
* ``turbo``: the op with ``num_splits=None``: the tuned choice when the tuning database has one for
  the case, else the heuristic (rows: ``plan`` = ``tuned`` / ``heuristic``);
* ``turbo:s<S>-<order>``: the op at each candidate ``(num_splits, order)`` of
  ``turbo_core.ops.async_tp.plan.CANDIDATES``.

Every row carries the case's ``transport`` (``symm`` or ``nccl``) and ``transport_reason`` (why not
``symm``); turbo rows their ``splits`` and ``order``.

Metrics: ``median_ms``: the wall clock per call (``timing: "wall"``: from the first launch to the
synchronize after it, host launches included), the slowest rank's median of barrier-started calls;
TFLOP/s of a rank's GEMM (``2 M N K``) over it; ``ratio`` = unfused time / provider time.
``comm_ms``: the unfused collective alone; ``gemm_ms``: the unfused GEMM alone (``torch.matmul`` /
``torch._scaled_mm`` of the whole product), both timed in the same run. ``overlap`` = ``(comm_ms +
gemm_ms - median_ms) / min(comm_ms, gemm_ms)``: 1 when the shorter of the two is hidden entirely
behind the longer, 0 for no overlap (the serial time), negative for slower than serial.
``max_rel_err``: the largest error on the output's first 64 rows against float64 math of the case
(FP8: of the quantized operands), relative to the largest reference value.

Tuning: the fastest candidate of a case is marked ``best`` and carries its tuning key (``tune_key``,
``tune_op``). When ``TURBO_TUNING_DB`` names a file, ``run`` records those choices in turbo's tuning
database (``turbo_core.ops.async_tp.plan.record_choice``) and saves them there (the rows then name it
in ``tuning_db``); later runs and training jobs with that database get them through
``num_splits=None``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from turbo_core import timing, tuning
from turbo_core.bench import ranks
from turbo_core.bench.console import print_tables
from turbo_core.bench.models import DENSE
from turbo_core.low_precision import Float8QuantConfig, Format, ScalingGranularity, fp8_dtype_for
from turbo_core.ops import (
    async_tp_plan,
    async_tp_transport,
    fused_all_gather_matmul,
    fused_all_gather_scaled_matmul,
    fused_matmul_reduce_scatter,
)
from turbo_core.ops.async_tp.plan import CANDIDATES, heuristic, key_of, record_choice
from turbo_core.ops.async_tp.transport import enable_symm_mem

__all__ = ["MODELS", "PROVIDERS", "print_table", "run"]

PASSES = ("ag-mm", "ag-mm-fp8", "mm-rs")
BASELINE = "unfused"
TORCH_SYMM = "torch:symm_mem"
TURBO = "turbo"
GRANULARITIES = ("tensorwise", "rowwise")
OP_OF = {"ag-mm": "fused_all_gather_matmul", "ag-mm-fp8": "fused_all_gather_scaled_matmul",
         "mm-rs": "fused_matmul_reduce_scatter"}


def candidate_name(splits: int, order: str) -> str:
    return f"turbo:s{splits}-{order}"


CANDIDATE_NAMES = {candidate_name(s, o): (s, o) for s, o in CANDIDATES}
PROVIDERS = (BASELINE, TORCH_SYMM, TURBO, *CANDIDATE_NAMES)

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


def _cases(layers: list, world: int) -> list[tuple[str, str, int, int, str | None]]:
    """(pass, layer, N of the local weight, K of the local weight, FP8 granularity) per case, in
    :data:`PASSES` order: column-parallel weights keep ``out / world`` rows, row-parallel ones
    ``in / world`` columns; each gathered layer also runs in FP8 at each granularity."""
    cases = []
    for name, out, inp in layers:
        if PASS_OF[name] == "ag-mm":
            cases.append(("ag-mm", name, out // world, inp, None))
            cases += [("ag-mm-fp8", name, out // world, inp, g) for g in GRANULARITIES]
        else:
            cases.append(("mm-rs", name, out, inp // world, None))
    return sorted(cases, key=lambda c: PASSES.index(c[0]))


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
    """``all_gather_into_tensor`` (``all_gather_single`` where torch has it)."""
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp, group=group)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group) -> None:
    """``reduce_scatter_tensor`` (``reduce_scatter_single`` where torch has it), summing."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp, op=dist.ReduceOp.SUM, group=group)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item())


def _time(fn, dev: torch.device, warmup: int, iters: int) -> timing.Timing:
    """Wall-clock ms per call on the slowest rank (the largest median), each call started after a
    barrier of all ranks; every rank calls it at the same point."""
    mine = timing.measure_batched(fn, device=dev, warmup=warmup, iters=iters, clock="wall", before=dist.barrier)
    t = torch.tensor([mine.median_ms, mine.p10_ms, mine.p90_ms], dtype=torch.float64, device=dev)
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t)
    med, p10, p90 = max(gathered, key=lambda g: float(g[0])).tolist()
    return timing.Timing(med, p10, p90, mine.samples)


def _quantize(x: torch.Tensor, dtype: torch.dtype, rowwise: bool, group):
    """The unfused baseline's quantization in plain torch: ``(q, dequantization multipliers)``.
    TENSORWISE takes the amax over ``group`` (``None``: this rank's tensor alone, as for a weight)."""
    fmax = float(torch.finfo(dtype).max)
    if rowwise:
        amax = x.abs().amax(dim=-1, keepdim=True).float()
    else:
        amax = x.abs().amax().float().reshape(1)
        if group is not None:
            dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=group)
    scale = fmax / amax.clamp_min(1e-12)
    q = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, (1.0 / scale) if rowwise else (1.0 / scale).reshape(())


class _Case:
    """One case's callables: ``comm`` / ``gemm`` (the unfused halves), ``unfused``, ``torch_symm``,
    ``turbo(splits, order)``, ``err(out)`` against float64, and the plan keywords of the op."""


def _ag_case(c: _Case, x, w, group, tokens, k) -> None:
    full = torch.empty((tokens, k), device=x.device, dtype=x.dtype)

    def comm():
        _all_gather(full, x, group=group)
        return full
    c.comm, c.gemm = comm, lambda: torch.matmul(full, w.t())
    c.unfused = lambda: torch.matmul(comm(), w.t())
    c.torch_symm = lambda: torch.ops.symm_mem.fused_all_gather_matmul(x, [w.t()], 0, group.group_name,
                                                                      return_A=False)[1][0]
    c.turbo = lambda s, o: fused_all_gather_matmul(x, [w], ["NT"], 0, group, num_splits=s, order=o,
                                                   return_A=False)[1][0]
    comm()
    want = full[:64].double() @ w.double().t()
    c.err = lambda out: _rel_err(out[:64], want)
    c.plan = {"dtype": x.dtype, "out_dtype": x.dtype, "layout": "NT"}


def _ag_fp8_case(c: _Case, x, w, group, tokens, k, gran: str) -> None:
    dev, rowwise = x.device, gran == "rowwise"
    fp8 = fp8_dtype_for(Format.E4M3, dev)
    wq, w_scale = _quantize(w, fp8, rowwise, None)
    b_scale = w_scale.t() if rowwise else w_scale  # torch._scaled_mm's [1, N] for the rowwise weight
    q_local, s_local = _quantize(x, fp8, rowwise, group)
    full = torch.empty((tokens, k), device=dev, dtype=torch.uint8)
    full_s = torch.empty((tokens, 1), device=dev, dtype=torch.float32) if rowwise else s_local

    def gather(q, s):
        _all_gather(full, q.view(torch.uint8), group=group)
        if rowwise:
            _all_gather(full_s, s, group=group)
        return full.view(fp8), full_s

    def scaled_mm(a, s):
        return torch._scaled_mm(a, wq.t(), s, b_scale, out_dtype=torch.bfloat16)

    def torch_symm():
        q, s = _quantize(x, fp8, rowwise, group)
        return torch.ops.symm_mem.fused_all_gather_scaled_matmul(q, [wq.t()], s, [b_scale], 0, group.group_name,
                                                                 [None], [None], [torch.bfloat16], [False])[1][0]
    config = Float8QuantConfig(granularity=ScalingGranularity.ROWWISE if rowwise else ScalingGranularity.TENSORWISE)
    c.comm, c.gemm = lambda: gather(q_local, s_local), lambda: scaled_mm(full.view(fp8), full_s)
    c.unfused = lambda: scaled_mm(*gather(*_quantize(x, fp8, rowwise, group)))
    c.torch_symm = torch_symm
    c.turbo = lambda s, o: fused_all_gather_scaled_matmul(x, [wq], ["NT"], None, [w_scale], 0, group,
                                                          A_quant_config=config, num_splits=s, order=o)[1][0]
    a, s = gather(q_local, s_local)
    deq_w = wq.double() * w_scale.double()
    want = (a[:64].double() * (s[:64] if rowwise else s).double()) @ deq_w.t()
    c.err = lambda out: _rel_err(out[:64], want)
    c.plan = {"dtype": fp8, "out_dtype": torch.bfloat16, "layout": f"NT/{gran}"}


def _rs_case(c: _Case, x, w, group, world, tokens, rank) -> None:
    n = w.shape[0]
    per = tokens // world
    recv = torch.empty((per, n), device=x.device, dtype=x.dtype)
    prod = torch.matmul(x, w.t())

    def comm(part=prod):
        _reduce_scatter(recv, part, group)
        return recv
    c.comm, c.gemm = comm, lambda: torch.matmul(x, w.t())
    c.unfused = lambda: comm(torch.matmul(x, w.t()))
    c.torch_symm = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(x, w.t(), "sum", 0, group.group_name)
    c.turbo = lambda s, o: fused_matmul_reduce_scatter(x, w, "NT", "sum", 0, group, num_splits=s, order=o)
    # float64 of every destination's first rows from this rank's x and weight, summed over the ranks;
    # this rank's output is destination ``rank``
    rows64 = min(64, per)
    part = torch.stack([x[r * per:r * per + rows64].double() @ w.double().t() for r in range(world)])
    dist.all_reduce(part, group=group)
    want = part[rank]
    c.err = lambda out: _rel_err(out[:rows64], want)
    c.plan = {"dtype": x.dtype, "out_dtype": x.dtype, "layout": "NT"}


def _torch_symm_reason(dev: torch.device, transport) -> str | None:
    if dev.type != "cuda":
        return f"skipped: torch.ops.symm_mem's fused ops run on CUDA GPUs (here: {dev.type})"
    if transport.name != "symm" and transport.reason and "asks for" not in transport.reason:
        return f"skipped: symmetric memory cannot serve this group: {transport.reason}"
    return None


def _rank_rows(rank: int, world: int, group, dev: torch.device, args: dict) -> list[dict]:
    rows = []
    tokens, warmup, iters = args["tokens"], args["warmup"], args["iters"]
    wanted = args["providers"]
    transport = async_tp_transport(group, dev)
    symm_reason = _torch_symm_reason(dev, transport)
    if symm_reason is None and (wanted is None or TORCH_SYMM in wanted):
        enable_symm_mem(group)
    g = torch.Generator(device=dev).manual_seed(1234 + rank)
    for name, layers in args["models"].items():
        for pass_, layer, n, k, gran in _cases(layers, world):
            w = torch.randn((n, k), generator=g, device=dev, dtype=torch.float32).mul_(k ** -0.5).to(torch.bfloat16)
            c = _Case()
            if pass_ == "mm-rs":
                x = torch.randn((tokens, k), generator=g, device=dev).to(torch.bfloat16)
                _rs_case(c, x, w, group, world, tokens, rank)
            else:
                x = torch.randn((tokens // world, k), generator=g, device=dev).to(torch.bfloat16)
                if gran is None:
                    _ag_case(c, x, w, group, tokens, k)
                else:
                    _ag_fp8_case(c, x, w, group, tokens, k, gran)
            op = OP_OF[pass_]
            key_args = {"m": tokens, "n": n, "k": k, "world": world, "device": dev, **c.plan}
            base = {"suite": "async_tp", "case": f"{name} {layer} T{tokens} tp{world}" + (f" {gran}" if gran else ""),
                    "pass": pass_, "model": name, "layer": layer, "tokens": tokens, "world": world, "m": tokens,
                    "n": n, "k": k, "dtype": "fp8" if gran else "bf16", "flops": 2 * tokens * n * k,
                    "timing": "wall", "transport": transport.name, "transport_reason": transport.reason}
            if gran:
                base["granularity"] = gran
            t_comm = _time(c.comm, dev, warmup, iters).median_ms
            t_gemm = _time(c.gemm, dev, warmup, iters).median_ms
            base.update(comm_ms=t_comm, gemm_ms=t_gemm)
            plan = async_tp_plan(op, transport_name=transport.name, **key_args)
            providers = [(BASELINE, c.unfused, "baseline", {}),
                         (TORCH_SYMM, symm_reason or c.torch_symm, "reference", {}),
                         (TURBO, lambda c=c: c.turbo(None, None), "turbo",
                          {"splits": plan.num_splits, "order": plan.order, "plan": plan.source})]
            providers += [(cname, lambda c=c, s=s, o=o: c.turbo(s, o), "turbo",
                           {"splits": s, "order": o, "plan": "given"}) for cname, (s, o) in CANDIDATE_NAMES.items()]
            case_rows = []
            times = {}
            for pname, fn, role, fields in providers:
                if wanted is not None and pname != BASELINE and pname not in wanted:
                    continue
                row = dict(base, provider=pname, role=role, baseline=BASELINE, **fields)
                if isinstance(fn, str):
                    row["status"] = fn
                    case_rows.append(row)
                    continue
                try:
                    e = c.err(fn())
                    t = _time(fn, dev, warmup, iters)
                    med = t.median_ms
                    times[pname] = med
                    row.update(status="ok", median_ms=med, p10_ms=t.p10_ms, p90_ms=t.p90_ms, max_rel_err=e,
                               tflops=base["flops"] / med / 1e9,
                               ratio=times[BASELINE] / med if BASELINE in times else None,
                               overlap=(t_comm + t_gemm - med) / max(min(t_comm, t_gemm), 1e-9))
                except Exception as exc:  # a provider that fails gets a row saying why; the others run
                    row["status"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
                case_rows.append(row)
            _mark_best(case_rows, op, key_of(op, transport=transport.name, **key_args),
                       heuristic(op, transport.name, world))
            rows += case_rows
    return rows


def _mark_best(case_rows: list[dict], op: str, key: tuning.Key, heur: tuple[int, str]) -> None:
    """Mark the fastest candidate of a case ``best``, with what ``record_choice`` needs."""
    timed = [r for r in case_rows if r["provider"] in CANDIDATE_NAMES and r["status"] == "ok"]
    if not timed:
        return
    best = min(timed, key=lambda r: r["median_ms"])
    heur_row = next((r for r in timed if (r["splits"], r["order"]) == heur), None)
    best.update(best=True, tune_op=op, tune_key=key.to_json(),
                heuristic_ms=heur_row["median_ms"] if heur_row is not None else None)


def record_best(rows: list[dict]) -> str | None:
    """Record every ``best`` row's choice in the tuning database and save it to ``TURBO_TUNING_DB``
    when that names a file (returns the path, else None: nothing recorded)."""
    path = os.environ.get(tuning.ENV_DB, "").strip()
    best = [r for r in rows if r.get("best")]
    if not path or not best:
        return None
    for r in best:
        heur = r.get("heuristic_ms")
        record_choice(r["tune_op"], tuning.Key.from_json(r["tune_key"]), r["splits"], r["order"],
                      time_us=r["median_ms"] * 1e3, heuristic_time_us=heur * 1e3 if heur is not None else None)
    saved = tuning.save(path, meta={"by": "turbo bench async-tp"})
    for r in best:
        r["tuning_db"] = saved
    return saved


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None, world: int | None = None
        ) -> list[dict]:
    """Rows as the module docstring describes (``providers``: restrict to these names, the baseline
    always timed; ``include_reference`` is unused)."""
    chosen = _models(quick, models)
    if providers is not None:
        unknown = [p for p in providers if p not in PROVIDERS]
        if unknown:
            raise ValueError(f"providers: unknown {', '.join(unknown)} (async-tp has {', '.join(PROVIDERS)})")
    tokens = tokens or (64 if quick else 8192)
    world, backend = ranks.world_and_backend(device, world)
    if world < 2:
        return [{"suite": "async_tp", "case": f"{name} {layer} T{tokens}" + (f" {gran}" if gran else ""),
                 "pass": pass_, "model": name, "provider": p, "status": f"skipped: needs 2 or more {device} devices "
                 f"(found {world})"} for name, layers in chosen.items() for pass_, layer, _, _, gran in _cases(layers, 1)
                for p in PROVIDERS if providers is None or p == BASELINE or p in providers]
    if tokens % world:
        raise ValueError(f"tokens: {tokens} rows do not split over {world} ranks")
    rows = ranks.spawn(_rank_rows, world, backend, {"models": chosen, "tokens": tokens, "providers": providers,
                                                    "warmup": warmup, "iters": iters}, progress, "async-tp")
    record_best(rows)
    return rows


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != BASELINE else ""
    overlap = f" ov{r['overlap']:+.2f}" if r.get("overlap") is not None and provider != BASELINE else ""
    best = "*" if r.get("best") else ""
    err = f" [{r['max_rel_err']:.1e}]" if r.get("max_rel_err") is not None else ""
    return f"{r['tflops']:.4g}{best}{ratio}{overlap}{err}"


LEGEND = ("cells: TFLOP/s by the wall clock per call; *: the fastest candidate (the tuned choice); (1.23x): the "
          "unfused time / this provider's; ov+0.50: overlap = (comm + gemm - time) / min(comm, gemm), 1 when the "
          "shorter is hidden entirely, 0 when serial; [1.0e-03]: max|out - ref| / max|ref| against float64 math")


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s per provider, the ratio to the unfused composition, the overlap, the error;
    then the transport and where the tuned choices went."""
    print_tables(rows, console, title="turbo bench async-tp: TFLOP/s (ratio to unfused) overlap [rel err vs float64]",
                 cell=_cell, legend=LEGEND)
    seen = {(r["transport"], r.get("transport_reason")) for r in rows if r.get("transport")}
    for name, reason in sorted(seen, key=str):
        console.print(f"transport: {name}" + (f" ({reason})" if reason else ""), markup=False, soft_wrap=True)
    saved = {r["tuning_db"] for r in rows if r.get("tuning_db")}
    for path in saved:
        count = sum(1 for r in rows if r.get("tuning_db") == path)
        console.print(f"tuned choices: {count} recorded in {path}", markup=False, soft_wrap=True)
