"""TRITON flash attention on the GPU: correctness sweep, a quick speed table and a tile sweep.

Run from the repository root:
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/attention_gpu_check.py --out attention_check.json [--parts check,speed]

check: TRITON against the reference backend (fp32 math on the GPU) over odd and long sequences,
  causal / window / sink / GQA / MLA head dims / varlen, forward and backward, with the caching
  allocator's blocks poisoned with NaN before each call (an unwritten element shows up); and the
  deterministic backward bit-identical over 3 runs.
speed: B x S = 16384 tokens, H=16, D=128 at S=4096 (and D=64/256 at H=32/8), causal and not:
  TFLOP/s of TRITON fwd / bwd / deterministic bwd against SDPA's cuDNN and flash backends
  (FLOPs 4*B*H*S*S*D, halved when causal; backward 2.5x).
The tile sweep lives in attention_h200.py --sweep (the full suite's script).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.reference import attention as ref
from turbo_triton.attention import launch

DEV = "cuda"


def poison() -> None:
    """Fill the allocator's free blocks with NaN so that outputs allocated next start as NaN."""
    free = torch.cuda.mem_get_info()[0]
    n = int(min(free * 0.5, 8 << 30)) // 4
    t = torch.empty(n, dtype=torch.float32, device=DEV)
    t.fill_(float("nan"))
    del t


def _err(a, b):
    a, b = a.double(), b.double()
    fin = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), fin):
        return float("inf")
    return ((a - b)[fin].abs().max().item() if fin.any() else 0.0), b[fin].abs().max().item() if fin.any() else 0.0


def check_case(name, q, k, v, dout, **kw):
    args = AttentionFwdArgs(q, k, v, **kw)
    poison()
    out, lse = launch.attention_fwd(args)
    r_out, r_lse = ref.attention_fwd(args)
    row = {"case": name}
    ok = True
    for what, got, want, tol in (("out", out, r_out, 1.6e-2), ("lse", lse, r_lse, 1e-3)):
        e = _err(got, want)
        if e == float("inf"):
            row[what] = "inf/nan pattern differs"
            ok = False
            continue
        err, amax = e
        row[what] = err
        ok &= err <= tol * max(1.0, amax)
    for det in (False, True):
        bargs = AttentionBwdArgs(dout, q, k, v, r_out, r_lse, **kw, deterministic=det)
        poison()
        g = launch.attention_bwd(bargs)
        rg = ref.attention_bwd(bargs)
        for what, got, want in zip(("dq", "dk", "dv", "dsink"), g, rg, strict=True):
            if want is None:
                continue
            e = _err(got, want)
            key = f"{what}{'_det' if det else ''}"
            if e == float("inf"):
                row[key] = "inf/nan pattern differs"
                ok = False
                continue
            err, amax = e
            row[key] = err
            ok &= err <= 2 * 2 ** -7 * max(1.0, amax) if what != "dsink" else err <= 1e-2 * max(1.0, amax)
        if det:
            again = launch.attention_bwd(bargs)
            row["det_bit_identical"] = all(torch.equal(a, b) for a, b in zip(g[:3], again[:3], strict=True))
            ok &= row["det_bit_identical"]
    row["ok"] = bool(ok)
    print(json.dumps(row), flush=True)
    return row


def _rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=DEV, dtype=dtype)


def checks():
    rows = []
    torch.manual_seed(0)
    dense = [  # name, b, s_q, s_kv, h_q, h_kv, d_qk, d_v, kwargs
        ("s128-causal", 2, 128, 128, 8, 8, 128, 128, dict(causal=True)),
        ("s1000-full", 2, 1000, 1000, 8, 2, 128, 128, {}),
        ("s333x1001-causal-gqa", 1, 333, 1001, 16, 4, 64, 64, dict(causal=True)),
        ("s4096-causal-d64", 1, 4096, 4096, 4, 4, 64, 64, dict(causal=True)),
        ("s4096-causal-d256", 1, 4096, 4096, 2, 1, 256, 256, dict(causal=True)),
        ("s2048-mla192x128-causal", 1, 2048, 2048, 8, 8, 192, 128, dict(causal=True)),
        ("s4100-swa128-sink", 1, 4100, 4100, 8, 1, 64, 64, dict(causal=True, window_size=(128, 0), sink=None)),
        ("s16384-causal", 1, 16384, 16384, 2, 1, 128, 128, dict(causal=True)),
        ("decode-s1x5000", 4, 1, 5000, 8, 1, 128, 128, dict(causal=True)),
    ]
    for name, b, sq, sk, hq, hk, dqk, dv, kw in dense:
        kw = dict(kw)
        if "sink" in kw:
            kw["sink"] = torch.randn(hq, device=DEV)
        q, k, v = _rand(b, sq, hq, dqk), _rand(b, sk, hk, dqk), _rand(b, sk, hk, dv)
        rows.append(check_case(name, q, k, v, _rand(b, sq, hq, dv), **kw))
    lens = torch.tensor([1, 77, 1000, 0, 4097, 512], dtype=torch.int32)
    cu = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)]).to(DEV)
    total = int(lens.sum())
    for name, kw in (("varlen-causal", dict(causal=True)), ("varlen-win64-32", dict(window_size=(64, 32)))):
        q, k, v = _rand(total, 8, 128), _rand(total, 2, 128), _rand(total, 2, 128)
        rows.append(check_case(name, q, k, v, _rand(total, 8, 128), cu_seqlens_q=cu, cu_seqlens_k=cu,
                               max_seqlen_q=4097, max_seqlen_k=4097, **kw))
    return rows


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
        res["check"] = checks()
        print("check:", sum(r["ok"] for r in res["check"]), "/", len(res["check"]), "ok", flush=True)
    if "speed" in parts:
        res["speed"] = speed_rows(SPEED)
    res["seconds"] = time.time() - t0
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
