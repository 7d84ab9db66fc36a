"""TRITON flash attention on the GPU: correctness sweep, a quick speed table and a tile sweep.

Run from the repository root:
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/attention_gpu_check.py --out attention_check.json [--parts check,speed]

check: runs the GPU-marked sweep packages/turbo-triton/tests/test_attention_gpu.py (TRITON against
  the reference backend on the GPU over odd and long sequences, causal / window / sink / GQA / MLA
  head dims / varlen, forward and backward, outputs poisoned, deterministic backward bit-identical)
  with TRITON_INTERPRET=0 and records each case's outcome.
speed: B x S = 16384 tokens, H=16, D=128 at S=4096 (and D=64/256 at H=32/8), causal and not:
  TFLOP/s of TRITON fwd / bwd / deterministic bwd against SDPA's cuDNN and flash backends
  (FLOPs 4*B*H*S*S*D, halved when causal; backward 2.5x).
The tile sweep lives in attention_h200.py --sweep (the full suite's script).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from xml.etree import ElementTree

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_triton.attention import launch

DEV = "cuda"


def checks(out_dir: str) -> dict:
    """Run the GPU-marked sweep (packages/turbo-triton/tests/test_attention_gpu.py) with the compiled
    kernels; return its counts and each failure's first lines."""
    junit = os.path.join(out_dir, "attention_gpu_tests.xml")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                           "packages/turbo-triton/tests/test_attention_gpu.py", f"--junitxml={junit}"],
                          env=env, capture_output=True, text=True, check=False)
    print(proc.stdout[-3000:], proc.stderr[-2000:], flush=True)
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    rows = []
    for case in cases:
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        status = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
        detail = (failure.get("message") or "")[:600] if failure is not None else None
        rows.append({"case": case.get("name"), "status": status, "seconds": float(case.get("time", 0)),
                     "detail": detail})
    return {"rc": proc.returncode, "cases": rows,
            "passed": sum(r["status"] == "passed" for r in rows), "failed": sum(r["status"] == "failed" for r in rows)}


def _rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=DEV, dtype=dtype)


def _flops(b, h, s, d, causal):
    f = 4 * b * h * s * s * d
    return f / 2 if causal else f


def _bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def speed_rows(shapes):
    rows = []
    for b, h, s, d, causal in shapes:
        q, k, v = (_rand(b, s, h, d).requires_grad_() for _ in range(3))
        dout = _rand(b, s, h, d)
        fl = _flops(b, h, s, d, causal)
        res = {"b": b, "h": h, "s": s, "d": d, "causal": causal}
        fa = AttentionFwdArgs(q.detach(), k.detach(), v.detach(), causal=causal)
        out, lse = launch.attention_fwd(fa)
        res["triton_fwd"] = fl / _bench(lambda: launch.attention_fwd(fa)) * 1e-9
        for det in (False, True):
            ba = AttentionBwdArgs(dout, q.detach(), k.detach(), v.detach(), out, lse, causal=causal, deterministic=det)
            res[f"triton_bwd{'_det' if det else ''}"] = 2.5 * fl / _bench(lambda: launch.attention_bwd(ba)) * 1e-9
        qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    res[f"{name}_fwd"] = fl / _bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                        qt, kt, vt, is_causal=causal)) * 1e-9
                    o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    do = dout.transpose(1, 2)
                    res[f"{name}_bwd"] = 2.5 * fl / _bench(lambda: torch.autograd.grad(
                        o, (qt, kt, vt), do, retain_graph=True)) * 1e-9
            except Exception as exc:  # noqa: BLE001
                res[f"{name}_error"] = str(exc)[:200]
        for p in ("fwd", "bwd"):
            for base in ("cudnn", "flash"):
                if f"{base}_{p}" in res:
                    res[f"ratio_{p}_vs_{base}"] = res[f"triton_{p}"] / res[f"{base}_{p}"]
        res["det_bwd_cost"] = res["triton_bwd"] / res["triton_bwd_det"]
        print(json.dumps({k2: (round(v2, 3) if isinstance(v2, float) else v2) for k2, v2 in res.items()}), flush=True)
        rows.append(res)
    return rows


SPEED = [(4, 16, 4096, 128, True), (4, 16, 4096, 128, False), (2, 32, 8192, 64, True), (4, 8, 4096, 256, True),
         (16, 16, 1024, 128, True)]
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="check,speed")
    a = ap.parse_args()
    parts = a.parts.split(",")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "command": "python3 benchmarks/scripts/attention_gpu_check.py --parts " + a.parts}
    t0 = time.time()
    if "check" in parts:
        res["check"] = checks(os.path.dirname(os.path.abspath(a.out)))
        print("check:", res["check"]["passed"], "passed,", res["check"]["failed"], "failed", flush=True)
    if "speed" in parts:
        res["speed"] = speed_rows(SPEED)
    res["seconds"] = time.time() - t0
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
