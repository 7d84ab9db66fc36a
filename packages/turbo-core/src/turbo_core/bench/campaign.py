"""Tuning campaigns (``turbo tune``): time backends and kernel configs per key, keep the winners.

For each case (a key and random arguments of it):

1. the *heuristic* choice: what the selection order picks with every database off;
2. every candidate backend (the available ones with a kernel that accepts the call, plus the
   heuristic's) with its own heuristics (no database): the baseline of its configs;
3. for a backend that offers a search space (``turbo_core.tuning.spaces``), each candidate config,
   forced through the normal dispatch path (``use_backend`` + ``turbo_core.tuning.forcing``); a
   config whose first output is off the reference by more than the tolerance is rejected; the best
   one is kept if it beats the backend's heuristics by more than ``min_gain``;
4. the backend choice: the fastest backend, each timed with the config dispatch would then use.

Timing: :func:`turbo_core.timing.measure` (CUDA events on the current stream and a synchronize,
inputs rotated beyond L2; wall clock on the CPU), median. ``measure`` picks its clock from the first
tensor of an input set (a set without one is refused), and an argument object (``GemmArgs``) is not
a tensor: each set is handed to it as ``(tensor of the arguments on the device, arguments)``
(:func:`measure_us`).

Sanity guard (``turbo_core.tuning.plausible``): a row whose fastest time implies more than the
arch's peak, or more than twice the best baseline throughput of the run, is marked ``invalid`` and
not stored; :func:`check` marks such rows the same way.

:func:`check` re-times a database's stored choices against the heuristics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from turbo_core import timing
from turbo_core.bench.runner import tensor_bytes
from turbo_core.bench.suites import gemm as gemm_suite
from turbo_core.bench.suites import gemm_fp8 as fp8_suite
from turbo_core.dispatch import tuning_keys
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.dispatcher import call, decline_reason, select
from turbo_core.dispatch.manager import use_backend
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.platform import platform_of
from turbo_core.plugins.host import get_host
from turbo_core.tuning import active as _active
from turbo_core.tuning import keys as _keys
from turbo_core.tuning import plausible, versions
from turbo_core.tuning.db import ConfigChoice, Entry, TuningDB
from turbo_core.tuning.spaces import get_space, spaces

__all__ = ["Case", "CheckRow", "TuneRow", "check", "gemm_cases", "gemm_fp8_cases", "measure_us", "tolerance", "tune"]

#: ``max|out - ref| / max|ref|`` allowed for a candidate, by operand dtype (bf16/fp16 outputs round
#: to 8/11 bits; fp32 GEMMs may run as tf32x3). FP8 GEMMs are measured against the product of the
#: dequantized operands, so only the result's rounding and the accumulation differ: the tolerance
#: of the result dtype, at least bf16's (Hopper's FP8 tensor cores add at reduced precision).
TOLERANCE = {"bf16": 2e-2, "fp16": 1e-2, "fp32": 1e-3}


def tolerance(key: _keys.Key) -> float:
    """The candidate tolerance of a key (see :data:`TOLERANCE`)."""
    if key.dtypes and key.dtypes[0].startswith("float8"):
        return max(TOLERANCE.get(key.dtypes[-1], 1e-2), TOLERANCE["bf16"])
    return TOLERANCE.get(key.dtypes[0], 1e-2)


@dataclass
class Case:
    primitive: str
    key: _keys.Key
    label: str
    make: Callable[[torch.Generator], Any]  # one random argument object of the key
    flops: int = 0


@dataclass
class TuneRow:
    """One case of a campaign. ``status``: ``ok``, ``invalid: ...`` (a time failed the sanity guard;
    nothing stored), ``no backend ran: ...``, ``skipped: ...``, ``error: ...``. Times in microseconds."""

    label: str
    key: _keys.Key
    status: str
    backend: str | None = None
    heuristic: str | None = None
    times_us: dict[str, float] = field(default_factory=dict)     # backend -> its time (tuned config if kept)
    heuristic_time_us: float | None = None
    config_gain: dict[str, float] = field(default_factory=dict)  # backend -> heuristic time / tuned time
    rejected: dict[str, str] = field(default_factory=dict)       # "BACKEND config" -> why
    flops: int = 0                                               # floating-point operations of one call
    baseline_us: dict[str, float] = field(default_factory=dict)  # backend -> its time with its heuristics
    fastest: tuple[str, float] | None = None                     # (what, us): the fastest time measured

    @property
    def speedup(self) -> float | None:
        if self.backend is None or self.heuristic_time_us is None:
            return None
        return self.heuristic_time_us / self.times_us[self.backend]

    @property
    def tflops(self) -> dict[str, float]:
        """Backend -> TFLOP/s of ``times_us`` (empty without ``flops``)."""
        if not self.flops:
            return {}
        return {b: plausible.tflops(self.flops, t) for b, t in self.times_us.items()}


@dataclass
class CheckRow:
    label: str
    what: str            # "backend TRITON" or "TRITON config"
    status: str          # ok | regression | wrong | stale | skipped: ... | error: ...
    stored_us: float | None = None
    heuristic_us: float | None = None
    heuristic: str | None = None
    flops: int = 0       # floating-point operations of one call (0: unknown, no sanity guard)
    config: bool = False  # a stored kernel config was forced for stored_us (else: the backend's heuristics)
    own_heuristics_us: float | None = None  # the stored backend with its heuristics, when not heuristic_us
    arch: str = ""
    dtype: str = ""      # operand dtype name of the key

    @property
    def ratio(self) -> float | None:
        """Heuristic time / stored time (above 1: the stored choice is faster)."""
        if self.stored_us is None or self.heuristic_us is None or self.stored_us == 0:
            return None
        return self.heuristic_us / self.stored_us


# -- cases -----------------------------------------------------------------------------------------

def parse_shape(text: str) -> tuple[int, int, int, str]:
    """``"MxNxK"`` or ``"MxNxK:LAYOUT"`` (layout NN/NT/TN/TT, default NT) -> ``(m, n, k, layout)``."""
    dims, _, layout = text.partition(":")
    layout = (layout or "NT").upper()
    parts = dims.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--shapes: expected MxNxK or MxNxK:LAYOUT with positive sizes, got {text!r}")
    if layout not in ("NN", "NT", "TN", "TT"):
        raise ValueError(f"--shapes: layout must be NN, NT, TN or TT, got {layout!r} in {text!r}")
    m, n, k = (int(p) for p in parts)
    return m, n, k, layout


def _shape_items(quick: bool, shapes: Sequence[str] | None, models: Sequence[str] | None, tokens: int | None,
                 passes: Sequence[str] | None) -> list[tuple[str, int, int, int, str, str]]:
    """``(label, m, n, k, layout, pass)`` of the given ``MxNxK[:LAYOUT]`` shapes (read as forward
    passes), else of the gemm suite's cases (``--quick``: its tiny shapes) of ``passes``."""
    if shapes:
        return [(f"{m}x{n}x{k} {layout}", m, n, k, layout, "fwd") for m, n, k, layout in map(parse_shape, shapes)]
    return [(c.label, c.m, c.n, c.k, c.layout, c.pass_)
            for c in gemm_suite.cases(tokens or (32 if quick else 8192), quick, list(models) if models else None)
            if not passes or c.pass_ in passes]


def gemm_cases(*, arch: str, dtype: torch.dtype, device: str, quick: bool, shapes: Sequence[str] | None = None,
               models: Sequence[str] | None = None, tokens: int | None = None,
               passes: Sequence[str] | None = None) -> list[Case]:
    """The gemm suite's cases (``turbo_core.bench.suites.gemm``; ``--quick``: its tiny shapes), or
    the given ``MxNxK[:LAYOUT]`` shapes, one case per distinct key."""
    name = _keys.dtype_name(dtype)
    out: dict[_keys.Key, Case] = {}
    for label, m, n, k, layout, _ in _shape_items(quick, shapes, models, tokens, passes):
        key = _keys.Key(arch, (m, n, k), (name, name), layout)
        if key not in out:
            out[key] = Case("gemm", key, label,
                            lambda g, key=key: tuning_keys.gemm_args_for(key, device, g), 2 * m * n * k)
    return list(out.values())


def gemm_fp8_cases(*, arch: str, granularities: Sequence[Any], fmt: Any, device: str, quick: bool,
                   shapes: Sequence[str] | None = None, models: Sequence[str] | None = None,
                   tokens: int | None = None, passes: Sequence[str] | None = None) -> list[Case]:
    """FP8 GEMM cases (bf16 results): the gemm suite's shapes (or ``MxNxK[:LAYOUT]``, read as
    forward passes) at each granularity (TENSORWISE, ROWWISE, BLOCKWISE; MX is not tuned), one per
    distinct key. Each pass quantizes its operands as the FP8 Linear does: BLOCKWISE weights in
    128 x 128 tiles, activations and gradients in 1 x 128 blocks along K; under HYBRID gradients
    are E5M2."""
    grans = fp8_suite.granularities_of(granularities or ["tensorwise", "rowwise", "blockwise"])
    if G.MX_BLOCKWISE in grans:
        raise ValueError("--granularity: MX_BLOCKWISE is not tuned (its kernels have no alternatives to search)")
    out: dict[_keys.Key, Case] = {}
    for label, m, n, k, layout, pass_ in _shape_items(quick, shapes, models, tokens, passes):
        roles = fp8_suite.ROLES.get(pass_, fp8_suite.ROLES["fwd"])
        dts = [_keys.dtype_name(fp8_suite.operand_dtype(fmt, r, device)) for r in roles]
        for g in grans:
            if g == G.BLOCKWISE:
                scaling = "blockwise-" + "".join("2d" if r == "weight" else "1d" for r in roles)
            else:
                scaling = fp8_suite.SHORT[g]
            key = _keys.Key(arch, (m, n, k), (*dts, "bf16"), f"{layout}/{scaling}")
            if key not in out:
                out[key] = Case("gemm_fp8", key, f"{label} {scaling}",
                                lambda gen, key=key: tuning_keys.gemm_fp8_args_for(key, device, gen), 2 * m * n * k)
    return list(out.values())


# -- timing ----------------------------------------------------------------------------------------

def _reference(primitive: str, args: Any) -> torch.Tensor:
    """An independent result to check candidates against: float64 math on the CPU; on a GPU
    ``torch.matmul`` in the operands' dtype (FP8: of the operands dequantized in float32), kept in
    float32 (its rounding is within the tolerance, and model-sized outputs stay a few GB)."""
    if primitive == "gemm_fp8":
        dt = torch.float64 if args.a.device.type == "cpu" else torch.float32
        a = fp8_suite.dequant(args.a, args.a_scale_inv, args.block_size or 1, dt)
        b = fp8_suite.dequant(args.b, args.b_scale_inv, args.block_size or 1, dt)
        c = (a.t() if args.trans_a else a) @ (b.t() if args.trans_b else b)
        return c.t() if args.trans_c else c
    if primitive != "gemm":
        raise ValueError(f"primitive: no reference for {primitive!r}")
    a, b = args.a, args.b
    if a.device.type == "cpu":
        a, b = a.double(), b.double()
    c = (a.t() if args.trans_a else a) @ (b.t() if args.trans_b else b)
    c = c.t() if args.trans_c else c
    return c if c.dtype == torch.float64 else c.float()


def _err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|out - ref| / max|ref|`` (``max|ref|`` of 0 counts as 1), in ``ref``'s dtype."""
    scale = ref.abs().max().item() or 1.0
    return (out.to(ref.dtype) - ref).abs().max().item() / scale


def _first_tensor(obj: Any) -> torch.Tensor | None:
    """The first tensor in ``obj``: a tensor, a dataclass's fields (``GemmArgs``), a tuple, list or
    dict's values, searched in order."""
    if isinstance(obj, torch.Tensor):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif isinstance(obj, dict):
        values = list(obj.values())
    elif isinstance(obj, (tuple, list)):
        values = list(obj)
    else:
        return None
    for v in values:
        t = _first_tensor(v)
        if t is not None:
            return t
    return None


def measure_us(fn: Callable[[Any], Any], sets: list, *, device: str, warmup: int, iters: int) -> float:
    """Median microseconds of ``fn(args)``, ``args`` taken from ``sets`` in rotation, on ``device``.

    ``timing.measure`` chooses its clock from the first element of an input set that is a tensor:
    CUDA events bracketing each call on the current stream, then a synchronize, for a CUDA tensor;
    the wall clock otherwise. An argument object is not a tensor, so each set goes to it as
    ``(anchor, args)``, ``anchor`` a tensor of ``args``, which must be on ``device``: a set that would
    be timed with another clock than the device's is an error, not a time.
    """
    want = torch.device(device).type
    timed = []
    for i, args in enumerate(sets):
        anchor = _first_tensor(args)
        if anchor is None or anchor.device.type != want:
            where = "no tensor" if anchor is None else f"tensors on {anchor.device.type}"
            raise ValueError(f"sets[{i}]: the arguments hold {where}; timing on {device} needs them there")
        timed.append((anchor, args))
    t = timing.measure(lambda _anchor, args: fn(args), timed, warmup=warmup, iters=iters)
    return t.median_ms * 1e3


def _time(primitive: str, backend: str, sets: list, *, device: str, config: dict | None, warmup: int,
          iters: int, ref: torch.Tensor | None = None, tol: float = math.inf) -> tuple[float, float | None]:
    """``(median microseconds, error of the first output or None)`` of ``backend`` on ``sets``
    (timed on ``device``), with ``config`` forced (else the backend's heuristics) and every database
    off."""

    with use_backend(backend), _active.disabled():
        ctx = _active.forcing(backend, primitive, config) if config is not None else contextlib.nullcontext()
        with ctx:
            err = None
            if ref is not None:
                err = _err(call(primitive, sets[0]), ref)
                if not err <= tol:
                    return math.inf, err
            us = measure_us(lambda args: call(primitive, args), sets, device=device, warmup=warmup, iters=iters)
    return us, err


def _flops(primitive: str, key: _keys.Key) -> int:
    """Floating-point operations of one call at ``key`` (0 when unknown: no sanity guard)."""
    if primitive in ("gemm", "gemm_fp8") and len(key.shape) == 3:
        m, n, k = key.shape
        return 2 * m * n * k
    return 0


def _input_sets(case: Case, gen: torch.Generator, device: str) -> list:

    first = case.make(gen)
    if device != "cuda":
        return [first]
    n = timing.copies_needed(tensor_bytes([getattr(first, f.name) for f in dataclasses.fields(first)]))
    return [first] + [case.make(gen) for _ in range(n - 1)]


def _heuristic(primitive: str, args: Any) -> str:

    with _active.disabled():
        return select(primitive, args).backend


def _capable(primitive: str, args: Any, backends: Sequence[str]) -> tuple[list[str], dict[str, str]]:

    prim = get_primitive(primitive)
    platform = platform_of(args.a.device)
    ok, why = [], {}
    for b in backends:
        reason = decline_reason(prim, b, args, platform)
        if reason is None:
            ok.append(b)
        else:
            why[b] = reason
    return ok, why


def _backend_versions(backends: Sequence[str]) -> dict[str, str]:
    """The packages of ``backends``, the libraries their spaces declare, torch for TORCH."""

    registry = get_host().registry
    libs: list[str] = []
    out: dict[str, str] = {}
    for b in backends:
        rec = registry.backend(b)
        if rec is not None:
            out[rec.info.package] = rec.info.version
        if b == "TORCH":
            libs.append("torch")
        for space in _spaces_of(b):
            libs.extend(space.libraries)
    now = versions.current({}, tuple(libs))
    out.update({lib: now[lib] for lib in libs if lib in now})
    return out


def _spaces_of(backend: str):

    return [s for s in spaces() if s.backend == backend]


# -- the campaign ----------------------------------------------------------------------------------

def tune(cases: Sequence[Case], *, backends: Sequence[str], device: str, warmup: int, iters: int,
         configs: bool = True, max_configs: int | None = None, min_gain: float = 0.01,
         time_limit: float | None = None, progress: Callable[[str], None] | None = None, confirm: int = 2,
         ) -> tuple[TuningDB, list[TuneRow]]:
    """Tune every case; returns the database of winners and one report row per case.

    ``confirm``: rounds of the confirmation step (0: none). A kernel config that beat its backend's
    heuristics, and a backend that beat the heuristic's choice, are re-timed against what they beat
    in ``confirm`` alternating rounds (A B, A B); they are kept only if they still win by
    ``min_gain`` on the rounds' medians, which are then the times reported and stored. One timing
    of a search is not enough: a GPU's clocks drift during a campaign (on the H200, 9 of 25
    single-timing wins of a cuBLASLt rank search did not hold in ``--check``)."""
    rows: list[TuneRow] = []
    found: list[tuple[Entry, TuneRow]] = []
    gen = torch.Generator(device=device).manual_seed(0)
    start = time.monotonic()
    for case in cases:
        if time_limit is not None and time.monotonic() - start > time_limit:
            rows.append(TuneRow(case.label, case.key, f"skipped: --time-limit {time_limit:g}s reached"))
            continue
        if progress:
            progress(case.label)
        try:
            entry, row = _tune_case(case, gen, backends=backends, device=device, warmup=warmup, iters=iters,
                                    configs=configs, max_configs=max_configs, min_gain=min_gain, confirm=confirm)
        except Exception as exc:  # one failing case does not lose the others
            rows.append(TuneRow(case.label, case.key, f"error: {type(exc).__name__}: {exc}"))
            continue
        if entry is not None:
            found.append((entry, row))
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    _guard_tune(rows)
    db = TuningDB()
    for entry, row in found:
        if row.status == "ok":
            db.add(entry)
    return db, rows


def _guard_tune(rows: Sequence[TuneRow]) -> None:
    """Mark ``invalid`` every ok row whose fastest time fails ``turbo_core.tuning.plausible``."""
    best: dict[str, float] = {}  # operand dtype -> best baseline TFLOP/s of the run
    for r in rows:
        if r.status == "ok" and r.flops:
            for us in r.baseline_us.values():
                dt = r.key.dtypes[0]
                best[dt] = max(best.get(dt, 0.0), plausible.tflops(r.flops, us))
    for r in rows:
        if r.status != "ok" or r.fastest is None:
            continue
        why = plausible.fault(r.flops, r.fastest[1], arch=r.key.arch, dtype=r.key.dtypes[0],
                              best_baseline_tflops=best.get(r.key.dtypes[0]), what=r.fastest[0])
        if why:
            r.status = f"invalid: {why}"


def _confirm(primitive: str, sets: list, first: tuple[str, dict | None], second: tuple[str, dict | None], *,
             device: str, warmup: int, iters: int, rounds: int) -> tuple[float, float]:
    """Medians (microseconds) of ``first`` and ``second`` (each ``(backend, config or None)``) over
    ``rounds`` alternating timings."""
    a, b = [], []
    for _ in range(rounds):
        for (backend, cfg), acc in ((first, a), (second, b)):
            acc.append(_time(primitive, backend, sets, device=device, config=cfg, warmup=warmup, iters=iters)[0])
    return statistics.median(a), statistics.median(b)


def _tune_case(case: Case, gen: torch.Generator, *, backends, device, warmup, iters, configs, max_configs,
               min_gain, confirm: int = 0) -> tuple[Entry | None, TuneRow]:
    sets = _input_sets(case, gen, device)
    args = sets[0]
    row = TuneRow(case.label, case.key, "ok", flops=case.flops or _flops(case.primitive, case.key))

    def seen(what: str, us: float) -> None:
        if row.fastest is None or us < row.fastest[1]:
            row.fastest = (what, us)

    heur = _heuristic(case.primitive, args)
    row.heuristic = heur
    candidates, declined = _capable(case.primitive, args, list(dict.fromkeys([*backends, heur])))
    ref = _reference(case.primitive, args)
    tol = tolerance(case.key)
    entry = Entry(case.primitive, case.key)
    for b in candidates:
        t_default, err = _time(case.primitive, b, sets, device=device, config=None, warmup=warmup, iters=iters,
                               ref=ref, tol=tol)
        if math.isinf(t_default):
            row.rejected[b] = f"wrong result with its heuristics (error {err:.2e} > {tol:g})"
            continue
        row.baseline_us[b] = t_default
        seen(f"{b} with its heuristics", t_default)
        best_t, best_cfg = t_default, None
        space = get_space(b, case.primitive) if configs else None  # registered by the first call
        if space is not None:
            for cfg in space.candidates(args)[:max_configs]:
                try:
                    t, err = _time(case.primitive, b, sets, device=device, config=cfg, warmup=warmup, iters=iters,
                                   ref=ref, tol=tol)
                except Exception as exc:
                    row.rejected[f"{b} {cfg}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    continue
                if math.isinf(t):
                    row.rejected[f"{b} {cfg}"] = f"wrong result (error {err:.2e} > {tol:g})"
                    continue
                seen(f"{b} config {cfg}", t)
                if t < best_t:
                    best_t, best_cfg = t, cfg
            won = best_cfg is not None and best_t < t_default * (1 - min_gain)
            if won and confirm > 0:
                t_def2, t_cfg2 = _confirm(case.primitive, sets, (b, None), (b, best_cfg), device=device,
                                          warmup=warmup, iters=iters, rounds=confirm)
                won = t_cfg2 < t_def2 * (1 - min_gain)
                if won:
                    best_t, t_default = t_cfg2, t_def2
                else:
                    row.rejected[f"{b} {best_cfg}"] = (f"not confirmed: {t_cfg2:.4g} us against its heuristics' "
                                                       f"{t_def2:.4g} us in {confirm} alternating rounds")
            if won:
                entry.configs[b] = ConfigChoice(space.key(args), best_cfg, best_t, t_default, _backend_versions([b]),
                                                match=space.match)
                row.config_gain[b] = t_default / best_t
            else:
                best_t = t_default
        row.times_us[b] = best_t
        if b == heur:
            row.heuristic_time_us = t_default
    if not row.times_us:
        row.status = "no backend ran: " + "; ".join([*(f"{b}: {r}" for b, r in declined.items()),
                                                     *(f"{b}: {r}" for b, r in row.rejected.items())])
        return None, row
    winner = min(row.times_us, key=row.times_us.get)
    if confirm > 0 and winner != heur and heur in row.times_us:
        cfg_of = {x: (c.config if (c := entry.configs.get(x)) is not None else None) for x in (winner, heur)}
        t_win, t_heur = _confirm(case.primitive, sets, (winner, cfg_of[winner]), (heur, cfg_of[heur]), device=device,
                                 warmup=warmup, iters=iters, rounds=confirm)
        if t_win < t_heur * (1 - min_gain):
            row.times_us[winner], row.times_us[heur] = t_win, t_heur
        else:
            row.rejected[f"backend {winner}"] = (f"not confirmed: {t_win:.4g} us against the heuristic's {heur} "
                                                 f"{t_heur:.4g} us in {confirm} alternating rounds")
            winner = heur
    row.backend = winner
    entry.backend, entry.times_us = winner, dict(row.times_us)
    entry.heuristic, entry.heuristic_time_us = heur, row.heuristic_time_us
    entry.versions = _backend_versions(list(row.times_us))
    return entry, row


# -- --check ---------------------------------------------------------------------------------------

def check(db: TuningDB, *, device: str, warmup: int, iters: int, threshold: float = 0.03,
          time_limit: float | None = None, progress: Callable[[str], None] | None = None) -> list[CheckRow]:
    """Re-time every stored choice of ``db`` tuned for this device's arch against the heuristics'
    choice (every database off). Status: ``ok``; ``regression``: the stored choice is slower than the
    heuristics by more than ``threshold``; ``wrong``: its output differs from the heuristics' by more
    than the tolerance; ``stale``: tuned with other library versions (timed all the same); ``same``:
    the heuristics pick the stored backend and no config is stored for it (not timed); ``invalid:
    ...``: a time failed the sanity guard (``turbo_core.tuning.plausible``; the baselines: every
    backend timed with its own heuristics in this run)."""

    arch = _keys.arch_of(platform_of(torch.device(device)))
    policy = versions.policy_from_env()
    packages = {r.info.package: r.info.version for r in get_host().registry.backends.values()}
    now = versions.current(packages, db.libraries())
    gen = torch.Generator(device=device).manual_seed(0)
    rows: list[CheckRow] = []
    start = time.monotonic()
    for e in db.entries():
        label = f"{e.primitive} {e.key.label()}"
        if e.key.arch != arch:
            rows.append(CheckRow(label, "entry", f"skipped: tuned for {e.key.arch}, this device is {arch}"))
            continue
        if time_limit is not None and time.monotonic() - start > time_limit:
            rows.append(CheckRow(label, "entry", f"skipped: --time-limit {time_limit:g}s reached"))
            continue
        if progress:
            progress(label)
        try:
            rows.extend(_check_entry(e, label, gen, device, warmup, iters, threshold, now, policy))
        except Exception as exc:
            rows.append(CheckRow(label, "entry", f"error: {type(exc).__name__}: {exc}"))
    _guard_check(rows)
    return rows


def _guard_check(rows: Sequence[CheckRow]) -> None:
    """Mark ``invalid`` every timed row whose faster time fails ``turbo_core.tuning.plausible``."""
    best: dict[str, float] = {}  # baselines: every time of a backend with its own heuristics
    for r in rows:
        if r.status.startswith(("skipped", "error")):
            continue
        for us in (r.heuristic_us, r.own_heuristics_us, None if r.config else r.stored_us):
            if r.flops and us is not None:
                best[r.dtype] = max(best.get(r.dtype, 0.0), plausible.tflops(r.flops, us))
    for r in rows:
        timed = [(f"the stored {r.what}", r.stored_us), (f"the heuristics ({r.heuristic})", r.heuristic_us)]
        timed = [(what, us) for what, us in timed if us is not None]
        if not r.flops or not timed or r.status.startswith(("skipped", "error")):
            continue
        what, us = min(timed, key=lambda t: t[1])
        why = plausible.fault(r.flops, us, arch=r.arch, dtype=r.dtype, best_baseline_tflops=best.get(r.dtype),
                              what=what)
        if why:
            r.status = f"invalid: {why}"


def _check_entry(e: Entry, label: str, gen, device, warmup, iters, threshold, now, policy) -> list[CheckRow]:

    case = Case(e.primitive, e.key, label, lambda g: _keys.args_for(e.primitive, e.key, device, g))
    sets = _input_sets(case, gen, device)
    args = sets[0]
    tol = tolerance(e.key)
    heur = _heuristic(e.primitive, args)

    with use_backend(heur), _active.disabled():
        ref = call(e.primitive, args)
        ref = ref.double() if ref.device.type == "cpu" else ref.float()
    t_heur, _ = _time(e.primitive, heur, sets, device=device, config=None, warmup=warmup, iters=iters)
    facts = {"flops": _flops(e.primitive, e.key), "arch": e.key.arch, "dtype": e.key.dtypes[0]}
    out: list[CheckRow] = []
    plan: list[tuple[str, str, ConfigChoice | None, float | None]] = []
    if e.backend is not None:
        plan.append((f"backend {e.backend}", e.backend, e.configs.get(e.backend), t_heur))
    for b, c in sorted(e.configs.items()):
        if b != e.backend:
            plan.append((f"{b} config", b, c, None))
    for what, backend, cfg, base in plan:
        if backend == heur and cfg is None:  # the heuristics' own choice: nothing to compare
            out.append(CheckRow(label, what, "same", None, base, heur, **facts))
            continue
        fresh = versions.compatible(cfg.versions if cfg is not None and what.endswith("config") else e.versions,
                                    now, policy)
        own = None  # a baseline of the sanity guard: the stored backend with its own heuristics
        if base is None:  # a config of a backend that did not win: against that backend's heuristics
            base, _ = _time(e.primitive, backend, sets, device=device, config=None, warmup=warmup, iters=iters)
        elif backend != heur and cfg is not None:
            own, _ = _time(e.primitive, backend, sets, device=device, config=None, warmup=warmup, iters=iters)
        stored, err = _time(e.primitive, backend, sets, device=device, config=cfg.config if cfg else None,
                            warmup=warmup, iters=iters, ref=ref, tol=tol)
        if math.isinf(stored):
            status = "wrong"
        elif stored > base * (1 + threshold):
            status = "regression"
        else:
            status = "ok"
        if not fresh and status == "ok":
            status = "stale"
        out.append(CheckRow(label, what, status, None if math.isinf(stored) else stored, base,
                            heur if what.startswith("backend") else f"{backend} heuristics", config=cfg is not None,
                            own_heuristics_us=own, **facts))
    return out
