# ruff: noqa
# One-off diagnostic (session 12), kept verbatim as it ran on the H200 (its source is also in
# benchmarks/results/grouped-quant-s12-grouped-recheck-h200-2026-12-01.json); see the gpu-checks doc, Session 12.
"""Session-12 re-check of grouped_quantize_fp8 BLOCKWISE-128 row / MX row (one process = one code version).

Times each case four ways at 16384 x 7168 bf16 over 32 skewed groups (the S7 / S12 inputs):
  dobench : triton.testing.do_bench(warmup=25, rep=100, median) -- what S7 and S12 used (L2 flushed
            by a 256 MB zero_ before each call; events around the call; host gaps count)
  held    : the same flush + events loop, but the GPU held by a sleep kernel while all 60 iterations
            are enqueued, so no host gap can enter the timed span (device time, L2 flushed)
  graph   : 20 calls captured in one CUDA graph, replayed (device time, no flush)
  host_us : host time per call (Python launcher), calls enqueued while the GPU is held
Usage: PYTHONPATH=<core>:<triton> python3 s12_grouped_recheck.py --tag new --out x.json [--dry]
"""
import argparse, json, os, statistics, sys, time
p = argparse.ArgumentParser()
p.add_argument("--tag", required=True); p.add_argument("--out", required=True); p.add_argument("--dry", action="store_true")
A = p.parse_args()
if A.dry:
    os.environ["TRITON_INTERPRET"] = "1"
import torch
from turbo_core.dispatch.specs import quantization as qs
from turbo_core.low_precision import FLOAT4_E2M1FN_X2 as FP4
from turbo_core.reference import quantization as ref
from turbo_triton.quantization import grouped
DEV = "cpu" if A.dry else "cuda"
E4M3 = torch.float8_e4m3fn
m, n, g = (150, 96, 4) if A.dry else (16384, 7168, 32)

def groups(m, g, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(g, generator=gen) ** 3
    w[min(1, g - 1)] = 0
    lens = (w / w.sum() * m).floor().to(torch.int64)
    lens[0] += m - int(lens.sum())
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens.to(DEV), offs.to(DEV)

gen = torch.Generator(device=DEV).manual_seed(3)
x = torch.randn(m, n, device=DEV, generator=gen) * 3
x[:, :64] *= 1e-3
x = x.to(torch.bfloat16)
lens, offs = groups(m, g, g)
cases = [("q8-bw128-row", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8, qs.GroupedQuantizeFp8Args(x, E4M3, "BLOCKWISE", lens, offs, 1, 128)),
         ("q8-mx-row", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8, qs.GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 1, 32)),
         ("q8-bw128-col", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8, qs.GroupedQuantizeFp8Args(x, E4M3, "BLOCKWISE", lens, offs, 0, 128)),
         ("q4-axis1", grouped.grouped_quantize_fp4, ref.grouped_quantize_fp4, qs.GroupedQuantizeFp4Args(x, FP4, lens, offs, 1))]
q, s, _, op = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(x, E4M3, "BLOCKWISE", lens, offs, 0, 128))
cases.append(("dq8-bw128-col", grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8,
              qs.GroupedDequantizeFp8Args(q, s, torch.bfloat16, "BLOCKWISE", offs, op, m, 0, 128)))

def bits(t):
    t = t.contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])

def same(a, b):
    return all(x.shape == y.shape and torch.equal(bits(x), bits(y)) for x, y in zip(a, b)) and len(a) == len(b)

def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)

SLEEP = 300_000_000  # cycles (~0.15 s at H200 clocks): longer than enqueueing 60 iterations

def held(fn, cache, iters=60):
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for _ in range(5): fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP)
    for a, b in ev:
        cache.zero_(); a.record(); fn(); b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)

def host_us(fn, calls=100):
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP)
    t0 = time.perf_counter()
    for _ in range(calls): fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6

def graph_ms(fn, calls=20, reps=15):
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side): fn()
    torch.cuda.current_stream().wait_stream(side)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for _ in range(calls): fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(reps):
        a.record(); gr.replay(); b.record(); b.synchronize(); t.append(a.elapsed_time(b) / calls)
    return statistics.median(t)

res = {"tag": A.tag, "shape": f"m{m}-n{n}-g{g}", "env": {"torch": torch.__version__}, "rows": []}
if DEV == "cuda":
    import triton, triton.testing
    res["env"].update(triton=triton.__version__, gpu=torch.cuda.get_device_name())
    big = torch.empty(1 << 30, dtype=torch.uint8, device=DEV); dst = torch.empty_like(big)
    res["copy_GBps"] = cp = 2 * big.numel() / triton.testing.do_bench(lambda: dst.copy_(big), warmup=25, rep=100, return_mode="median") / 1e6
    del big, dst
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=DEV)  # do_bench's flush buffer
for cid, fn, rfn, args in cases:
    out = fn(args); out = out if isinstance(out, tuple) else (out,)
    want = rfn(args); want = want if isinstance(want, tuple) else (want,)
    row = {"case": cid, "bit_exact": bool(same(out, want))}
    data = [t for t in out if t.dtype not in (torch.int32, torch.int64)]
    row["bytes"] = moved = nbytes([x] + data) if cid.startswith("q") else nbytes([args.x, args.scale_inv] + data)
    f = lambda fn=fn, args=args: fn(args)
    if DEV == "cuda":
        row["dobench_ms"] = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
        row["held_ms"] = held(f, cache)
        row["graph_ms"] = graph_ms(f)
        row["host_us"] = host_us(f)
        row["dobench_ms_2"] = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
        for k in ("dobench", "held", "graph"):
            row[f"{k}_of_copy"] = moved / row[f"{k}_ms"] / 1e6 / cp
    print(A.tag, json.dumps(row), flush=True)
    res["rows"].append(row)
res["script"] = open(__file__).read()
json.dump(res, open(A.out, "w"), indent=1)
