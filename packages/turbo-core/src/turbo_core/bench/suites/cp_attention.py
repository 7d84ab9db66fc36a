"""``turbo bench cp-attention``: context-parallel attention (``flash_attn_usp_func`` /
``flash_attn_fp8_usp_func``) across ``world`` processes that the suite starts itself, beside the
single-GPU kernel's ideal scaling and PyTorch's own context parallelism, in the same run.

Processes (:mod:`turbo_core.bench.ranks`, as ``moe-dispatch``): NCCL/RCCL with one GPU a rank on
``cuda`` (``world``: ``--world``, default the visible GPUs up to 8), gloo on the CPU (default 2);
fewer than 2 ranks: every row says so.

Cases, per model (``--models``): Llama-3.1-8B attention (32 query heads, 8 key/value heads, head
dim 128) and Llama-3.1-70B (64, 8, 128), batch 1, a total sequence of 32k, 64k and 128k tokens
(``--tokens``: that one sequence instead), causal; bf16 and FP8 (E4M3, per 64-row block scales:
``flash_attn_fp8_*``). ``--quick``: 4 query and 2 key/value heads of dim 16 at sequence 64 and 128.
Passes (``--passes``): ``fwd``, the training forward (inputs that require grad); ``bwd``,
``torch.autograd.grad`` of one forward's output (graph retained, the forward outside the timed region).

Layout: each rank holds ``seq / world`` tokens of the sequence, split zig-zag as the ops expect under
a causal mask (``ring_layout="zigzag"``, :func:`turbo_core.ops.usp_positions`): a ring of ``R``
ranks gives ring rank ``r`` chunks ``r`` and ``2R - 1 - r`` of ``2R``; a Ulysses group of ``U``
splits that into ``U`` consecutive slices. The sequence must divide by ``2 * world``.

Providers:

- ``ideal`` (the baseline of ``ratio``): the single-GPU kernel (``flash_attn_func`` /
  ``flash_attn_fp8_func``) on each rank alone, over the rank's share of the sequence taken as a
  sequence of its own (``seq / world`` tokens, every head, causal), no communication. Its TFLOP/s is
  the single-GPU kernel's throughput on 1/world of the sequence, times world:
  ``world * flops(seq / world) / local_ms``, ``local_ms`` the slowest rank's median. Its ``median_ms``
  is the time of the whole case at that throughput, ``flops(seq) / (world * flops(seq / world)) *
  local_ms`` (``world * local_ms`` under the causal flop count), so that every time ratio against it
  is a throughput ratio.
- ``torch:context_parallel``: ``torch.distributed.tensor.experimental.context_parallel`` over a
  one-dimensional ``DeviceMesh`` of all ranks, SDPA inside, with torch's defaults (its head-tail
  load balancing, which is the zig-zag split of a ring of ``world``, and its key/value rotation);
  grouped-query attention through SDPA's ``enable_gqa``, or, where that fails, k and v repeated to
  the query heads (the row's note says which). bf16 only. Where it cannot run the row says why:
  FP8 (SDPA has no FP8 attention), the CPU (torch's error: its ring handles SDPA's CUDA kernels only),
  a torch without it.
- ``turbo:ulysses`` (all ranks one Ulysses group), ``turbo:ring`` (all ranks one ring),
  ``turbo:both`` (Ulysses groups of 2 consecutive ranks inside, rings of ``world / 2`` ranks
  outside; an even world of 4 or more; the note names the factorization). Their attention calls
  run on the dispatcher's selection, named in ``backend``. ``--providers`` narrows these and
  ``torch:context_parallel``; ``ideal`` always runs.

Metric: TFLOP/s = the whole case's flops (counted as in ``turbo bench attention``: causal pairs
``seq^2 / 2``, ``4 h_q pairs d`` forward, 2.5x that backward) / the slowest rank's median of
barrier-started timings (CUDA events; the wall clock on the CPU). ``ratio``: the ideal's
``median_ms`` / the provider's (its fraction of the ideal throughput); ``torch_cp_ratio``: torch's
CP time / the provider's, where both ran. ``peak_fraction``: of ``world`` times the GPU's datasheet peak.

Accuracy, before timing, on batch 0, key/value head 0 and its query heads (``checked``): every
rank's rows of out (``fwd``) or dq, dk and dv (``bwd``) against float64 attention over the whole
sequence (``turbo_core.bench.suites.attention.reference_slice``), ``max_rel_err`` = the worst over
ranks and tensors of ``max|err| / max|ref|``, ``snr_db`` the lowest SNR; the ideal against float64
of its own share. A bf16 row above the bf16 tolerance, or an FP8 row below 20 dB, gets the status
``inaccurate: ...`` (its times are kept).

Rows: suite, case, model, pass, mode (``bf16`` / ``fp8``: the report's tables split on it), dtype,
mask, batch, seq_q, seq_kv, h_q, h_kv, d_qk, d_v, causal, world, method, ulysses_size, ring_size,
ring_layout, flops, checked, tolerance, provider, role, baseline, status, median_ms, p10_ms,
p90_ms, tflops, ratio, torch_cp_ratio, peak_fraction, max_rel_err, snr_db, backend, note; the
ideal also local_seq and local_ms.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist

from turbo_core.bench import ranks
from turbo_core.bench.console import print_tables
from turbo_core.bench.runner import peak_tflops
from turbo_core.bench.suites.attention import AttnCase, reference_slice, tolerance_of
from turbo_core.dispatch import select
from turbo_core.dispatch.specs.attention import AttentionFp8FwdArgs, AttentionFwdArgs
from turbo_core.ops import (
    flash_attn_fp8_func,
    flash_attn_fp8_usp_func,
    flash_attn_func,
    flash_attn_usp_func,
    usp_positions,
)
from turbo_core.testing.context_parallel import FP8_SNR_DB
from turbo_core.testing.numerics import snr_db

__all__ = ["MODELS", "PASSES", "PROVIDERS", "factorization", "local_error", "method_skip", "print_table", "run"]

PASSES = ("fwd", "bwd")
DTYPES = ("bf16", "fp8")
METHODS = ("ulysses", "ring", "both")
IDEAL = "ideal"
TORCH_CP = "torch:context_parallel"
PROVIDERS = (IDEAL, TORCH_CP, *(f"turbo:{m}" for m in METHODS))
#: The rows' ``method`` of the providers that are not a turbo method.
METHOD_OF = {IDEAL: "ideal", TORCH_CP: "torch"}
SEQS = (32768, 65536, 131072)


@dataclass(frozen=True)
class CpModel:
    name: str
    h_q: int
    h_kv: int
    d: int
    seqs: tuple[int, ...] = SEQS


MODELS = {"llama3.1-8b": CpModel("llama3.1-8b", 32, 8, 128), "llama3.1-70b": CpModel("llama3.1-70b", 64, 8, 128)}
QUICK = CpModel("quick", 4, 2, 16, (64, 128))


def factorization(method: str, world: int) -> tuple[int, int]:
    """``(ulysses size, ring size)`` of ``method`` over ``world`` ranks (``both``: 2 x world / 2)."""
    return {"ulysses": (world, 1), "ring": (1, world), "both": (2, world // 2)}[method]


def method_skip(method: str, world: int, m: CpModel) -> str | None:
    """Why ``method`` cannot run model ``m`` over ``world`` ranks (None: it can)."""
    if method == "both" and (world < 4 or world % 2):
        return f"skipped: both (Ulysses 2 inside, ring world / 2 outside) needs an even world >= 4, got {world}"
    u, _ = factorization(method, world)
    if m.h_q % u or m.h_kv % u:
        return f"skipped: {m.h_q} query / {m.h_kv} key-value heads do not split over a Ulysses group of {u}"
    return None


def _models(quick: bool, names: list[str] | None) -> list[CpModel]:
    if quick:
        return [QUICK]
    if names:
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            raise ValueError(f"models: unknown {', '.join(unknown)} (cp-attention has {', '.join(MODELS)})")
        return [MODELS[n] for n in names]
    return list(MODELS.values())


def _checked(values, allowed, what: str) -> tuple[str, ...]:
    if not values:
        return tuple(allowed)
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ValueError(f"{what}: unknown {', '.join(map(str, bad))} (cp-attention has {', '.join(allowed)})")
    return tuple(v for v in allowed if v in values)


# ---- one rank ----------------------------------------------------------------------------------


def _groups(world: int, rank: int) -> dict[str, tuple]:
    """``method -> (ulysses_group, ring_group)``; ``both``: Ulysses groups of consecutive ranks
    ``{2i, 2i + 1}``, rings of the ranks with the same Ulysses rank (every rank creates every group)."""
    out = {"ulysses": (dist.group.WORLD, None), "ring": (None, dist.group.WORLD)}
    if world >= 4 and world % 2 == 0:
        u, r = factorization("both", world)
        uly = [dist.new_group([i * u + j for j in range(u)]) for i in range(r)]
        ring = [dist.new_group([i * u + j for i in range(r)]) for j in range(u)]
        out["both"] = (uly[rank // u], ring[rank % u])
    return out


def _positions(seq: int, method: str, world: int, rank: int, dev) -> torch.Tensor:
    u, r = factorization(method, world)
    return usp_positions(seq, ulysses_rank=rank % u, ulysses_size=u, ring_rank=rank // u, ring_size=r,
                         ring_layout="zigzag").to(dev)


def _timed(call, q, k, v, dout, pass_: str):
    """``(fn, first results)``: the forward on leaves that require grad, or the backward of one
    forward's output; results ``[out]`` or ``[dq, dk, dv]`` in the layout of ``q``."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = call(q, k, v)
    if pass_ == "fwd":
        return (lambda: call(q, k, v)), [out.detach()]
    grads = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    return (lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)), list(grads)


def _agree(ok: bool, dev) -> bool:
    """Whether every rank's ``ok`` holds."""
    t = torch.tensor([0.0 if ok else 1.0], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() == 0.0


def local_error(got: list[torch.Tensor], refs: list[torch.Tensor], pos: torch.Tensor) -> tuple[float, float]:
    """``(max_rel_err, snr_db)`` of one rank: its results ``got`` (bshd ``[1, s_local, h, d]``: out, or
    dq, dk, dv) on the checked heads (the first ``refs[i].shape[1]``: the query heads of key/value
    head 0, or head 0) against the rows ``pos`` (the rank's global positions) of the float64
    reference of the whole sequence (``[seq, heads, d]``); errors relative to each reference's
    ``max|.|`` over the whole sequence, the worst tensor's."""
    err, snr = 0.0, math.inf
    for t, ref in zip(got, refs, strict=True):
        mine = t[0, :, :ref.shape[1]].double()
        want = ref[pos]
        err = max(err, (mine - want).abs().max().item() / (ref.abs().max().item() or 1.0))
        snr = min(snr, snr_db(want, mine))
    return err, snr


def _error(got: list[torch.Tensor], refs: list[torch.Tensor], pos: torch.Tensor, dev) -> tuple[float, float]:
    """:func:`local_error` over every rank: the largest error, the lowest SNR (capped at 1e9 dB)."""
    err, snr = local_error(got, refs, pos)
    both = torch.tensor([err, -min(snr, 1e9)], dtype=torch.float64, device=dev)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return both[0].item(), -both[1].item()


def _reference(case: AttnCase, q, k, v, dout) -> list[torch.Tensor]:
    return reference_slice(case, {"q": q, "k": k, "v": v, "dout": dout, "sink": None})


def _backend(fp8: bool, q, k, v) -> str | None:
    try:
        if fp8:
            return select("attention_fp8_fwd", AttentionFp8FwdArgs(q, k, v, causal=True)).backend
        return select("attention_fwd", AttentionFwdArgs(q, k, v, causal=True)).backend
    except Exception:  # noqa: BLE001 - no backend: the provider's own call says why
        return None


def _attempt(fn_of, inputs, pass_: str, dev, warmup: int, iters: int):
    """``(timing, first results)`` of ``fn_of`` on ``inputs`` (:func:`_timed`) when every rank's
    first call went through, else ``(why, None)`` on every rank."""
    try:
        fn, res = _timed(fn_of, *inputs, pass_)
        why = None
    except Exception as exc:  # noqa: BLE001 - the row says why
        fn, res, why = None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if not _agree(why is None, dev):
        return why or "another rank failed", None
    return ranks.time_calls(fn, dev, warmup, iters), res


def _torch_cp(mesh, q, k, v, dout, pass_: str, dev, warmup: int, iters: int):
    """``(timing or why not, results [bshd], note)`` of torch's context parallelism on the global
    ``q, k, v, dout`` (bshd): ``context_parallel`` shards them head-tail (the ring's zig-zag)."""
    from torch.distributed.tensor.experimental import context_parallel

    group = q.shape[2] // k.shape[2]
    tries = [("enable_gqa", True), ("k and v repeated to the query heads", False)] if group > 1 else [(None, False)]
    bufs = [t.transpose(1, 2).contiguous() for t in (q, k, v, dout)]
    failed = []
    with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2] * 4, no_restore_buffers=set(bufs)):
        for note, native in tries:
            def call(a, b, c, native=native):
                if group > 1 and not native:
                    b, c = b.repeat_interleave(group, dim=1), c.repeat_interleave(group, dim=1)
                extra = {"enable_gqa": True} if native else {}
                return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True, **extra)

            t, res = _attempt(call, bufs, pass_, dev, warmup, iters)
            if res is None:
                failed.append(t)
                continue
            if note is not None:
                note = f"GQA: {note}" + (f" (enable_gqa failed: {failed[0]})" if failed else "")
            return t, [r.transpose(1, 2) for r in res], note
    return f"declined: torch's context_parallel failed on {dev.type}: {failed[-1]}", None, None


@dataclass
class _Case:
    """One model and sequence on one rank: the global inputs (bshd, bf16) and this rank's share."""

    m: CpModel
    seq: int
    world: int
    rank: int
    dev: torch.device
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor
    shares: dict = field(default_factory=dict)

    @property
    def local(self) -> int:
        return self.seq // self.world

    def positions(self, method: str) -> torch.Tensor:
        """The global positions of this rank's rows under ``method`` (``ring``: also the ideal's
        share and torch's head-tail shard)."""
        return _positions(self.seq, method, self.world, self.rank, self.dev)

    def share(self, method: str) -> tuple[torch.Tensor, ...]:
        """This rank's rows of q, k, v and dout under ``method`` (made once)."""
        if method not in self.shares:
            pos = self.positions(method)
            self.shares[method] = tuple(x[:, pos] for x in (self.q, self.k, self.v, self.dout))
        return self.shares[method]


def _provider_result(c: _Case, provider: str, pass_: str, fp8: bool, groups: dict, mesh, refs, args: dict):
    """``(timing or why not, results, positions, reference, note)`` of one provider on the case."""
    warmup, iters = args["warmup"], args["iters"]
    if provider == TORCH_CP:
        if fp8:
            return "skipped: torch's context_parallel runs SDPA, which has no FP8 attention", None, None, None, None
        if isinstance(mesh, str):
            return mesh, None, None, None, None
        t, res, note = _torch_cp(mesh, c.q, c.k, c.v, c.dout, pass_, c.dev, warmup, iters)
        return t, res, c.positions("ring"), refs["whole"], note
    if provider == IDEAL:
        call = flash_attn_fp8_func if fp8 else flash_attn_func

        def fn_of(a, b, x, call=call):
            return call(a, b, x, causal=True)

        inputs, pos, ref = c.share("ring"), torch.arange(c.local, device=c.dev), refs["local"]
    else:
        method = provider.removeprefix("turbo:")
        call = flash_attn_fp8_usp_func if fp8 else flash_attn_usp_func
        ug, rg = groups[method]

        def fn_of(a, b, x, call=call, ug=ug, rg=rg):
            return call(a, b, x, causal=True, ulysses_group=ug, ring_group=rg, ring_layout="zigzag")

        inputs, pos, ref = c.share(method), c.positions(method), refs["whole"]
    t, res = _attempt(fn_of, inputs, pass_, c.dev, warmup, iters)
    return (f"error: {t}" if res is None else t), res, pos, ref, None


def _case_rows(c: _Case, groups: dict, mesh, args: dict) -> list[dict]:
    m, seq, world = c.m, c.seq, c.world
    g = m.h_q // m.h_kv
    device_name = torch.cuda.get_device_name(c.dev) if c.dev.type == "cuda" else ""
    rows = []
    for pass_ in args["passes"]:
        whole = AttnCase(m.name, None, pass_, 1, seq, seq, m.h_q, m.h_kv, m.d, m.d, True)
        part = AttnCase(m.name, None, pass_, 1, c.local, c.local, m.h_q, m.h_kv, m.d, m.d, True)
        refs = {"whole": _reference(whole, c.q, c.k, c.v, c.dout), "local": _reference(part, *c.share("ring"))}
        for dtype in DTYPES:
            fp8 = dtype == "fp8"
            tol = FP8_SNR_DB if fp8 else tolerance_of(torch.bfloat16)
            base = {"suite": "cp-attention", "case": f"{m.name} {pass_} s{seq} {dtype} world {world}",
                    "model": m.name, "pass": pass_, "mode": dtype, "dtype": dtype, "mask": "causal", "batch": 1,
                    "seq_q": seq, "seq_kv": seq, "h_q": m.h_q, "h_kv": m.h_kv, "d_qk": m.d, "d_v": m.d,
                    "causal": True, "world": world, "ring_layout": "zigzag", "flops": whole.flops,
                    "checked": f"batch 0, kv head 0, query heads 0-{g - 1}, every rank's rows",
                    "tolerance": tol, "baseline": IDEAL}
            peak = peak_tflops(device_name, dtype) if device_name else None
            times: dict[str, float] = {}
            for provider in (p for p in PROVIDERS if p == IDEAL or p in args["providers"]):
                method = METHOD_OF.get(provider) or provider.removeprefix("turbo:")
                skip = method_skip(method, world, m) if method in METHODS else None
                u, r = (None, None) if skip or method == "ideal" else (1, world) if method == "torch" else \
                    factorization(method, world)
                row = {**base, "provider": provider, "method": method, "ulysses_size": u, "ring_size": r,
                       "role": "baseline" if provider == IDEAL else "reference" if provider == TORCH_CP else "turbo"}
                if method == "both" and not skip:
                    row["note"] = f"Ulysses {u} inside x ring {r} outside"
                if method in ("ideal", *METHODS) and not skip:
                    row["backend"] = _backend(fp8, *c.share("ring" if method == "ideal" else method)[:3])
                t, res, pos, ref, note = (skip, None, None, None, None) if skip else \
                    _provider_result(c, provider, pass_, fp8, groups, mesh, refs, args)
                if note:
                    row["note"] = note
                if res is None:
                    rows.append({**row, "status": t})
                    continue
                err, snr = _error(res, ref, pos, c.dev)
                med, p10, p90 = t.median_ms, t.p10_ms, t.p90_ms
                if provider == IDEAL:  # the whole case at world x the kernel's throughput on the share
                    scale = whole.flops / (world * part.flops)
                    row.update(local_seq=c.local, local_ms=med)
                    med, p10, p90 = med * scale, p10 * scale, p90 * scale
                times[provider] = med
                tflops = whole.flops / med / 1e9
                row.update(status="ok", median_ms=med, p10_ms=p10, p90_ms=p90, tflops=tflops,
                           ratio=times[IDEAL] / med if IDEAL in times else None,
                           torch_cp_ratio=times[TORCH_CP] / med if TORCH_CP in times else None,
                           peak_fraction=tflops / (world * peak) if peak else None, max_rel_err=err, snr_db=snr)
                if fp8 and snr < tol:
                    row["status"] = f"inaccurate: SNR {snr:.1f} dB < {tol:.0f} dB against float64"
                elif not fp8 and err > tol:
                    row["status"] = f"inaccurate: max_rel_err {err:.2e} > {tol:.2e} against float64"
                rows.append(row)
                del res
    return rows


def _mesh(dev, wanted: bool):
    """A one-dimensional DeviceMesh of all ranks, or why there is none (None: not asked for)."""
    if not wanted:
        return None
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel  # noqa: F401
    except ImportError as exc:
        return f"skipped: this torch ({torch.__version__}) has no context_parallel ({exc})"
    return init_device_mesh(dev.type, (dist.get_world_size(),))


def _rank_rows(rank: int, world: int, group, dev: torch.device, args: dict) -> list[dict]:
    groups = _groups(world, rank)
    mesh = _mesh(dev, TORCH_CP in args["providers"])
    rows = []
    for m in args["models"]:
        model = CpModel(**{**m, "seqs": tuple(m["seqs"])})
        for seq in args["seqs"] or model.seqs:
            gen = torch.Generator(device=dev).manual_seed(1234 + seq)  # the same inputs on every rank
            q, k, v, dout = (torch.randn((1, seq, h, model.d), generator=gen, device=dev).to(torch.bfloat16)
                             for h in (model.h_q, model.h_kv, model.h_kv, model.h_q))
            rows += _case_rows(_Case(model, seq, world, rank, dev, q, k, v, dout), groups, mesh, args)
            del q, k, v, dout
    return rows


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        passes: list[str] | None = None, world: int | None = None) -> list[dict]:
    """Rows as the module docstring describes. ``tokens``: the total sequence (default 32k, 64k and
    128k; ``quick``: 64 and 128); ``world``: the ranks (see :func:`turbo_core.bench.ranks.world_and_backend`);
    ``include_reference`` is unused (the attention calls run on the dispatcher's selection)."""
    chosen = _models(quick, models)
    kept = _checked(providers, PROVIDERS, "providers")
    passes_ = _checked(passes, PASSES, "passes")
    world, backend = ranks.world_and_backend(device, world)
    seqs = [tokens] if tokens else sorted({s for m in chosen for s in m.seqs})
    if world < 2:
        return [{"suite": "cp-attention", "case": f"{m.name} {p} s{s} {dt} world {world}", "model": m.name,
                 "pass": p, "mode": dt, "provider": prov,
                 "status": f"skipped: needs 2 or more {device} devices (found {world})"}
                for m in chosen for s in ([tokens] if tokens else m.seqs) for p in passes_ for dt in DTYPES
                for prov in kept]
    for s in seqs:
        if s < 1 or s % (2 * world):
            raise ValueError(f"tokens: a sequence of {s} does not split into 2 zig-zag chunks per rank over "
                             f"{world} ranks (it must divide by {2 * world})")
    args = {"models": [asdict(m) for m in chosen], "seqs": [tokens] if tokens else None, "providers": list(kept),
            "passes": list(passes_), "warmup": warmup, "iters": iters}
    return ranks.spawn(_rank_rows, world, backend, args, progress, "cp-attention")


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != IDEAL else ""
    vs_torch = f" {{{r['torch_cp_ratio']:.2f}x}}" if r.get("torch_cp_ratio") and provider != TORCH_CP else ""
    err = f" [{r['max_rel_err']:.1e}]" if r.get("max_rel_err") is not None else ""
    return f"{r['tflops']:.4g}{ratio}{vs_torch}{err}"


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s per provider, (the ratio to the ideal), {the ratio to torch's CP}, [rel err]."""
    print_tables(rows, console, cell=_cell,
                 title="turbo bench cp-attention: TFLOP/s (ratio to ideal) {ratio to torch:context_parallel} "
                       "[max rel err vs float64]",
                 legend="cells: TFLOP/s of the whole case over all ranks; (0.80x): the ideal's time / this "
                        "provider's (ideal: the single-GPU kernel's throughput on 1/world of the sequence, "
                        "times world);\n{1.20x}: torch context_parallel's time / this provider's; [1.0e-03]: "
                        "max|out - ref| / max|ref| against float64 attention over the whole sequence")
