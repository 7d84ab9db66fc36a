"""GPU check and benchmark of the TRITON RMSNorm and SwiGLU/GeGLU kernels (run on the GPU machine).

Parts (``--parts``, default all, in this order):

* ``check``: the kernels against float64 math on the GPU (references computed in row slices, so
  65536 x 32768 fits): RMSNorm over hidden 1..32768 (odd ones too) x tokens 1..65536, gamma /
  zero-centred + fused residual / no gamma, fwd (y, rstd, x_plus_r) and bwd (dx, dgamma);
  SwiGLU/GeGLU over half widths 1..28672 x tokens 1..65536, with and without row_mask (masked
  rows full of NaN must come out as exact zeros); both RMSNorm row paths (whole row, chunked) forced
  on a few shapes; NaN/Inf propagation against the TORCH reference; fp16/fp32 on a subset.
* ``graph``: the four primitives captured in a CUDA graph and replayed on new data.
* ``sweep_norm`` / ``sweep_glu``: tile configurations at the model shapes (T=16384), GB/s each,
  to tune the heuristics (each config's output is also checked against the heuristic's).
* ``bench``: ``turbo bench norm`` and ``turbo bench activation`` suites (torch eager,
  torch.compile of the same expression, turbo:TRITON) at 16384 and 32768 tokens: GB/s, fraction of
  the measured copy bandwidth, ratio to eager; model shapes of ../shared/reference/benchmarks.md.

Prints tables and writes everything to ``--out`` (JSON).

Usage (repository root, no install needed; torch 2.11 + triton 3.6 there):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/norm_act_h200.py --out norm_act.json [--parts check,graph,sweep_norm,sweep_glu,bench]

The parts do not all fit one 10-minute command; run them as separate commands, e.g.
``--parts check,graph``, ``--parts sweep_norm``, ``--parts sweep_glu``, ``--parts bench --tokens
16384`` and ``--parts bench --tokens 32768`` (torch.compile compiles every case: seconds each), each
with its own ``--out``. The JSON is rewritten after every part, so a command killed at its limit
keeps the parts it finished. ``--smoke`` runs every part at tiny sizes on the CPU interpreter
(TRITON_INTERPRET=1) to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="check,graph,sweep_norm,sweep_glu,bench")
    p.add_argument("--hiddens", type=int, nargs="*", help="sweep_norm: hidden sizes (default 4096..32768)")
    p.add_argument("--sweep-pass", choices=["fwd", "bwd"], help="sweep_norm: only this pass (default both)")
    p.add_argument("--bwd-stages", type=int, nargs="*", default=[2, 3],
                   help="sweep_norm: software-pipelining depths tried for the whole-row backward (default 2 3)")
    p.add_argument("--tokens", type=int, nargs="*", default=[16384, 32768], help="bench token counts")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter")
    return p.parse_args()


ARGS = _parse()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs  # noqa: E402
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs  # noqa: E402
from turbo_triton.activation import launch as glu  # noqa: E402
from turbo_triton.normalization import launch as norm  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
SLICE_ELEMS = 2**26  # float64 reference slices of at most 512 MB
RESULTS: dict = {"check": [], "graph": [], "sweep": [], "bench": []}


def log(*a):
    print(*a, flush=True)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def _slices(tokens: int, width: int):
    step = max(1, SLICE_ELEMS // max(1, width))
    for start in range(0, tokens, step):
        yield slice(start, min(tokens, start + step))


class Worst:
    """Worst ``|out - ref| / (atol + rtol |ref|)`` per output; NaN where the reference is finite fails."""

    def __init__(self):
        self.score: dict[str, float] = {}

    def add(self, name, out, ref, dtype, rtol=None):
        tol = TOL[dtype]
        rtol = tol if rtol is None else rtol
        out = out.double()
        bad_nan = (torch.isnan(out) & ~torch.isnan(ref)).any().item()
        err = ((out - ref).abs() / (tol + rtol * ref.abs()))
        err = torch.nan_to_num(err, nan=0.0, posinf=math.inf).max().item() if err.numel() else 0.0
        self.score[name] = max(self.score.get(name, 0.0), math.inf if bad_nan else err)

    def ok(self):
        return all(v <= 1.0 for v in self.score.values())


# ---- check: RMSNorm -------------------------------------------------------------------------


def check_rmsnorm(tokens, hidden, dtype, variant, cfg=None, label=""):
    gen = torch.Generator(device=DEV).manual_seed(tokens * 7 + hidden)
    x = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype)
    residual = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype) if variant == "zc_residual" else None
    zc = variant == "zc_residual"
    gamma = None
    if variant != "no_gamma":
        gamma = ((0.0 if zc else 1.0) + 0.5 * torch.randn(hidden, device=DEV, generator=gen)).to(dtype)
    dy = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype)
    eps = 1e-5
    y, rstd, s = norm.rmsnorm_fwd(RmsNormFwdArgs(x, gamma, eps, zc, residual), cfg)
    s_in = s if s is not None else x
    dx, dgamma = norm.rmsnorm_bwd(RmsNormBwdArgs(dy, s_in, gamma, rstd, zc), cfg)
    sync()
    w = Worst()
    g64 = None if gamma is None else (gamma.double() + (1.0 if zc else 0.0))
    dg64 = torch.zeros(hidden, dtype=torch.float64, device=DEV)
    for sl in _slices(tokens, hidden):
        xs = x[sl].double()
        if residual is not None:
            s64 = (xs + residual[sl].double()).to(dtype).double()
            w.add("x_plus_r", s[sl], s64, dtype, rtol=0.0)
        else:
            s64 = xs
        r64 = torch.rsqrt(s64.square().mean(1, keepdim=True) + eps)
        n = s64 * r64
        w.add("y", y[sl], n * g64 if g64 is not None else n, dtype)
        w.add("rstd", rstd[sl], r64.squeeze(1), torch.float32, rtol=1e-5)
        d = dy[sl].double()
        dn = d * g64 if g64 is not None else d
        w.add("dx", dx[sl], r64 * (dn - n * (dn * n).mean(1, keepdim=True)), dtype)
        dg64 += (d * n).sum(0)
    if gamma is not None:
        w.add("dgamma", dgamma, dg64, dtype)
    else:
        assert dgamma is None
    row = {"what": "rmsnorm", "tokens": tokens, "hidden": hidden, "dtype": str(dtype), "variant": variant,
           "config": label or "heuristic", "ok": w.ok(), "worst": w.score}
    RESULTS["check"].append(row)
    if not row["ok"]:
        log("FAIL", row)
    del x, residual, dy, y, s, dx
    return row["ok"]


# ---- check: GLU -------------------------------------------------------------------------------


def _glu_math(kind, a):
    if kind == "swiglu":
        sg = torch.sigmoid(a)
        return a * sg, sg * (1.0 + a * (1.0 - sg))
    cdf = 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))
    return a * cdf, cdf + a * torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)


def check_glu(kind, tokens, half, dtype, masked, cfg=None, label=""):
    gen = torch.Generator(device=DEV).manual_seed(tokens * 3 + half + masked)
    x = (1.5 * torch.randn(tokens, 2 * half, device=DEV, generator=gen)).to(dtype)
    probs = torch.rand(tokens, device=DEV, generator=gen)
    grad = torch.randn(tokens, half, device=DEV, generator=gen).to(dtype)
    row_mask = None
    if masked:
        row_mask = (torch.rand(tokens, device=DEV, generator=gen) < 0.5).to(torch.int64)
        row_mask[0] = 1
        inactive = row_mask == 0
        x[inactive] = float("nan")
        probs[inactive] = float("nan")
        grad[inactive] = float("nan")
    out = glu.glu_fwd(kind, GluFwdArgs(x, probs, row_mask), cfg)
    gx, gp = glu.glu_bwd(kind, GluBwdArgs(grad, x, probs, row_mask), cfg)
    sync()
    w = Worst()
    for sl in _slices(tokens, 2 * half):
        xs = x[sl].double()
        a, b = xs[:, :half], xs[:, half:]
        p = probs[sl].double().unsqueeze(1)
        g = grad[sl].double()
        act, act_grad = _glu_math(kind, a)
        o64 = act * b * p
        gx64 = torch.cat([g * b * p * act_grad, g * act * p], dim=1)
        gp64 = (g * act * b).sum(1)
        if masked:
            on = (row_mask[sl] != 0).unsqueeze(1)
            o64, gx64 = torch.where(on, o64, 0.0), torch.where(on, gx64, 0.0)
            gp64 = torch.where(on.squeeze(1), gp64, 0.0)
            off = ~on.squeeze(1)
            zeros_ok = (out[sl][off] == 0).all() and (gx[sl][off] == 0).all() and (gp[sl][off] == 0).all()
            if not zeros_ok:
                w.score["masked_rows_zero"] = math.inf
        w.add("out", out[sl], o64, dtype)
        w.add("grad_x", gx[sl], gx64, dtype)
        w.add("grad_probs", gp[sl], gp64, dtype)
    row = {"what": kind, "tokens": tokens, "half": half, "dtype": str(dtype), "masked": masked,
           "config": label or "heuristic", "ok": w.ok(), "worst": w.score}
    RESULTS["check"].append(row)
    if not row["ok"]:
        log("FAIL", row)
    return row["ok"]


def check_special_values():
    """NaN/Inf in inputs: same NaN/Inf pattern and values as the TORCH reference."""
    from turbo_core.reference import activation as ref_act
    from turbo_core.reference import normalization as ref_norm

    x = torch.randn(6, 3000, device=DEV)
    x[1, 7], x[2, 100], x[3, 5], x[4, 9] = float("nan"), float("inf"), -float("inf"), -100.0
    gamma = torch.randn(3000, device=DEV)
    dy = torch.randn(6, 3000, device=DEV)
    results = {}
    for label, cfg in (("whole", norm.RowConfig(1, 4096, 8)), ("chunked", norm.RowConfig(1, 1024, 4))):
        fa = RmsNormFwdArgs(x, gamma, 1e-6)
        y, rstd, _ = norm.rmsnorm_fwd(fa, cfg)
        y_ref, rstd_ref, _ = ref_norm.rmsnorm_fwd(fa)
        ba = RmsNormBwdArgs(dy, x, gamma, rstd_ref)
        dx, dg = norm.rmsnorm_bwd(ba, cfg)
        dx_ref, dg_ref = ref_norm.rmsnorm_bwd(ba)
        results[f"rmsnorm-{label}"] = all(
            torch.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)
            for a, b in ((y, y_ref), (rstd, rstd_ref), (dx, dx_ref), (dg, dg_ref)))
    for kind in ("swiglu", "geglu"):
        fa = GluFwdArgs(x, torch.rand(6, device=DEV))
        ba = GluBwdArgs(dy[:, :1500].contiguous(), x, fa.probs)
        out = glu.glu_fwd(kind, fa)
        gx, gp = glu.glu_bwd(kind, ba)
        out_ref = getattr(ref_act, f"{kind}_fwd")(fa)
        gx_ref, gp_ref = getattr(ref_act, f"{kind}_bwd")(ba)
        results[kind] = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)
                            for a, b in ((out, out_ref), (gx, gx_ref), (gp, gp_ref)))
    RESULTS["check"].append({"what": "special_values", "ok": all(results.values()), "detail": results})
    log("special values (NaN/Inf like the reference):", results)


def part_check():
    t0 = time.time()
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    if ARGS.smoke:
        hidden, tokens, big = [1, 33, 1000], [1, 7], [(64, 1000)]
        halves, big_glu = [1, 33, 300], [(64, 300)]
        subset_h, subset_half = [33], [33]
    else:
        hidden = [1, 1000, 1024, 4096, 7168, 7169, 8192, 8193, 16384, 16385, 32768]
        tokens = [1, 7, 4096]
        big = [(65536, 4096), (65536, 32768), (16384, 16384)]
        halves = [1, 1000, 1024, 2048, 14336, 16385, 28672]
        big_glu = [(65536, 14336), (65536, 28672)]
        subset_h, subset_half = [1000, 4096, 16385], [1000, 14336]
    ok = True
    for h in hidden:
        for t in tokens:
            for variant in ("gamma", "zc_residual", "no_gamma"):
                ok &= check_rmsnorm(t, h, bf16, variant)
    for t, h in big:
        ok &= check_rmsnorm(t, h, bf16, "gamma")
        ok &= check_rmsnorm(t, h, bf16, "zc_residual")
    for dt in (fp16, fp32):
        for h in subset_h:
            for variant in ("gamma", "zc_residual"):
                ok &= check_rmsnorm(4096 if not ARGS.smoke else 7, h, dt, variant)
    # both row paths forced, whatever the heuristic picks
    forced = [(4096 if not ARGS.smoke else 300, norm.RowConfig(1, 1024 if not ARGS.smoke else 128, 4), "chunked"),
              (16384 if not ARGS.smoke else 1000, norm.RowConfig(1, 16384 if not ARGS.smoke else 1024, 16), "whole")]
    for h, cfg, label in forced:
        for variant in ("gamma", "zc_residual"):
            ok &= check_rmsnorm(4096 if not ARGS.smoke else 9, h, bf16, variant, cfg, label)
    log(f"rmsnorm checks done ({time.time() - t0:.0f}s)")
    for kind in ("swiglu", "geglu"):
        for half in halves:
            for t in tokens:
                for masked in (False, True):
                    ok &= check_glu(kind, t, half, bf16, masked)
        for t, half in big_glu:
            ok &= check_glu(kind, t, half, bf16, True)
        for dt in (fp16, fp32):
            for half in subset_half:
                ok &= check_glu(kind, 4096 if not ARGS.smoke else 7, half, dt, True)
    ok &= check_glu("swiglu", 0, 64, bf16, False) and check_rmsnorm(0, 64, bf16, "zc_residual")
    log(f"glu checks done ({time.time() - t0:.0f}s)")
    check_special_values()
    n_fail = sum(1 for r in RESULTS["check"] if not r["ok"])
    log(f"check: {len(RESULTS['check'])} cases, {n_fail} failed ({time.time() - t0:.0f}s)")
    worst: dict[str, float] = {}
    for r in RESULTS["check"]:
        for k, v in r.get("worst", {}).items():
            key = f"{r['what']}:{r['dtype']}:{k}"
            worst[key] = max(worst.get(key, 0.0), v)
    for k, v in sorted(worst.items()):
        log(f"  worst error/tolerance {k:45s} {v:.3f}")


# ---- graph --------------------------------------------------------------------------------------


def part_graph():
    if DEV != "cuda":
        log("graph: skipped on the CPU")
        return
    from turbo_core.dispatch.dispatcher import call
    from turbo_core.dispatch.manager import use_backend

    t, h = 4096, 4096
    x = torch.randn(t, 2 * h, device=DEV).bfloat16()
    gamma = torch.randn(h, device=DEV).bfloat16()
    probs = torch.rand(t, device=DEV)
    mask = (torch.rand(t, device=DEV) < 0.5).long()
    dy = torch.randn(t, h, device=DEV).bfloat16()
    xn = x[:, :h].contiguous()

    def work():
        with use_backend("TRITON"):
            y, rstd, _ = call("rmsnorm_fwd", RmsNormFwdArgs(xn, gamma, 1e-6))
            dx, dg = call("rmsnorm_bwd", RmsNormBwdArgs(dy, xn, gamma, rstd))
            o = call("swiglu_fwd", GluFwdArgs(x, probs, mask))
            gx, gp = call("swiglu_bwd", GluBwdArgs(dy, x, probs, mask))
        return [y, rstd, dx, dg, o, gx, gp]

    for _ in range(2):
        work()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            outs = work()
        for src in (x, dy):
            src.copy_(torch.randn(src.shape, device=DEV).bfloat16())
        xn.copy_(x[:, :h])
        graph.replay()
        torch.cuda.synchronize()
        eager = work()
        same = all(torch.equal(a, b) for a, b in zip(outs, eager, strict=True))
        RESULTS["graph"].append({"ok": same})
        log("graph capture + replay matches eager:", same)
    except Exception as exc:
        RESULTS["graph"].append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        log("graph FAILED:", exc)


# ---- sweep --------------------------------------------------------------------------------------


def _time(fn, sets):
    from turbo_core.bench.timing import measure

    return measure(fn, sets, warmup=3 if ARGS.smoke else 5, iters=3 if ARGS.smoke else 20).median_ms


def _row_configs(hidden, backward):
    """Whole-row tiles (at most 64 elements a thread: more spills for sure) and chunked walks; the
    backward grid at the heuristic's programs per SM, plus half and double of it for a few."""
    width = 1 << (hidden - 1).bit_length()
    cands = []
    for bm, warps in ((1, 4), (1, 8), (1, 16), (1, 32), (2, 8), (2, 16), (4, 16)):
        if bm * width <= 32768 and 2 * 32 * warps <= bm * width <= 64 * 32 * warps:
            cands.append(norm.RowConfig(bm, width, warps, max(1, 32 // warps)))
    for bn, warps in ((2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16)):
        if bn < hidden:
            cands.append(norm.RowConfig(1, bn, warps, max(1, 32 // warps)))
    if backward:
        cands += [norm.RowConfig(bm, bn, warps, max(1, 32 // warps))
                  for bm, bn, warps in ((2, 4096, 8), (2, 4096, 16), (4, 2048, 8), (4, 4096, 16)) if bn < hidden]
        for cfg in list(cands):
            if cfg.num_warps in (8, 16) and (cfg.block_n in (4096, width)):
                cands += [norm.RowConfig(cfg.block_m, cfg.block_n, cfg.num_warps, cfg.programs_per_sm * k)
                          for k in (0.5, 2) if cfg.programs_per_sm * k >= 1]
        # the whole-row kernel's row loop software-pipelined (next rows' x and dy loaded during this one)
        cands += [norm.RowConfig(c.block_m, c.block_n, c.num_warps, c.programs_per_sm, stages)
                  for c in list(cands) if c.block_n >= hidden for stages in ARGS.bwd_stages]
    return [norm.RowConfig(c.block_m, c.block_n, c.num_warps, int(c.programs_per_sm), c.stages) for c in cands]


def _report(label, heur, best):
    h = f"{heur['gbps']:.0f} GB/s" if heur and "gbps" in heur else "failed"
    b = f"{best['gbps']:.0f} GB/s ({best['copy_fraction']:.0%}) {best['config']}" if best else "none valid"
    log(f"{label}: heuristic {h} {heur['config'] if heur else ''}; best {b}")


def _copy_gbps():
    from turbo_core.bench.suites.norm import copy_bandwidth

    if "copy_gbps" not in RESULTS:
        RESULTS["copy_gbps"] = copy_bandwidth(DEV)
        log(f"copy bandwidth {RESULTS['copy_gbps']:.0f} GB/s")
    return RESULTS["copy_gbps"]


def part_sweep_norm():
    copy = _copy_gbps()
    tokens = 64 if ARGS.smoke else 16384
    hiddens = [96, 300] if ARGS.smoke else (ARGS.hiddens or [4096, 7168, 8192, 16384, 32768])
    for hidden in hiddens:
        x = torch.randn(tokens, hidden, device=DEV).bfloat16()
        gamma = torch.randn(hidden, device=DEV).bfloat16()
        dy = torch.randn(tokens, hidden, device=DEV).bfloat16()
        fa = RmsNormFwdArgs(x, gamma, 1e-6)
        y0, rstd, _ = norm.rmsnorm_fwd(fa)
        ba = RmsNormBwdArgs(dy, x, gamma, rstd)
        dx0, dg0 = norm.rmsnorm_bwd(ba)
        for backward in (False, True):
            if ARGS.sweep_pass and ARGS.sweep_pass != ("bwd" if backward else "fwd"):
                continue
            nbytes = tokens * hidden * 2 * (3 if backward else 2)
            best = None
            heur = norm.pick(hidden, backward, ARGS.smoke)
            for cfg in _row_configs(hidden, backward)[: 2 if ARGS.smoke else None] + [heur]:
                row = {"op": "rmsnorm", "pass": "bwd" if backward else "fwd", "tokens": tokens, "hidden": hidden,
                       "config": cfg.__dict__, "heuristic": cfg == heur}
                try:
                    if backward:
                        dx, dg = norm.rmsnorm_bwd(ba, cfg)
                        same = torch.allclose(dx.float(), dx0.float(), rtol=1e-2, atol=1e-2) and \
                            torch.allclose(dg.float(), dg0.float(), rtol=1e-2, atol=1e-1)
                        ms = _time(lambda _x, c=cfg: norm.rmsnorm_bwd(ba, c), [(x,)])
                    else:
                        y, _, _ = norm.rmsnorm_fwd(fa, cfg)
                        same = torch.allclose(y.float(), y0.float(), rtol=1e-2, atol=1e-2)
                        ms = _time(lambda _x, c=cfg: norm.rmsnorm_fwd(fa, c), [(x,)])
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    RESULTS["sweep"].append(row)
                    continue
                row.update(ms=ms, gbps=nbytes / ms / 1e6, copy_fraction=nbytes / ms / 1e6 / copy, same=bool(same))
                RESULTS["sweep"].append(row)
                if same and (best is None or ms < best["ms"]):
                    best = row
            _report(f"rmsnorm {'bwd' if backward else 'fwd'} H={hidden}", RESULTS["sweep"][-1], best)
        del x, dy, y0, dx0


def part_sweep_glu():
    copy = _copy_gbps()
    tokens = 64 if ARGS.smoke else 16384
    halves = [80] if ARGS.smoke else [14336, 28672]
    glu_cands = [(1, 1024, 4), (2, 1024, 4), (4, 1024, 8), (1, 2048, 4), (1, 2048, 8), (2, 2048, 8),
                 (1, 4096, 8), (1, 4096, 16), (2, 4096, 16)]
    for half in halves:
        x = torch.randn(tokens, 2 * half, device=DEV).bfloat16()
        probs = torch.rand(tokens, device=DEV)
        g = torch.randn(tokens, half, device=DEV).bfloat16()
        for kind in ("swiglu", "geglu"):
            fa, ba = GluFwdArgs(x, probs), GluBwdArgs(g, x, probs)
            o0 = glu.glu_fwd(kind, fa)
            gx0, gp0 = glu.glu_bwd(kind, ba)
            for backward in (False, True):
                nbytes = tokens * half * 2 * (5 if backward else 3)
                heur = glu.pick(half, backward, ARGS.smoke)
                best = None
                for bm, bn, warps in glu_cands[: 2 if ARGS.smoke else None] + [(heur.block_m, heur.block_n, heur.num_warps)]:
                    cfg = glu.GluConfig(bm, bn, warps)
                    row = {"op": kind, "pass": "bwd" if backward else "fwd", "tokens": tokens, "hidden": half,
                           "config": cfg.__dict__, "heuristic": cfg == heur}
                    try:
                        if backward:
                            gx, gp = glu.glu_bwd(kind, ba, cfg)
                            same = torch.equal(gx, gx0) and torch.allclose(gp, gp0, rtol=1e-4, atol=1e-3)
                            ms = _time(lambda _x, c=cfg: glu.glu_bwd(kind, ba, c), [(x,)])
                        else:
                            same = torch.equal(glu.glu_fwd(kind, fa, cfg), o0)
                            ms = _time(lambda _x, c=cfg: glu.glu_fwd(kind, fa, c), [(x,)])
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        RESULTS["sweep"].append(row)
                        continue
                    row.update(ms=ms, gbps=nbytes / ms / 1e6, copy_fraction=nbytes / ms / 1e6 / copy, same=bool(same))
                    RESULTS["sweep"].append(row)
                    if same and (best is None or ms < best["ms"]):
                        best = row
                _report(f"{kind} {'bwd' if backward else 'fwd'} H={half}", RESULTS["sweep"][-1], best)
        del x, g


# ---- bench --------------------------------------------------------------------------------------


def part_bench():
    from rich.console import Console

    from turbo_core.bench.suites import activation
    from turbo_core.bench.suites import norm as norm_suite

    copy = _copy_gbps()
    tokens_list = [32] if ARGS.smoke else ARGS.tokens
    console = Console(width=220)
    for suite in (norm_suite, activation):
        rows = []
        for tokens in tokens_list:
            cases = suite.cases(tokens, ARGS.smoke, None)
            rows += norm_suite.run_bandwidth(
                suite, cases, providers=None, include_reference=False, compile_provider=DEV == "cuda",
                warmup=2 if ARGS.smoke else 10, iters=3 if ARGS.smoke else 50, device=DEV, copy_gbps=copy)
        norm_suite.print_table(rows, console)
        RESULTS["bench"] += rows


def main():
    from turbo_core.bench.runner import environment

    RESULTS["environment"] = environment(DEV)
    RESULTS["environment"]["argv"] = sys.argv
    parts = [p.strip() for p in ARGS.parts.split(",") if p.strip()]
    for part in parts:
        t0 = time.time()
        log(f"== {part}")
        try:
            {"check": part_check, "graph": part_graph, "sweep_norm": part_sweep_norm, "sweep_glu": part_sweep_glu,
             "bench": part_bench}[part]()
        except Exception:
            RESULTS.setdefault("errors", []).append({"part": part, "traceback": traceback.format_exc()})
            log(traceback.format_exc())
        log(f"== {part} took {time.time() - t0:.0f}s")
        with open(ARGS.out, "w") as fh:  # after every part, so a killed run keeps what it did
            json.dump(RESULTS, fh, indent=1, default=str)
    log(f"wrote {ARGS.out}")


if __name__ == "__main__":
    main()
