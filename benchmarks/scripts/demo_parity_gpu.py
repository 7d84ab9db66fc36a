"""Loss curves of ``turbo demo``'s model on the GPU: turbo (the platform's default backends) vs the
same model in plain PyTorch, bf16 and every FP8 recipe; the data behind the bands of the ``gpu``
tests in packages/turbo-core/tests/test_demo_parity.py.

Run from the repo root with
`PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin python3 benchmarks/scripts/demo_parity_gpu.py --out <file>`

For each seed (``--seeds 0,1,2``; seed s: initial weights from ``torch.manual_seed(s)``, batches
from ``MarkovData(seed=s + 1)``) it trains, from the same weights on the same batches, on cuda:
``plain_f64`` (``PlainDecoder`` in float64, the oracle), ``plain_bf16`` (``PlainDecoder``, bf16
parameters: cuBLAS, SDPA), ``turbo_bf16`` (``TurboDecoder``, bf16 parameters) and
``fp8_<recipe>`` (``TurboDecoder`` with the tensorwise / rowwise / blockwise E4M3 recipe, bf16
parameters). The config and run settings are the test's (``GPU_CFG``, ``GPU_RUN``: keep in sync).

``--out`` gets ``{"env": {...}, "bands": {...}, "seeds": {s: {"curves": {run: [loss per step]},
"calls": {run: {"prim/backend": calls}}, "ms_per_step": {run: median ms}, "compare": {"a vs b":
{"max_rel": x, "tail_rel": y, "pass": bool}}, "errors": {run: traceback}}}}``. A run that raises is
recorded and the others still run. ``--pytest`` also runs the ``gpu`` tests of that file (pytest's
exit status is recorded under ``"pytest_rc"``). Exit status 0 when every comparison is within its
band, else 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import traceback

import torch

from turbo_core.demo import DemoConfig, PlainDecoder, TurboDecoder, fp8_recipe, train

GPU_CFG = DemoConfig(vocab=512, d_model=256, layers=4, heads=4, ffn=512, experts=8, topk=2, expert_ffn=256)
GPU_RUN = {"steps": 40, "batch": 8, "seq": 128, "lr": 3e-3}
BANDS = {"bf16": 3e-2, "fp8": 3e-2, "tail": 1.5e-2}
TAIL = 5
RECIPES = ("tensorwise", "rowwise", "blockwise")
TEST = "packages/turbo-core/tests/test_demo_parity.py"


def _model(kind: str, seed: int, fp8: str = "none") -> torch.nn.Module:
    torch.manual_seed(seed)
    turbo = TurboDecoder(GPU_CFG, fp8_recipe(fp8))
    if kind == "turbo":
        return turbo
    plain = PlainDecoder(GPU_CFG)
    plain.load_state_dict(turbo.state_dict(), strict=True)
    return plain


def _compare(a: list[float], b: list[float], band: float) -> dict:
    max_rel = max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))
    ta, tb = sum(a[-TAIL:]) / TAIL, sum(b[-TAIL:]) / TAIL
    tail_rel = abs(ta - tb) / abs(tb)
    return {"max_rel": max_rel, "tail_rel": tail_rel, "band": band,
            "pass": max_rel < band and tail_rel < BANDS["tail"]}


def _one_seed(seed: int) -> dict:
    runs = {"plain_f64": ("plain", torch.float64, "none"), "plain_bf16": ("plain", torch.bfloat16, "none"),
            "turbo_bf16": ("turbo", torch.bfloat16, "none")}
    runs.update({f"fp8_{r}": ("turbo", torch.bfloat16, r) for r in RECIPES})
    out: dict = {"curves": {}, "calls": {}, "ms_per_step": {}, "errors": {}, "compare": {}}
    for name, (kind, dtype, fp8) in runs.items():
        print(f"=== seed {seed}: {name}", flush=True)
        try:
            result = train(GPU_CFG, model=_model(kind, seed, fp8), device="cuda", dtype=dtype, seed=seed, **GPU_RUN)
        except Exception:
            out["errors"][name] = traceback.format_exc()
            print(out["errors"][name], flush=True)
            continue
        out["curves"][name] = result.losses
        out["calls"][name] = {f"{p}/{b}": n for (p, b), n in sorted(result.calls.items())}
        out["ms_per_step"][name] = statistics.median(result.step_ms[2:] or result.step_ms)
        print(f"  loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}; backends "
              f"{sorted({b for _, b in result.calls})}", flush=True)
    c = out["curves"]
    pairs = [("plain_bf16", "plain_f64", "bf16"), ("turbo_bf16", "plain_bf16", "bf16"),
             ("turbo_bf16", "plain_f64", "bf16")] + [(f"fp8_{r}", "turbo_bf16", "fp8") for r in RECIPES]
    for a, b, band in pairs:
        if a in c and b in c:
            out["compare"][f"{a} vs {b}"] = _compare(c[a], c[b], BANDS[band])
        else:
            out["compare"][f"{a} vs {b}"] = {"pass": False, "missing": [x for x in (a, b) if x not in c]}
    for key, row in out["compare"].items():
        print(f"  {key}: {row}", flush=True)
    return out


def _cli() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default 0, the test's)")
    p.add_argument("--pytest", action="store_true", help="also run the gpu tests of " + TEST)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("demo_parity_gpu: no CUDA/ROCm device visible to torch", file=sys.stderr)
        return 2
    report: dict = {"env": {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                            "cfg": GPU_CFG.__dict__, "run": GPU_RUN},
                    "bands": BANDS, "seeds": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        report["seeds"][seed] = _one_seed(seed)
    if args.pytest:
        # -p: the marker plugin's entry point is absent when the packages are on PYTHONPATH only
        # (a no-op where turbo-core is installed); -m gpu: the GPU tests alone.
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", TEST, "-m", "gpu", "-p", "turbo_core.testing.pytest_plugin",
               "-p", "no:cacheprovider"]
        report["pytest_rc"] = subprocess.call(cmd)
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=1)
    ok = all(row["pass"] for s in report["seeds"].values() for row in s["compare"].values())
    ok = ok and report.get("pytest_rc", 0) == 0
    print(f"demo_parity_gpu: {'all within bands' if ok else 'OUT OF BAND or failed'}; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_cli())
