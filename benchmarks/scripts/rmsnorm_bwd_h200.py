"""RMSNorm backward on the H200: old vs new TRITON tiles, torch.compile and liger-kernel in one process.

Parts (``--parts``, default ``bench,check``):

* ``bench``: for each ``--hiddens`` at ``--tokens`` (bf16, gamma), the ``turbo bench norm`` machinery
  (``run_bandwidth``: inputs rotated beyond L2, device-time CUDA events, max relative error against
  float64) with providers ``torch.compile``, ``turbo:TRITON`` (the dispatcher, so the current
  heuristic), ``liger`` (when its wheel is given) and one ``cfg:...`` provider per explicit TRITON
  tile: ``old`` is the tile the heuristic picked before session 12, the others the candidates of
  ``CANDIDATES`` (called through ``launch.rmsnorm_bwd(args, config)``).
* ``check``: the TRITON backward (heuristic, and every ``split`` candidate at hidden > 8192) against
  float64 math on shapes around the split kernel's range (gamma, zero-centred gamma, no gamma;
  ragged widths; few and many tokens): ``|out - ref| <= 1e-2 (1 + |ref|)`` (bf16), dgamma too.

Usage (repository root; torch 2.11 + triton 3.6 there; no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/rmsnorm_bwd_h200.py --out rmsnorm_bwd.json [--liger-wheel .whl/liger_kernel-0.8.5-py3-none-any.whl]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
import types
import zipfile


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="bench,check")
    p.add_argument("--hiddens", type=int, nargs="*", default=[4096, 7168, 8192, 16384])
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--liger-wheel", help="liger-kernel wheel to extract and import (no pip)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--only", help="comma list of candidate names to time (default: all)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--smoke", action="store_true", help="CPU interpreter, a few tokens: checks the script itself")
    return p.parse_args()


ARGS = _parse()
if ARGS.smoke:
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    ARGS.tokens, ARGS.iters, ARGS.no_compile = 4, 1, True
DEV = "cpu" if ARGS.smoke else "cuda"
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


LIGER = {"wheel": None}
if ARGS.liger_wheel:
    dest = tempfile.mkdtemp(prefix="liger_")
    with zipfile.ZipFile(ARGS.liger_wheel) as z:
        z.extractall(dest)
    sys.path.insert(0, dest)
    LIGER = {"wheel": ARGS.liger_wheel}

import torch  # noqa: E402

from turbo_core.bench.suites import norm as norm_suite  # noqa: E402
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs  # noqa: E402
from turbo_triton.normalization import launch as norm  # noqa: E402

RC = norm.RowConfig
#: The tiles the heuristic picked before session 12 (session 10's), by row width.
OLD = {4096: RC(2, 4096, 16, 1, 3), 8192: RC(1, 8192, 16, 1, 3), 16384: RC(1, 16384, 8, 2)}


def candidates(hidden: int) -> dict[str, norm.RowConfig]:
    width = 1 << (hidden - 1).bit_length()
    out = {"old": OLD[width]}
    if width == 16384:  # session 12 run 2; run 1's losers (prefetch hints, 8 warps, split at 4096-8192) dropped
        out["split4x4096w16"] = RC(1, 4096, 16, 1, chunks=4)
        out["split4x4096w32"] = RC(1, 4096, 32, 1, chunks=4)
        out["split2x8192w32"] = RC(1, 8192, 32, 1, chunks=2)
        out["split4x4096w16st2"] = RC(1, 4096, 16, 1, 2, chunks=4)
        out["split4x4096w32st2"] = RC(1, 4096, 32, 1, 2, chunks=4)
        out["split2x8192w16st2"] = RC(1, 8192, 16, 1, 2, chunks=2)
        out["split2x8192w32st2"] = RC(1, 8192, 32, 1, 2, chunks=2)
        out["split2rows2x8192w32"] = RC(2, 8192, 32, 1, chunks=2)
        out["split2rows4x4096w32"] = RC(2, 4096, 32, 1, chunks=4)
    if ARGS.only:
        keep = set(ARGS.only.split(","))
        out = {k: v for k, v in out.items() if k in keep or k == "old"}
    return out


def cfg_peer(name: str, cfg: norm.RowConfig) -> norm_suite.Peer:
    def prepare(inputs):
        x, w, dy = inputs
        _, rstd, _ = norm.rmsnorm_fwd(RmsNormFwdArgs(x, w, norm_suite.EPS))
        args = RmsNormBwdArgs(dy, x, w, rstd)
        return lambda: list(norm.rmsnorm_bwd(args, cfg))

    return norm_suite.Peer(f"cfg:{name}", prepare, note=str(cfg))


RESULTS: dict = {"bench": [], "check": [], "errors": []}


def write():
    with open(ARGS.out, "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)


def part_bench(copy):
    for hidden in ARGS.hiddens:
        cands = candidates(hidden)
        suite = types.SimpleNamespace(**{k: getattr(norm_suite, k) for k in (
            "make_inputs", "reference", "torch_provider", "turbo_args", "turbo_provider")})
        suite.peer_providers = lambda case, c=cands: (
            ([norm_suite._liger_rmsnorm(case)] if ARGS.liger_wheel else []) + [cfg_peer(n, v) for n, v in c.items()])
        case = [c for c in norm_suite.cases(ARGS.tokens, False, None) if c.pass_ == "bwd" and c.op == "rmsnorm"][0]
        case = norm_suite.MemCase(case.suite, case.op, f"h{hidden}", "bwd", ARGS.tokens, hidden, case.dtype,
                                  3 * ARGS.tokens * hidden * 2 + 2 * hidden * 2)
        providers = (["torch.compile"] if not ARGS.no_compile else []) + ["turbo:TRITON"] + \
            (["liger"] if ARGS.liger_wheel else []) + [f"cfg:{n}" for n in cands]
        rows = norm_suite.run_bandwidth(suite, [case], providers=providers, include_reference=False,
                                        compile_provider=not ARGS.no_compile, warmup=1 if ARGS.smoke else 10,
                                        iters=ARGS.iters, device=DEV, copy_gbps=copy)
        for r in rows:
            r["config"] = str(cands[r["provider"][4:]]) if r["provider"].startswith("cfg:") else None
            if r["provider"] == "turbo:TRITON":
                r["config"] = str(norm.pick(hidden, True, False))
        RESULTS["bench"] += rows
        write()
        base = {r["provider"]: r for r in rows if r.get("status") == "ok"}
        for r in rows:
            if r.get("status") != "ok":
                log(f"H={hidden} {r['provider']:28s} {r.get('status')}")
                continue
            vs = " ".join(f"/{p}={r['gbps'] / base[p]['gbps']:.2f}" for p in ("torch.compile", "liger", "cfg:old")
                          if p in base)
            log(f"H={hidden} {r['provider']:28s} {r['gbps']:6.0f} GB/s {r['copy_fraction']:5.1%} "
                f"err {r['max_rel_err']:.1e} {vs}")


def check_one(tokens, hidden, variant, cfg, label):
    gen = torch.Generator(device=DEV).manual_seed(tokens * 7 + hidden)
    x = torch.randn(tokens, hidden, device=DEV, generator=gen).bfloat16()
    zc = variant == "zero_centered"
    gamma = None if variant == "no_gamma" else (
        (0.0 if zc else 1.0) + 0.5 * torch.randn(hidden, device=DEV, generator=gen)).bfloat16()
    dy = torch.randn(tokens, hidden, device=DEV, generator=gen).bfloat16()
    eps = 1e-5
    _, rstd, _ = norm.rmsnorm_fwd(RmsNormFwdArgs(x, gamma, eps, zc))
    dx, dg = norm.rmsnorm_bwd(RmsNormBwdArgs(dy, x, gamma, rstd, zc), cfg)
    if DEV == "cuda":
        torch.cuda.synchronize()
    worst = {"dx": 0.0, "dgamma": 0.0}
    dg64 = torch.zeros(hidden, dtype=torch.float64, device=DEV)
    g64 = None if gamma is None else gamma.double() + (1.0 if zc else 0.0)
    step = max(1, 2**25 // hidden)
    for i in range(0, tokens, step):
        s = x[i:i + step].double()
        r = torch.rsqrt(s.square().mean(1, keepdim=True) + eps)
        n = s * r
        d = dy[i:i + step].double()
        dn = d * g64 if g64 is not None else d
        ref = r * (dn - n * (dn * n).mean(1, keepdim=True))
        err = ((dx[i:i + step].double() - ref).abs() / (1e-2 * (1 + ref.abs()))).max().item()
        worst["dx"] = max(worst["dx"], err if not math.isnan(err) else math.inf)
        dg64 += (d * n).sum(0)
    if gamma is not None:
        err = ((dg.double() - dg64).abs() / (1e-2 * (1 + dg64.abs()))).max().item()
        worst["dgamma"] = err if not math.isnan(err) else math.inf
    ok = all(v <= 1.0 for v in worst.values())
    RESULTS["check"].append({"tokens": tokens, "hidden": hidden, "variant": variant, "config": label,
                             "ok": ok, "worst": worst})
    if not ok:
        log("CHECK FAILED", tokens, hidden, variant, label, worst)
    return ok


def part_check():
    n = bad = 0
    shapes = ((1, 16384), (7, 16384), (4096, 16384), (16384, 16384), (333, 8193), (333, 12288),
              (1000, 16000), (4096, 4096), (4096, 8192), (4096, 7168))
    if ARGS.smoke:
        shapes = ((1, 16384), (3, 8193))
    for tokens, hidden in shapes:
        cfgs = {"heuristic": None}
        if hidden > 8192 and tokens <= 1000:  # every split candidate on the small shapes
            cfgs.update({k: v for k, v in candidates(hidden).items() if k.startswith("split")})
        for label, cfg in cfgs.items():
            for variant in ("gamma", "zero_centered", "no_gamma")[: 3 if cfg is None else 2]:
                n += 1
                bad += not check_one(tokens, hidden, variant, cfg, label)
    write()
    log(f"check: {n} cases, {bad} failed")


def main():
    RESULTS["environment"] = {"argv": sys.argv, "torch": torch.__version__, "cuda": torch.version.cuda,
                              "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "liger": LIGER}
    import triton

    RESULTS["environment"]["triton"] = triton.__version__
    copy = norm_suite.copy_bandwidth(DEV)
    RESULTS["copy_gbps"] = copy
    log(f"copy bandwidth {copy:.0f} GB/s; heuristic now: "
        + ", ".join(f"{h}: {norm.pick(h, True, False)}" for h in ARGS.hiddens))
    for part in ARGS.parts.split(","):
        try:
            {"bench": lambda: part_bench(copy), "check": part_check}[part]()
        except Exception:
            RESULTS["errors"].append(traceback.format_exc())
            log(traceback.format_exc())
        write()
    log(f"wrote {ARGS.out}")


if __name__ == "__main__":
    main()
