"""``turbo bench moe`` and ``turbo bench norm`` / ``activation`` with liger-kernel, on the GPU machine.

Parts (``--parts``, default ``moe,norm,activation``, in this order):

* ``moe``: the router (``moe_routing_fwd``/``bwd``) and the token permutation (``moe_permute`` /
  ``moe_unpermute``, forward and backward; row map built outside the timed region) at DeepSeek-V3
  (E=256 top-8, groups 8/4, hidden 7168), Qwen3-235B (E=128 top-8, 4096) and Mixtral (E=8 top-2,
  4096), ``--moe-tokens`` 4096 and 16384: eager torch, ``torch.compile``, ``turbo:TRITON``.
* ``norm`` / ``activation``: RMSNorm (and fused residual) and SwiGLU/GeGLU with probs at
  ``--tokens`` 16384: eager torch, ``torch.compile``, ``turbo:TRITON``, and liger-kernel
  (``liger``: ``LigerRMSNormFunction`` / ``LigerFusedAddRMSNormFunction`` / ``LigerSiLUMulFunction``
  on separate a, b; ``liger:gate_up``: ``LigerFusedGateUpSiLUMulFunction`` on x [T, 2F]).

GB/s from the suites' explicit byte counts, fraction of the device-to-device copy bandwidth measured
once at the start, ratio to eager torch, max relative error against float64 math. Cases run one at a
time; once ``--budget-s`` (default 540 s) has passed, the remaining cases get a row ``skipped: time
budget`` and the script ends. The JSON (``environment``, ``rows``, ``summary``; ``turbo bench report``
reads it) is rewritten after every case, so a killed run keeps what it measured.

liger-kernel is pure Python: carry its wheel. Once, here, in the repository root (the device has no
index; ../shared/GPU.md):

  mkdir -p .whl && grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
  python3 -m pip download -q --no-deps --only-binary=:all: -d .whl liger-kernel==0.8.5

then run with ``carry: [".whl"]``. This script extracts ``.whl/liger_kernel-*.whl`` (or
``--liger-wheel``) into a temporary folder and puts it first on ``sys.path`` (no pip needed); without
a wheel the liger rows say ``declined: liger-kernel not importable (...)``.

Usage (repository root, no install needed; torch 2.11 + triton 3.6 there):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/moe_bench_h200.py --out $OUT/moe_bench.json

MoE options: ``--models`` (run in the order given) / ``--ops`` (``op:pass``) pick cases; ``--variants MODELS`` adds rows for the
TRITON launch variants in ``VARIANTS`` (tile, unroll, warps) on those models' cases; ``--baseline PKG``
adds rows for an earlier copy of ``turbo_triton.moe`` importable as ``PKG.moe`` (its imports renamed,
e.g. ``turbo_triton_s10``), so before and after are timed in one run on the same inputs. Both kinds
call the launchers directly (no dispatcher; device time, so the same figure).

Expected: about 5 minutes (torch.compile compiles every case: seconds each). If one 10-minute command
is not enough, run ``--parts moe`` and ``--parts norm,activation`` as two commands. ``--smoke`` runs
the tiny ``--quick`` cases on the CPU with the Triton interpreter (TRITON_INTERPRET=1), one timed
call each, to check the script itself.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import traceback
import zipfile


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="moe,norm,activation")
    p.add_argument("--moe-tokens", type=int, nargs="*", default=[4096, 16384])
    p.add_argument("--tokens", type=int, nargs="*", default=[16384], help="norm/activation token counts")
    p.add_argument("--liger-wheel", help="default: .whl/liger_kernel-*.whl when there is one")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no case after this many seconds")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--smoke", action="store_true", help="tiny cases on the CPU interpreter")
    p.add_argument("--models", help="comma list of MoE models (default: all)")
    p.add_argument("--ops", help="comma list of op:pass, e.g. moe_routing:bwd,moe_permute:fwd (default: all)")
    p.add_argument("--variants", help="comma list of MoE models whose TRITON launch variants (tile, unroll, "
                   "warps: VARIANTS) are timed too, as extra providers of the same case; 'router': the router "
                   "backward's variants on every model")
    p.add_argument("--baseline", help="a package holding an earlier copy of turbo_triton.moe (e.g. "
                   "turbo_triton_s10, its imports renamed): timed too, as provider 'TRITON@<package>'")
    return p.parse_args()


ARGS = _parse()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"
T0 = time.time()


def log(*a):
    print(*a, flush=True)


def add_liger() -> dict:
    """Extract the liger-kernel wheel and put it first on sys.path; what was done, for the JSON."""
    wheel = ARGS.liger_wheel or next(iter(sorted(glob.glob(".whl/liger_kernel-*.whl"))), None)
    if not wheel:
        return {"wheel": None, "note": "no liger-kernel wheel: liger rows are declined"}
    dest = tempfile.mkdtemp(prefix="liger_")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    sys.path.insert(0, dest)
    info = {"wheel": os.path.basename(wheel), "path": dest}
    try:
        import liger_kernel.ops.swiglu  # noqa: F401  (the import the suites make, so failures show here too)

        info["import"] = "ok"
    except Exception as exc:
        info["import"] = f"{type(exc).__name__}: {exc}"
    log("liger-kernel:", info)
    return info


LIGER = add_liger()

import torch  # noqa: E402

from turbo_core.bench import report, runner  # noqa: E402
from turbo_core.bench.suites import activation, moe  # noqa: E402
from turbo_core.bench.suites import norm as norm_suite  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
RESULTS: dict = {"environment": {}, "rows": [], "errors": []}


def write():
    RESULTS["summary"] = report.summary(RESULTS["rows"])
    with open(ARGS.out, "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)


#: TRITON launch variants of the MoE ops (keyword overrides of the turbo_triton.moe launchers), per
#: (op, pass); the router's backward per expert count. The default launch is the 'turbo:TRITON' row.
VARIANTS = {
    ("moe_routing", "bwd"): {128: [dict(block_t=2, num_warps=4), dict(block_t=1, num_warps=2)],
                             256: [dict(block_t=1, num_warps=4), dict(block_t=2, num_warps=4),
                                   dict(block_t=1, num_warps=2)]},
    ("moe_permute", "fwd"): [dict(block_h=4096, num_warps=8), dict(block_h=1024, num_warps=4), dict(unroll=4),
                             dict(block_h=2048, num_warps=8), dict(block_h=8192, num_warps=8)],
    ("moe_unpermute", "fwd"): [dict(block_h=1024, num_warps=4), dict(block_h=4096, num_warps=8)],
    ("moe_unpermute", "bwd"): [dict(block_h=4096, num_warps=8), dict(block_h=1024, num_warps=4),
                               dict(block_h=2048, num_warps=8)],
}
#: Variants timed in session 11's first run (benchmarks/results/moe-bench-4096-s11a-h200-2026-12-01.json).
EARLIER_VARIANTS = {
    ("moe_routing", "bwd"): {8: [dict(block_t=32, num_warps=4), dict(block_t=16, num_warps=2),
                                 dict(block_t=64, num_warps=8)]},
    ("moe_permute", "fwd"): [dict(gather=True), dict(unroll=1), dict(block_h=4096, num_warps=8)],
    ("moe_permute", "bwd"): [dict(block_h=4096, num_warps=8)],
    ("moe_unpermute", "fwd"): [dict(unroll=1), dict(block_h=4096, num_warps=8)],
    ("moe_unpermute", "bwd"): [dict(block_h=4096, num_warps=8), dict(block_h=1024, num_warps=4)],
}


def _launcher(pkg: str, prim: str):
    import importlib

    mod, fn = {"moe_routing_bwd": ("routing", "moe_routing_bwd"), "moe_routing_fwd": ("routing", "moe_routing_fwd"),
               "moe_permute": ("permute", "moe_permute"), "moe_unpermute": ("unpermute", "moe_unpermute"),
               "moe_unpermute_bwd": ("unpermute", "moe_unpermute_bwd")}[prim]
    return getattr(importlib.import_module(f"{pkg}.moe.{mod}"), fn)


def moe_peers(case) -> list:
    """Extra providers of a MoE case: the baseline package's TRITON launchers and the launch variants,
    each called directly (no dispatcher) on the case's arguments."""
    from turbo_core.bench.suites import moe as moe_suite
    from turbo_core.bench.suites.norm import Peer

    peers = []

    def peer(name, pkg, kw):
        def prepare(inputs):
            prim, args = moe_suite.turbo_args(case, inputs)
            fn = _launcher(pkg, prim)
            return lambda: moe_suite._outputs(case, fn(args, **kw))

        return Peer(name, prepare)

    if ARGS.baseline:
        peers.append(peer(f"TRITON@{ARGS.baseline}", ARGS.baseline, {}))
    table = VARIANTS.get((case.op, case.pass_), []) if ARGS.variants else []
    if isinstance(table, dict):  # the router's: on every model given 'router' in --variants
        table = table.get(case.extra["model"].experts, []) if "router" in ARGS.variants.split(",") else []
    elif case.model not in (ARGS.variants or "").split(","):
        table = []
    if table:
        for kw in table:
            peers.append(peer("TRITON[" + ",".join(f"{k}={v}" for k, v in kw.items()) + "]", "turbo_triton", kw))
    return peers


def run_part(suite, token_counts: list[int], copy_gbps: float) -> list[dict]:
    cases = [c for t in token_counts for c in suite.cases(t if not ARGS.smoke else None, ARGS.smoke, None)]
    if suite is moe:
        if ARGS.models:  # in the order given (a time budget then cuts the last ones)
            order = ARGS.models.split(",")
            cases = sorted((c for c in cases if c.model in order), key=lambda c: order.index(c.model))
        if ARGS.ops:
            cases = [c for c in cases if f"{c.op}:{c.pass_}" in ARGS.ops.split(",")]
        if ARGS.baseline or ARGS.variants:
            moe.peer_providers = moe_peers
    if ARGS.smoke:
        cases = list({c.label: c for c in cases}.values())
    rows: list[dict] = []
    for i, case in enumerate(cases):
        if time.time() - T0 > ARGS.budget_s:
            rows.append({"suite": case.suite, "case": case.label, "op": case.op, "model": case.model,
                         "pass": case.pass_, "tokens": case.tokens, "hidden": case.hidden, "provider": "-",
                         "status": f"skipped: time budget ({ARGS.budget_s:.0f} s) spent"})
            continue
        t = time.time()
        try:
            got = norm_suite.run_bandwidth(
                suite, [case], providers=None, include_reference=False,
                compile_provider=DEV == "cuda" and not ARGS.no_compile, warmup=0 if ARGS.smoke else 10,
                iters=1 if ARGS.smoke else 50, device=DEV, copy_gbps=copy_gbps)
        except Exception:
            RESULTS["errors"].append({"case": case.label, "traceback": traceback.format_exc()})
            log(traceback.format_exc())
            got = []
        rows += got
        RESULTS["rows"] += got
        write()
        cells = ", ".join(f"{r['provider']} {r['gbps']:.0f}" if r["status"] == "ok" else f"{r['provider']} "
                          f"{r['status'][:60]}" for r in got)
        log(f"[{i + 1}/{len(cases)} {time.time() - T0:.0f}s +{time.time() - t:.1f}s] {case.label}: {cells}")
        if DEV == "cuda":
            torch.cuda.empty_cache()
    return rows


def main():
    from rich.console import Console

    RESULTS["environment"] = runner.environment(DEV)
    RESULTS["environment"].update({"argv": sys.argv, "liger": LIGER})
    copy = norm_suite.copy_bandwidth(DEV)
    RESULTS["environment"]["copy_gbps"] = copy
    log(f"copy bandwidth {copy:.0f} GB/s")
    write()
    suites = {"moe": (moe, ARGS.moe_tokens), "norm": (norm_suite, ARGS.tokens),
              "activation": (activation, ARGS.tokens)}
    console = Console(width=240)
    for part in [p.strip() for p in ARGS.parts.split(",") if p.strip()]:
        log(f"== {part}")
        suite, tokens = suites[part]
        rows = run_part(suite, tokens, copy)
        norm_suite.print_table([r for r in rows if r["provider"] != "-"], console)
    write()
    log(f"wrote {ARGS.out} after {time.time() - T0:.0f}s")


if __name__ == "__main__":
    main()
