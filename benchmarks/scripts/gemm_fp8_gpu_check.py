"""GPU check of the FP8/FP4 GEMM family on its reference backend TORCH (run on the GPU machine).

What it checks, each result one JSON row (``ok`` plus the numbers or the error):

1. ``gpu_vs_cpu``: ``gemm_fp8`` (every granularity x E4M3/HYBRID), ``gemm_fp4``, ``grouped_gemm_fp8``
   and ``grouped_gemm_fp4`` (forward, dgrad, wgrad) on the GPU against the same call on the CPU:
   the quantizers must agree and the GEMMs differ only by fp32 (GPU) vs float64 (CPU)
   accumulation; the grouped GEMMs take the reference's sync-free path on the GPU.
2. ``snr``: each GPU result against the unquantized float64 product (E4M3 >= 25 dB, HYBRID >= 20,
   FP4 >= 10).
3. ``compile``: ``torch.compile(fullgraph=True, backend="aot_eager")`` of ``gemm_fp8`` /
   ``grouped_gemm_fp8`` / ``Float8Linear`` forward + backward on the GPU (this is where the FP8
   dtype lookup per device must stay out of dynamo's way).
4. ``cuda_graph``: capture and replay of a TENSORWISE ``gemm_fp8`` and ``grouped_gemm_fp8`` forward
   (no host syncs in the hot path), compared with eager.

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/gemm_fp8_gpu_check.py --out gemm_fp8_gpu_check.json
Exit status 0 when every row is ok.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback

import torch

import turbo_core.dispatch.specs.gemm_fp8  # noqa: F401  (defines the primitives)
import turbo_core.dispatch.specs.grouped_gemm_fp8  # noqa: F401
from turbo_core.reference import plugin

if "gemm_fp8" not in plugin.FAMILIES:  # until the reference plugin lists the family itself
    plugin.FAMILIES = plugin.FAMILIES + ("gemm_fp8", "grouped_gemm_fp8")

from turbo_core import Float4QuantConfig, Float8QuantConfig, use_backend  # noqa: E402
from turbo_core.modules.float8_linear import Float8Linear  # noqa: E402
from turbo_core.ops.gemm_fp8 import gemm_fp4, gemm_fp8  # noqa: E402
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp4, grouped_gemm_fp8  # noqa: E402
from turbo_core.testing.numerics import SNR_DB, snr_db  # noqa: E402

CONFIGS = [("TENSORWISE", None), ("ROWWISE", None), ("BLOCKWISE", 128), ("MX_BLOCKWISE", None)]
LENS = (40, 0, 77, 33)


def _dense(fn, a, b, grad, **kw):
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    c = fn(a, b, **kw)
    c.backward(grad)
    return c.detach(), a.grad, b.grad


def _grouped(fn, a, b, lens, grad, **kw):
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    c = fn(a, b, lens, **kw)
    c.backward(grad)
    return c.detach(), a.grad, b.grad


def _ideal_dense(a, b, grad):
    a, b = a.double().requires_grad_(), b.double().requires_grad_()
    c = a @ b.t()
    c.backward(grad.double())
    return c.detach(), a.grad, b.grad


def _ideal_grouped(a, b, lens, grad):
    a, b = a.double().requires_grad_(), b.double().requires_grad_()
    rows, start = [], 0
    for g, n in enumerate(lens):
        rows.append(a[start:start + n] @ b[g].t())
        start += n
    rows.append(a.new_zeros((a.shape[0] - start, b.shape[1])))
    c = torch.cat(rows)
    c.backward(grad.double())
    return c.detach(), a.grad, b.grad


def _rel(x, y):
    x, y = x.detach().double().cpu(), y.detach().double().cpu()
    return float((x - y).norm() / y.norm().clamp_min(1e-300))


def check_numerics(rows):
    gen = torch.Generator().manual_seed(0)
    a, b, grad = torch.randn(256, 384, generator=gen), torch.randn(512, 384, generator=gen), \
        torch.randn(256, 512, generator=gen)
    ga, gb = torch.randn(sum(LENS) + 5, 256, generator=gen), torch.randn(len(LENS), 128, 256, generator=gen)
    ggrad = torch.randn(ga.shape[0], 128, generator=gen)
    lens_cpu = torch.tensor(LENS, dtype=torch.int64)
    setups = [(f"{g}-{fmt}", Float8QuantConfig(format=fmt, granularity=g, block_size=bs), fmt)
              for g, bs in CONFIGS for fmt in ("E4M3", "HYBRID")] + [("FP4", Float4QuantConfig(), "FP4")]
    ideal_d = _ideal_dense(a, b, grad)
    ideal_g = _ideal_grouped(ga, gb, LENS, ggrad)
    for name, cfg, fmt in setups:
        fp4 = name == "FP4"
        dense_fn, grouped_fn = (gemm_fp4, grouped_gemm_fp4) if fp4 else (gemm_fp8, grouped_gemm_fp8)
        for kind in ("dense", "grouped"):
            row = {"check": "gpu_vs_cpu+snr", "kind": kind, "config": name}
            try:
                with use_backend("TORCH"):
                    if kind == "dense":
                        cpu = _dense(dense_fn, a, b, grad, trans_b=True, config=cfg)
                        gpu = _dense(dense_fn, a.cuda(), b.cuda(), grad.cuda(), trans_b=True, config=cfg)
                        ideal = ideal_d
                    else:
                        cpu = _grouped(grouped_fn, ga, gb, lens_cpu, ggrad, config=cfg)
                        gpu = _grouped(grouped_fn, ga.cuda(), gb.cuda(), lens_cpu.cuda(), ggrad.cuda(), config=cfg)
                        ideal = ideal_g
                torch.cuda.synchronize()
                row["rel_gpu_vs_cpu"] = [_rel(g_, c_) for g_, c_ in zip(gpu, cpu, strict=True)]
                row["snr_db"] = [snr_db(i.cpu(), g_.cpu()) for i, g_ in zip(ideal, gpu, strict=True)]
                floor = SNR_DB[fmt]
                row["ok"] = max(row["rel_gpu_vs_cpu"]) < 1e-4 and min(row["snr_db"]) >= floor
            except Exception as exc:  # record and go on
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)


def check_compile(rows):
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)
    lens = torch.tensor(LENS, dtype=torch.int64, device=dev)
    for g, bs in CONFIGS:
        cfg = Float8QuantConfig(format="HYBRID", granularity=g, block_size=bs)
        row = {"check": "compile", "config": g}
        try:
            with use_backend("TORCH"):
                a = torch.randn(128, 256, device=dev, generator=gen, dtype=torch.bfloat16)
                b = torch.randn(384, 256, device=dev, generator=gen, dtype=torch.bfloat16)
                gb = torch.randn(len(LENS), 128, 256, device=dev, generator=gen, dtype=torch.bfloat16)
                ga = torch.randn(sum(LENS), 256, device=dev, generator=gen, dtype=torch.bfloat16)

                def dense(x, y):
                    return gemm_fp8(x, y, trans_b=True, config=cfg)

                def grouped(x, y, gl):
                    return grouped_gemm_fp8(x, y, gl, config=cfg)

                errs = []
                for fn, args in ((dense, (a, b)), (grouped, (ga, gb, lens))):
                    eager_in = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
                    comp_in = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
                    e = fn(*eager_in)
                    e.float().square().sum().backward()
                    c = torch.compile(fn, fullgraph=True, backend="aot_eager")(*comp_in)
                    c.float().square().sum().backward()
                    errs.append(_rel(c, e))
                    errs += [_rel(ci.grad, ei.grad) for ci, ei in zip(comp_in, eager_in, strict=True)
                             if ei.grad is not None]
                mod = Float8Linear(256, 384, config=cfg, device=dev, dtype=torch.bfloat16)
                x = a.clone().requires_grad_()
                out = torch.compile(mod, fullgraph=True, backend="aot_eager")(x)
                out.float().sum().backward()
                errs.append(_rel(out, mod(a)))
            row["rel_compiled_vs_eager"] = errs
            row["ok"] = max(errs) < 1e-6
        except Exception as exc:
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-3000:])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)


def check_cuda_graph(rows):
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(2)
    a = torch.randn(128, 256, device=dev, generator=gen)
    b = torch.randn(384, 256, device=dev, generator=gen)
    ga = torch.randn(sum(LENS), 256, device=dev, generator=gen)
    gb = torch.randn(len(LENS), 128, 256, device=dev, generator=gen)
    lens = torch.tensor(LENS, dtype=torch.int64, device=dev)
    for name, fn in (("gemm_fp8", lambda: gemm_fp8(a, b, trans_b=True)),
                     ("grouped_gemm_fp8", lambda: grouped_gemm_fp8(ga, gb, lens))):
        row = {"check": "cuda_graph", "op": name}
        try:
            with use_backend("TORCH"):
                want = fn()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    fn()  # warm up on the side stream
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    got = fn()
                graph.replay()
                torch.cuda.synchronize()
            row["rel_replay_vs_eager"] = _rel(got, want)
            row["ok"] = row["rel_replay_vs_eager"] == 0.0
        except Exception as exc:
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU", file=sys.stderr)
        return 2
    rows: list[dict] = []
    check_numerics(rows)
    check_compile(rows)
    check_cuda_graph(rows)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version()}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    bad = [r for r in rows if not r.get("ok")]
    print(f"{len(rows) - len(bad)}/{len(rows)} ok", flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
