"""TRITON FP8 attention (attention_fp8_fwd / attention_fp8_bwd) on the GPU: SNR check, speed, tile sweep.

Run from the repository root:
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/attention_fp8_gpu_check.py --out attention_fp8_check.json [--parts check,speed,sweep]

The kernels are called through their launchers (turbo_triton.attention.fp8_launch), so the script
works whether or not plugin.py registers them yet.

check: out, dq, dk, dv against unquantized float64 attention computed on the GPU (explicit score
  matrices, per head), as SNR in dB (gate: 20 dB, the spec's), and against the TORCH reference's FP8
  emulation (turbo_core.reference.attention.attention_fp8_*: the same quantization in fp32 on a GPU);
  lse against float64's: no further from it than the emulation's lse is (1.25x + 0.01; the kernel's
  scores differ from the emulation's fp32 ones by Hopper's reduced-precision FP8 MMA accumulation,
  the same effect as `_scaled_mm(use_fast_accum=True)`, so an exact match is not expected); outputs
  allocated from NaN-poisoned memory (an unwritten element shows up as a non-finite value); the backward run twice must be bit-identical. Shapes: B2 H16 S2048 D128
  causal and not (the issue's), odd lengths, s_q != s_kv, GQA, a sliding window, d 64/256, MLA
  192/128, fp16 inputs, rows that see no key; and two cases whose 64-row blocks differ in
  magnitude (each block of q/k times 2^U{-2..0}, of v/dout times 2^U{-3..3}, per head), where a
  scale read from the wrong block would cost tens of dB.
speed: TFLOP/s (4*B*H*S*S*D, halved when causal; backward 2.5x) of the FP8 forward and backward
  (quantization included; the quantization of q, k, v alone is timed too), the bf16 TRITON kernels
  (turbo_triton.attention.launch.attention_fwd / attention_bwd) and SDPA's cuDNN backend, bf16 inputs.
sweep: the FP8 kernels' tiles (TURBO_TRITON_ATTN_FP8_TILES) at B4 H16 S4096 D128, causal and not.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

import torch
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from turbo_core.dispatch.specs.attention import (
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
)
from turbo_core.reference import attention as ref
from turbo_triton.attention import fp8_launch, launch
from turbo_triton.attention.fp8_quant import quantize_blocks

DEV = "cuda"
GATE_DB = 20.0


def poison() -> None:
    """Fill the allocator's free blocks with NaN so that outputs allocated next start as NaN."""
    free = torch.cuda.mem_get_info()[0]
    n = int(min(free * 0.5, 8 << 30)) // 4
    t = torch.empty(n, dtype=torch.float32, device=DEV)
    t.fill_(float("nan"))
    del t


def snr_db(want: torch.Tensor, got: torch.Tensor) -> float:
    want = want.double()
    err = (want - got.double()).pow(2).sum().item()
    sig = want.pow(2).sum().item()
    if err == 0:
        return float("inf")
    if err != err:
        return float("nan")
    return 10 * torch.log10(torch.tensor(sig / err)).item()


def f64_attention(q, k, v, dout, scale, causal, window):
    """float64 out, lse, dq, dk, dv of [b, s, h, d] inputs (GQA by repeat), per (batch, head)."""
    b, s_q, h_q, _ = q.shape
    s_k, h_k = k.shape[1], k.shape[2]
    group = h_q // h_k
    i = torch.arange(s_q, device=DEV)[:, None] + (s_k - s_q)
    j = torch.arange(s_k, device=DEV)[None, :]
    left, right = window
    right = 0 if causal else right
    ok = torch.ones(s_q, s_k, dtype=torch.bool, device=DEV)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    out = torch.zeros(b, s_q, h_q, v.shape[-1], dtype=torch.float64, device=DEV)
    lse = torch.full((b, h_q, s_q), float("-inf"), dtype=torch.float64, device=DEV)
    dq = torch.zeros(q.shape, dtype=torch.float64, device=DEV)
    dk = torch.zeros(k.shape, dtype=torch.float64, device=DEV)
    dv = torch.zeros(v.shape, dtype=torch.float64, device=DEV)
    for bi in range(b):
        for h in range(h_q):
            hk = h // group
            qh, kh, vh, doh = q[bi, :, h].double(), k[bi, :, hk].double(), v[bi, :, hk].double(), dout[bi, :, h].double()
            s = (qh @ kh.T * scale).masked_fill(~ok, float("-inf"))
            lse_h = torch.logsumexp(s, -1)
            finite = torch.isfinite(lse_h)
            p = torch.where(finite[:, None], torch.exp(s - torch.where(finite, lse_h, 0.0)[:, None]), 0.0)
            out[bi, :, h] = p @ vh
            lse[bi, h] = lse_h
            dp = doh @ vh.T
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
            dq[bi, :, h] = ds @ kh * scale
            dk[bi, :, hk] += ds.T @ qh * scale
            dv[bi, :, hk] += p.T @ doh
    return out, lse, dq, dk, dv


def _blocky(x, g, lo, hi):
    """``x [b, s, h, d]`` times ``2**e`` per (batch, 64-row block, head), ``e`` uniform in ``lo..hi``."""
    b, s, h, _ = x.shape
    e = torch.randint(lo, hi + 1, (b, (s + 63) // 64, h, 1), device=DEV, generator=g)
    return x * torch.pow(2.0, e.float()).repeat_interleave(64, dim=1)[:, :s]


def check_case(name, b, s_q, s_k, h_q, h_k, d_qk, d_v, causal=False, window=(-1, -1), dtype=torch.bfloat16,
               blocky=False):
    row = {"case": name}
    try:
        g = torch.Generator(device=DEV).manual_seed(0)
        q = torch.randn(b, s_q, h_q, d_qk, device=DEV, generator=g)
        k = torch.randn(b, s_k, h_k, d_qk, device=DEV, generator=g)
        v = torch.randn(b, s_k, h_k, d_v, device=DEV, generator=g)
        dout = torch.randn(b, s_q, h_q, d_v, device=DEV, generator=g)
        if blocky:
            q, k = _blocky(q, g, -2, 0), _blocky(k, g, -2, 0)
            v, dout = _blocky(v, g, -3, 3), _blocky(dout, g, -3, 3)
        q, k, v, dout = (t.to(dtype) for t in (q, k, v, dout))
        fa = AttentionFp8FwdArgs(q, k, v, causal=causal, window_size=window)
        row["can_handle"] = fp8_launch.can_handle(fa)
        poison()
        out, lse = fp8_launch.attention_fp8_fwd(fa)
        ba = AttentionFp8BwdArgs(dout, q, k, v, out, lse, causal=causal, window_size=window)
        poison()
        grads = fp8_launch.attention_fp8_bwd(ba)
        again = fp8_launch.attention_fp8_bwd(ba)
        torch.cuda.synchronize()
        row["bwd_bit_identical"] = all(torch.equal(a, c) for a, c in zip(grads, again, strict=True))
        w_out, w_lse, *w_grads = f64_attention(q, k, v, dout, d_qk ** -0.5, causal, window)
        e_out, e_lse = ref.attention_fp8_fwd(fa)
        e_grads = ref.attention_fp8_bwd(ba)
        ok = row["bwd_bit_identical"]
        for what, got, want, emu in (("out", out, w_out, e_out), *zip(("dq", "dk", "dv"), grads, w_grads, e_grads,
                                                                      strict=True)):
            finite = bool(torch.isfinite(got).all())
            row[f"{what}_snr"] = round(snr_db(want, got), 2) if finite else "non-finite"
            row[f"{what}_snr_vs_emu"] = round(snr_db(emu, got), 2) if finite else "non-finite"
            ok &= finite and row[f"{what}_snr"] >= GATE_DB
        fin = torch.isfinite(w_lse)
        row["lse_inf_pattern_ok"] = bool(torch.equal(torch.isfinite(lse), fin))
        # lse: no further from float64's than the emulation's (same quantization, fp32 sums) is;
        # its distance to the emulation is informative (Hopper's FP8 MMA adds at reduced precision)
        def lse_err(a, w):
            return (a.double()[fin] - w.double()[fin]).abs().max().item() if fin.any() else 0.0
        row["lse_max_err_vs_emu"] = lse_err(lse, e_lse)
        row["lse_max_err_vs_f64"] = lse_err(lse, w_lse)
        row["lse_max_err_emu_vs_f64"] = lse_err(e_lse, w_lse)
        row["lse_gate"] = round(1.25 * row["lse_max_err_emu_vs_f64"] + 0.01, 6)
        ok &= row["lse_inf_pattern_ok"] and row["lse_max_err_vs_f64"] <= row["lse_gate"]
        row["ok"] = bool(ok)
    except Exception:  # noqa: BLE001
        row["ok"] = False
        row["error"] = traceback.format_exc()[-1500:]
    print(json.dumps(row), flush=True)
    torch.cuda.empty_cache()
    return row


CHECKS = [  # name, b, s_q, s_k, h_q, h_k, d_qk, d_v, kwargs
    ("b2-h16-s2048-d128-causal", 2, 2048, 2048, 16, 16, 128, 128, dict(causal=True)),
    ("b2-h16-s2048-d128-full", 2, 2048, 2048, 16, 16, 128, 128, {}),
    ("s1000-gqa8x2-d128-full", 2, 1000, 1000, 8, 2, 128, 128, {}),
    ("s333x1001-causal-gqa16x4-d64", 1, 333, 1001, 16, 4, 64, 64, dict(causal=True)),
    ("s1001x333-causal-empty-rows", 1, 1001, 333, 4, 4, 128, 128, dict(causal=True)),
    ("s4100-swa128-gqa8x1-d64", 1, 4100, 4100, 8, 1, 64, 64, dict(causal=True, window=(128, 0))),
    ("s1500-win64-32-d128", 1, 1500, 1500, 4, 2, 128, 128, dict(window=(64, 32))),
    ("s2048-causal-d256", 1, 2048, 2048, 4, 2, 256, 256, dict(causal=True)),
    ("s1024-mla192x128-causal", 1, 1024, 1024, 8, 8, 192, 128, dict(causal=True)),
    ("s777-d80-full", 1, 777, 777, 4, 4, 80, 80, {}),
    ("s2048-causal-fp16", 1, 2048, 2048, 8, 8, 128, 128, dict(causal=True, dtype=torch.float16)),
    ("s64-causal-fp32", 2, 64, 64, 4, 4, 64, 64, dict(causal=True, dtype=torch.float32)),
    ("s2048-causal-blocky", 1, 2048, 2048, 8, 2, 128, 128, dict(causal=True, blocky=True)),
    ("s1000x1500-full-blocky-d64", 2, 1000, 1500, 4, 4, 64, 64, dict(blocky=True)),
]


def checks(only=None):
    rows = [check_case(name, *dims, **kw) for name, *dims, kw in CHECKS if not only or name in only]
    print("check:", sum(r["ok"] for r in rows), "/", len(rows), "ok", flush=True)
    return rows


def _flops(b, h, s, d, causal):
    f = 4 * b * h * s * s * d
    return f / 2 if causal else f


def _bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all")


def _rate(flops, fn):
    """(median TFLOP/s, [min, max] TFLOP/s) of ``fn``; or the error text."""
    try:
        times = sorted(_bench(fn))
        med = times[len(times) // 2]
        return round(flops / med * 1e-9, 1), [round(flops / times[-1] * 1e-9, 1), round(flops / times[0] * 1e-9, 1)]
    except Exception as exc:  # noqa: BLE001
        return f"error: {str(exc)[:300]}", None


def speed_rows(shapes, label="", baselines=True):
    rows = []
    for b, h, s, d, causal in shapes:
        res = {"b": b, "h": h, "s": s, "d": d, "causal": causal, "tiles": label}
        try:
            q, k, v, dout = (torch.randn(b, s, h, d, device=DEV, dtype=torch.bfloat16) for _ in range(4))
            fl = _flops(b, h, s, d, causal)
            fa = AttentionFp8FwdArgs(q, k, v, causal=causal)
            out, lse = fp8_launch.attention_fp8_fwd(fa)
            ba = AttentionFp8BwdArgs(dout, q, k, v, out, lse, causal=causal)
            res["fp8_fwd"], res["fp8_fwd_spread"] = _rate(fl, lambda: fp8_launch.attention_fp8_fwd(fa))
            res["fp8_bwd"], res["fp8_bwd_spread"] = _rate(2.5 * fl, lambda: fp8_launch.attention_fp8_bwd(ba))
            if baselines:
                t = sorted(_bench(lambda: (quantize_blocks(q), quantize_blocks(k),
                                           quantize_blocks(v, rows=False, trans=True))))
                res["fp8_fwd_quant_ms"] = round(t[len(t) // 2], 4)
                bfa = AttentionFwdArgs(q, k, v, causal=causal)
                bout, blse = launch.attention_fwd(bfa)
                bba = AttentionBwdArgs(dout, q, k, v, bout, blse, causal=causal)
                res["bf16_fwd"], _ = _rate(fl, lambda: launch.attention_fwd(bfa))
                res["bf16_bwd"], _ = _rate(2.5 * fl, lambda: launch.attention_bwd(bba))
                qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                try:
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        sdpa = torch.nn.functional.scaled_dot_product_attention
                        res["cudnn_fwd"], _ = _rate(fl, lambda: sdpa(qt, kt, vt, is_causal=causal))
                        o = sdpa(qt, kt, vt, is_causal=causal)
                        do = dout.transpose(1, 2)
                        res["cudnn_bwd"], _ = _rate(2.5 * fl, lambda: torch.autograd.grad(o, (qt, kt, vt), do,
                                                                                           retain_graph=True))
                except Exception as exc:  # noqa: BLE001
                    res["cudnn_error"] = str(exc)[:300]
                for p in ("fwd", "bwd"):
                    for base in ("bf16", "cudnn"):
                        a, c = res.get(f"fp8_{p}"), res.get(f"{base}_{p}")
                        if isinstance(a, float) and isinstance(c, float):
                            res[f"ratio_fp8_{p}_vs_{base}"] = round(a / c, 3)
        except Exception:  # noqa: BLE001
            res["error"] = traceback.format_exc()[-1500:]
        print(json.dumps(res), flush=True)
        rows.append(res)
        torch.cuda.empty_cache()
    return rows


SPEED = [(2, 16, 2048, 128, True), (2, 16, 2048, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 128, False),
         (2, 32, 8192, 64, True), (4, 8, 4096, 256, True)]
SWEEP_SHAPE = (4, 16, 4096, 128)
SWEEP = {
    "fwd": ["128,64,8,3", "128,64,4,3", "128,64,8,4", "128,64,8,2", "128,32,4,4", "64,64,4,3", "128,64,4,4"],
    "dq": ["128,64,8,2", "128,64,8,3", "128,128,8,2", "64,64,4,3", "128,32,8,2", "128,32,4,3", "64,128,8,2",
           "64,64,4,2"],
    "dkdv": ["64,128,8,2", "64,128,8,3", "32,128,8,2", "32,128,8,3", "64,64,8,2", "64,64,4,3", "32,128,4,3",
             "64,64,4,2", "32,64,4,3"],
}


def sweep():
    rows = []
    for kernel, tiles in SWEEP.items():
        for tile in tiles:
            os.environ["TURBO_TRITON_ATTN_FP8_TILES"] = f"{kernel}={tile}"
            for causal in (True, False):
                rows.extend(speed_rows([(*SWEEP_SHAPE, causal)], label=f"{kernel}={tile}", baselines=False))
    os.environ.pop("TURBO_TRITON_ATTN_FP8_TILES", None)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="check,speed,sweep")
    ap.add_argument("--cases", default="", help="check only these case names (comma separated; default all)")
    a = ap.parse_args()
    parts = a.parts.split(",")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "command": "python3 benchmarks/scripts/attention_fp8_gpu_check.py --parts " + a.parts
           + (" --cases " + a.cases if a.cases else "")}
    t0 = time.time()
    if "check" in parts:
        res["check"] = checks(set(filter(None, a.cases.split(","))))
    if "speed" in parts:
        res["speed"] = speed_rows(SPEED)
    if "sweep" in parts:
        res["sweep"] = sweep()
    res["seconds"] = round(time.time() - t0, 1)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
