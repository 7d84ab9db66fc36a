"""Flash attention on the H200: the ``turbo bench attention`` suite, and a tile sweep of the TRITON kernels.

Suite mode (default): every case of ``turbo_core.bench.suites.attention`` (FA3-paper sizing hdim
64/128/256 at seq 512..16k, causal and not; Llama-3.1 8B/70B GQA, DeepSeek-V3 MLA 192/128, GPT-OSS
sliding window + sinks; forward and backward) for sdpa:cudnn, sdpa:flash, turbo:TRITON and
turbo:TRITON:deterministic (backward), each checked against float64 on a slice before it is timed.
Writes ``{"environment", "rows", "summary"}`` to ``--out`` after every model and pass (the format
of ``turbo bench attention --out``, so ``turbo bench report`` renders it), then prints a table,
the geomeans per pass and mask, and the issue's targets (hdim 128, FA3 sizing).

``--sweep``: times the TRITON forward, backward (dk/dv kernel with atomic dq) and deterministic
backward (dk/dv + dq kernels) at batch ``16384 / seq``, ``2048 / d`` heads, seq 4096, causal and
not, for candidate tiles of one kernel at a time, set through ``TURBO_TRITON_ATTN_TILES`` before
each call (format in ``turbo_triton/attention/configs.py``; the launcher caches by tile, so a new
value takes effect on the next call). Each config's output is checked against float64 (a config
that is wrong or that did not fit and ran a smaller tile is never "best"). Writes every measurement
and ``best[kernel][head_dim]`` (lowest geomean time over causal and non-causal, with the per-mask
bests and the speedup over the current table's tile) to ``--out``.

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/attention_h200.py --out attention.json [--models fa3-d128 llama3.1-8b ...] \\
      [--passes fwd bwd] [--max-minutes 9]
  ... python3 benchmarks/scripts/attention_h200.py --sweep --out attention_sweep.json [--dims 128 64 256 192x128] \\
      [--seq 512 4096 ...] [--kernels fwd dkdv dq] [--max-minutes 9]

Expected run time (a fresh machine compiles every kernel once): the whole suite ~5-8 minutes (split
it with --models over two calls if needed: fa3-d64 fa3-d128 fa3-d256 / the four models); the sweep
~3 minutes per head dim. ``--max-minutes`` starts no new chunk (suite: model and pass; sweep: config)
after that many minutes. ``--quick`` (tiny shapes; with TRITON_INTERPRET=1 on the CPU) is a smoke
run of this script.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

from turbo_core.bench import markdown, report, timing
from turbo_core.bench.runner import environment, max_rel_err
from turbo_core.bench.suites import attention as suite

T0 = time.time()
TILE_ENV = "TURBO_TRITON_ATTN_TILES"

#: Sweep candidates per head dim and kernel: (block_m, block_n, num_warps, num_stages[, warp_specialize]).
CANDIDATES = {
    128: {"fwd": [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3),
                  (128, 32, 4, 4), (64, 64, 4, 2), (64, 128, 4, 2), (128, 64, 8, 2), (64, 32, 4, 3),
                  (64, 64, 4, 4), (128, 128, 8, 3, 1), (128, 64, 8, 3, 1), (64, 64, 4, 3, 1)],
          "dkdv": [(64, 128, 8, 2), (32, 128, 4, 3), (64, 64, 4, 3), (128, 128, 8, 2), (64, 128, 4, 2),
                   (32, 64, 4, 3), (64, 64, 4, 2)],
          "dq": [(128, 64, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 2),
                 (64, 128, 8, 2)]},
    64: {"fwd": [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 4, 3, 1),
                 (64, 64, 4, 3, 1), (64, 64, 4, 4)],
         "dkdv": [(64, 128, 8, 2), (64, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 2), (32, 64, 4, 3)],
         "dq": [(128, 64, 8, 2), (64, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 2), (128, 32, 4, 3)]},
    256: {"fwd": [(128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 8, 2), (64, 64, 8, 2)],
          "dkdv": [(32, 64, 4, 2), (64, 64, 8, 2), (32, 128, 4, 2), (64, 32, 4, 2)],
          "dq": [(64, 32, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2)]},
}


def log(*args) -> None:
    print(f"[{time.time() - T0:6.0f}s]", *args, flush=True)


def save(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, default=str)
    os.replace(tmp, path)


# ---- suite mode -----------------------------------------------------------------------------------


def print_rows(rows: list[dict]) -> None:
    """Plain text (rich may be missing on the GPU machine): per case, one line per provider."""
    for case in dict.fromkeys(r["case"] for r in rows):
        print(f"\n{case}  [{next(r['flops'] for r in rows if r['case'] == case) / 1e12:.3g} TFLOP]")
        for r in (r for r in rows if r["case"] == case):
            if r["status"] != "ok":
                print(f"  {r['provider']:<28} {r['status'][:160]}")
                continue
            ratio = f"{r['ratio']:.2f}x cudnn" if r.get("ratio") else "-"
            det = f"  {r['nondet_ratio']:.2f}x non-det" if r.get("nondet_ratio") else ""
            print(f"  {r['provider']:<28} {r['tflops']:8.1f} TFLOP/s {r['median_ms']:9.3f} ms "
                  f"(p10 {r['p10_ms']:.3f}, p90 {r['p90_ms']:.3f})  {ratio}{det}  err {r['max_rel_err']:.1e}")


def print_geomeans(rows: list[dict]) -> None:
    print("\npass · mask | provider | vs | cases | geomean | min | max")
    for g in markdown.groups(rows):
        for c in markdown.comparisons(g):
            print(f"{g.title} | {c.provider} | {c.reference} | {len(c.ratios)} | {c.geomean:.3f} | "
                  f"{min(c.ratios):.3f} | {max(c.ratios):.3f}")
    seen: dict[tuple[str, str], int] = {}
    for r in rows:
        if r["status"] != "ok":
            seen[(r["provider"], r["status"])] = seen.get((r["provider"], r["status"]), 0) + 1
    for (p, status), n in seen.items():
        print(f"{p}: {status} ({n} rows)")


def _geo_ratio(rows, pass_, provider, reference) -> tuple[float | None, int]:
    """Geomean of reference time / provider time over the FA3 hdim-128 cases where both ran."""
    sel = [r for r in rows if r["model"] == "fa3-d128" and r["pass"] == pass_ and r["status"] == "ok"]
    by = {(r["case"], r["provider"]): r["median_ms"] for r in sel}
    ratios = [by[(c, reference)] / by[(c, provider)] for c, p in by if p == provider and (c, reference) in by]
    return report.geomean(ratios), len(ratios)


def print_targets(rows: list[dict]) -> dict:
    """The issue's targets on the FA3-sized hdim-128 cases (bf16), as geomeans over seq and masks."""
    targets = [("fwd", "turbo:TRITON", "sdpa:cudnn", 0.8), ("fwd", "turbo:TRITON", "sdpa:flash", 1.3),
               ("bwd", "turbo:TRITON", "sdpa:cudnn", 0.8),
               ("bwd", "turbo:TRITON:deterministic", "turbo:TRITON", 1 / 1.5)]
    out = {}
    print("\ntargets (fa3-d128, geomean over seq 512..16k, causal and not):")
    for pass_, prov, ref, want in targets:
        got, n = _geo_ratio(rows, pass_, prov, ref)
        verdict = "-" if got is None else ("met" if got >= want else "MISSED")
        shown = "-" if got is None else f"{got:.3f}"
        print(f"  {pass_} {prov} vs {ref}: {shown} over {n} cases (target >= {want:.2f}): {verdict}")
        out[f"{pass_} {prov} vs {ref}"] = {"geomean": got, "cases": n, "target": want}
    return out


def run_suite(args, env: dict) -> int:
    device = args.device
    models = args.models or list(suite.QUICK if args.quick else suite.MODELS)
    rows: list[dict] = []
    data = {"environment": env, "rows": rows, "summary": []}
    deadline = T0 + args.max_minutes * 60
    for model in models:
        for pass_ in args.passes:
            if time.time() > deadline:
                log(f"--max-minutes {args.max_minutes} reached: {model} {pass_} and later not run")
                data["stopped_before"] = f"{model} {pass_}"
                save(args.out, data)
                break
            t = time.time()
            got = suite.run(quick=args.quick, tokens=args.tokens, models=[model], providers=args.providers,
                            include_reference=args.include_reference, warmup=args.warmup, iters=args.iters,
                            device=device, passes=[pass_])
            rows += got
            data["summary"] = report.summary(rows)
            save(args.out, data)
            log(f"{model} {pass_}: {len(got)} rows in {time.time() - t:.0f}s")
        else:
            continue
        break
    print_rows(rows)
    print_geomeans(rows)
    data["targets"] = print_targets(rows)
    save(args.out, data)
    log(f"wrote {args.out}")
    return 0


# ---- sweep mode -----------------------------------------------------------------------------------


def _tile5(tile: tuple) -> tuple:
    """(block_m, block_n, warps, stages, warp_specialize): a 4-value candidate has no warp specialization."""
    return (*tile[:4], bool(tile[4]) if len(tile) > 4 else False)


def _compiled(kernel: str) -> dict:
    """id -> (n_regs, n_spills) of every compiled variant of the TRITON attention ``kernel`` (best
    effort: Triton's per-device kernel caches; {} when their layout is not the expected one)."""
    from turbo_triton.attention import bwd_kernels, fwd_kernel

    fn = {"fwd": fwd_kernel.attn_fwd_kernel, "dkdv": bwd_kernels.attn_bwd_dkdv_kernel,
          "dq": bwd_kernels.attn_bwd_dq_kernel}[kernel]
    found = {}
    try:
        for entry in getattr(fn, "device_caches", {}).values():
            for compiled in entry[0].values():
                found[id(compiled)] = (getattr(compiled, "n_regs", None), getattr(compiled, "n_spills", None))
    except (TypeError, IndexError, AttributeError):
        return {}
    return found


def _dims(d) -> tuple[int, int]:
    """``(d_qk, d_v)`` of a sweep's head dim: ``128``, or ``"192x128"`` (MLA's q/k and v widths)."""
    qk, _, v = str(d).partition("x")
    return int(qk), int(v or qk)


def _current_tiles(d, seq: int) -> dict:
    """The tiles the table picks now for head dim ``d`` (``_dims``) and sequence length ``seq`` (this
    device), without the override."""
    from turbo_triton.attention import configs

    saved = os.environ.pop(TILE_ENV, None)
    try:
        arch = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else _arch()
        return {k: tuple(vars(configs.pick(k, arch, max(_dims(d)), 2, seq, d_v=_dims(d)[1])).values())
                for k in ("fwd", "dkdv", "dq")}
    finally:
        if saved is not None:
            os.environ[TILE_ENV] = saved


def _arch() -> str:
    from turbo_triton import _runtime

    return _runtime.device_facts(torch.empty(1, device="cuda"))[0]


def _label(d_qk: int, d_v: int):
    """A sweep row's head dim: ``128``, or ``"192x128"`` when q/k and v differ."""
    return d_qk if d_qk == d_v else f"{d_qk}x{d_v}"


def _fell_back(kernel: str, dims: tuple[int, int], tile: tuple) -> tuple | None:
    """The smaller tile the launcher ran instead of ``tile`` (OutOfResources) for head dims ``dims``
    (q/k, v), or None. Reads ``_runtime.launch_fitted``'s memory, keyed ``(launcher, start tile,
    kernel function, kernel ("fwd", "dkdv", "dq"), ..., d_qk, d_v)``."""
    from turbo_triton import _runtime

    for key, used in _runtime._fitted.items():
        start = key[1]
        if len(key) > 3 and key[3] == kernel and tuple(key[-2:]) == dims and tuple(vars(start).values()) == tile \
                and tuple(vars(used).values()) != tile:
            return tuple(vars(used).values())
    return None


def _sweep_case(args, d, causal: bool, seq: int):
    d_qk, d_v = _dims(d)
    heads = 2 if args.quick else 2048 // d_qk
    batch = max(1, (32 if args.quick else 16384) // seq)
    return (suite.AttnCase("sweep", None, "fwd", batch, seq, seq, heads, heads, d_qk, d_v, causal),
            suite.AttnCase("sweep", None, "bwd", batch, seq, seq, heads, heads, d_qk, d_v, causal))


def _measure_config(args, cases: dict, sets: dict, refs: dict, kernel: str, tile: tuple) -> dict:
    """Set the override for ``kernel``, check the affected pass(es) against float64, time them.
    ``cases``/``sets``/``refs``: per pass, the case, its input set (holding its reference's scales)
    and its float64 reference."""
    fwd_case = cases["fwd"]
    os.environ[TILE_ENV] = f"{kernel}={','.join(str(int(v)) for v in tile)}"
    row = {"kernel": kernel, "tile": list(tile), "d": _label(fwd_case.d_qk, fwd_case.d_v), "heads": fwd_case.h_q, "batch": fwd_case.batch,
           "seq": fwd_case.seq_q, "causal": fwd_case.causal, "status": "ok"}
    passes = {"fwd": [("fwd", False)], "dkdv": [("bwd", False), ("bwd", True)], "dq": [("bwd", True)]}[kernel]
    before = _compiled(kernel)
    try:
        for pass_, det in passes:
            case, inputs = cases[pass_], sets[pass_]
            fn = suite.turbo_provider(case, "TRITON", det)(inputs)  # pinned to TRITON
            err = max_rel_err(fn(), refs[pass_])
            t = timing.measure(lambda f, _q: f(), [(fn, inputs["q"])], warmup=args.warmup, iters=args.iters)
            name = pass_ + ("_det" if det else "")
            row[f"{name}_ms"] = t.median_ms
            row[f"{name}_tflops"] = case.flops / t.median_ms / 1e9
            row[f"{name}_err"] = err
            if not err <= suite.tolerance_of(torch.bfloat16):
                row["status"] = f"inaccurate: {name} max_rel_err {err:.2e}"
        new = [stats for key, stats in _compiled(kernel).items() if key not in before]
        if new:  # the variants this tile compiled (masked/unmasked specializations alike): registers, spills
            row["n_regs"] = max((r for r, _ in new if r is not None), default=None)
            row["n_spills"] = max((sp for _, sp in new if sp is not None), default=None)
        fell = _fell_back(kernel, (fwd_case.d_qk, fwd_case.d_v), tile)
        if fell:
            row["status"] = f"did not fit: ran {fell}"
    except Exception as exc:  # a config that fails to compile or launch is reported, the sweep goes on
        row["status"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        os.environ.pop(TILE_ENV, None)
    return row


def _score_key(kernel: str) -> str:
    return {"fwd": "fwd_ms", "dkdv": "bwd_ms", "dq": "bwd_det_ms"}[kernel]


def best_tiles(rows: list[dict], current: dict) -> dict:
    """``best[kernel][d]``: the tile with the lowest geomean time over the masks measured (``masks``:
    both unless the run was cut short), among the tiles that ran correctly on each of them; per-mask
    bests; the current tile's time and the speedup over it."""
    best: dict = {}
    for kernel in ("fwd", "dkdv", "dq"):
        key = _score_key(kernel)
        groups = sorted({(r["d"], r["seq"]) for r in rows if r["kernel"] == kernel}, key=lambda g: (str(g[0]), g[1]))
        for d, seq in groups:
            mine = [r for r in rows if r["kernel"] == kernel and r["d"] == d and r["seq"] == seq]
            masks = sorted({r["causal"] for r in mine})
            times: dict[tuple, dict] = {}
            for r in mine:
                times.setdefault(tuple(r["tile"]), {})[r["causal"]] = r.get(key) if r["status"] == "ok" else None
            scored = {t: math.exp(sum(math.log(v[m]) for m in masks) / len(masks))
                      for t, v in times.items() if all(v.get(m) for m in masks)}
            if not scored:
                continue
            win = min(scored, key=scored.get)
            cur = tuple(current[(d, seq)][kernel])
            entry = {"tile": list(win), "geomean_ms": scored[win], "metric": key,
                     "masks": ["causal" if m else "full" for m in masks],
                     "per_mask": {("causal" if m else "full"): list(min((t for t in times if times[t].get(m)),
                                                                       key=lambda t, m=m: times[t][m]))
                                  for m in masks},
                     "current": list(cur), "current_geomean_ms": scored.get(cur),
                     "speedup_vs_current": scored[cur] / scored[win] if cur in scored else None}
            several = len({g[1] for g in groups if g[0] == d}) > 1
            best.setdefault(kernel, {})[f"{d}@{seq}" if several else str(d)] = entry
    return best


def run_sweep(args, env: dict) -> int:
    from turbo_triton.attention import configs

    gen = torch.Generator(device=args.device).manual_seed(0)
    rows: list[dict] = []
    current = {(d, seq): _current_tiles(d, seq) for d in args.dims for seq in args.seq}
    data = {"environment": env, "current_tiles": {f"{d}@{seq}": tiles for (d, seq), tiles in current.items()},
            "sweep": rows, "best": {}}
    deadline = T0 + args.max_minutes * 60
    for d, seq, causal in [(d, seq, causal) for d in args.dims for seq in args.seq for causal in (False, True)]:
        cases = dict(zip(("fwd", "bwd"), _sweep_case(args, d, causal, seq), strict=True))
        inputs = suite.make_inputs(cases["bwd"], args.device, torch.bfloat16, gen)
        sets = {p: dict(inputs) for p in cases}  # the same tensors; each holds its reference's scales
        refs = {p: suite.reference(cases[p], sets[p]) for p in cases}
        for kernel in args.kernels:
            cands = list(dict.fromkeys(_tile5(t) for t in [*CANDIDATES[configs._bucket(max(_dims(d)))][kernel],
                                                           current[(d, seq)][kernel]]))
            for tile in cands:
                if time.time() > deadline:
                    log(f"--max-minutes {args.max_minutes} reached: d={d} causal={causal} {kernel} {tile} "
                        "and later not run")
                    data["stopped_before"] = {"d": d, "seq": seq, "causal": causal, "kernel": kernel, "tile": list(tile)}
                    data["best"] = best_tiles(rows, current)
                    save(args.out, data)
                    return _finish_sweep(args, data, rows, current)
                row = _measure_config(args, cases, sets, refs, kernel, tile)
                rows.append(row)
                times = {k: round(v, 3) for k, v in row.items() if k.endswith("_ms")}
                regs = f" regs {row.get('n_regs')} spills {row.get('n_spills')}" if "n_regs" in row else ""
                log(f"d={d} s={seq} {'causal' if causal else 'full'} {kernel} {tile}: {row['status']} {times}{regs}")
                data["best"] = best_tiles(rows, current)
                save(args.out, data)
        del inputs, sets, refs
    return _finish_sweep(args, data, rows, current)


def _finish_sweep(args, data, rows, current) -> int:
    data["best"] = best_tiles(rows, current)
    save(args.out, data)
    print("\nbest tiles (geomean over causal and non-causal):")
    for kernel, per_d in data["best"].items():
        for d, e in per_d.items():
            speed = f"{e['speedup_vs_current']:.3f}x" if e["speedup_vs_current"] else "-"
            print(f"  {kernel:<5} d={d:<4} {tuple(e['tile'])}  {e['geomean_ms']:.3f} ms ({e['metric']}); "
                  f"current {tuple(e['current'])}: {speed}; per mask {e['per_mask']}")
    print(json.dumps(data["best"], indent=1))
    log(f"wrote {args.out}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sweep", action="store_true", help="tile sweep of the TRITON kernels instead of the suite")
    p.add_argument("--models", nargs="*", help="suite: default every model (fa3-d64 fa3-d128 fa3-d256 "
                   "llama3.1-8b llama3.1-70b deepseek-v3 gpt-oss-20b)")
    p.add_argument("--passes", nargs="*", default=list(suite.PASSES), choices=list(suite.PASSES))
    p.add_argument("--providers", nargs="*", help="suite: default all (sdpa:cudnn sdpa:flash turbo:TRITON "
                   "turbo:TRITON:deterministic)")
    p.add_argument("--include-reference", action="store_true", help="suite: also the TORCH reference (slow)")
    p.add_argument("--tokens", type=int, default=None, help="suite: batch x seq (default 16384)")
    p.add_argument("--dims", nargs="*", default=[128, 64, 256],
                   help="sweep: head dims, in this order; 192x128 for different q/k and v widths (MLA)")
    p.add_argument("--seq", type=int, nargs="+", default=[4096],
                   help="sweep: sequence lengths (batch 16384 / seq each); with several, the best tiles are "
                        "reported per length (keys 'd@seq')")
    p.add_argument("--kernels", nargs="+", default=["fwd", "dkdv", "dq"], choices=["fwd", "dkdv", "dq"],
                   help="sweep: the kernels to sweep")
    p.add_argument("--warmup", type=int, default=None, help="default 10 (sweep 5)")
    p.add_argument("--iters", type=int, default=None, help="default 50 (sweep 20)")
    p.add_argument("--max-minutes", type=float, default=9.0)
    p.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run (CPU with TRITON_INTERPRET=1)")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None)
    args = p.parse_args()
    args.device = args.device or ("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5 if args.sweep else 10)
    args.iters = args.iters if args.iters is not None else (2 if args.quick else 20 if args.sweep else 50)
    env = environment(args.device)
    env["argv"] = sys.argv
    env[TILE_ENV] = os.environ.get(TILE_ENV)
    log("environment:", json.dumps(env, default=str))
    if args.sweep:
        args.seq = [32] if args.quick else args.seq
        args.dims = [_label(*_dims(d)) for d in args.dims]
        os.environ.pop(TILE_ENV, None)
        return run_sweep(args, env)
    return run_suite(args, env)


if __name__ == "__main__":
    sys.exit(main())
