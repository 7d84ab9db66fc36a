"""The ``grouped_gemm_fp8`` op's training step (forward + backward, ROWWISE, pinned to TRITON) with the
dgrad's weight copy quantized K-major (``[G, K, N]``, from the transposed view: ``quantize(...,
k_major=True)``) against the op's stored layout (``[G, N, K]`` along N, which the launcher copies
K-major before the dgrad kernel): same process, same inputs, device time. The session-14 H200 run
measured 0.98-1.00x, so the op keeps the stored layout.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/grouped_fp8_op_step_h200.py --out op_step.json

MoE layers (8 local experts, 8192 tokens x top-k, balanced): DeepSeek-V3, Qwen3-30B-A3B, Mixtral-8x7B,
gate_up and down. Rows: ``{"case", "mode", "fwd_ms", "step_ms", "bwd_ms"}`` (medians of
``turbo_core.bench.timing.measure``: the GPU held while the calls are queued), then per case whether
both modes give bit-identical gradients and whether TRITON's quantization of the K-major copy is
bit-identical to the TORCH reference's.
"""

from __future__ import annotations

import argparse
import importlib
import json

import torch

from turbo_core import Float8QuantConfig
from turbo_core.bench.timing import measure
from turbo_core.dispatch.manager import use_backend
from turbo_core.ops import quantization as quant

MODELS = {  # rows (8192 tokens x top-k over the 8 local experts), hidden, expert intermediate
    "deepseek-v3": (2048, 7168, 2048),
    "qwen3-30b-a3b": (4096, 2048, 768),
    "mixtral-8x7b": (16384, 4096, 14336),
}
G = 8
# the module (``turbo_core.ops`` re-exports the op function under the same name)
gg = importlib.import_module("turbo_core.ops.grouped_gemm_fp8")


def _cases():
    for model, (rows, hidden, inter) in MODELS.items():
        yield f"{model}/gate_up", rows, 2 * inter, hidden
        yield f"{model}/down", rows, hidden, inter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    real_quantize = gg.quantize

    def k_major(scheme, t, dims, role, **kw):  # the 3-D weights only: the tokens keep the wgrad's layout
        return real_quantize(scheme, t, dims, role, **({"k_major": True} if t.dim() == 3 else kw))
    cfg = Float8QuantConfig(granularity="ROWWISE")
    rows_out = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, m, n, k in _cases():
        lens = torch.full((G,), m // G, device="cuda", dtype=torch.int64)
        x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
        w = (torch.randn(G, n, k, generator=gen, device="cuda") * k ** -0.5).to(torch.bfloat16).requires_grad_()
        dy = torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16)

        def fwd(x, w, dy):
            return gg.grouped_gemm_fp8(x, w, lens, config=cfg)

        def step(x, w, dy):
            out = gg.grouped_gemm_fp8(x, w, lens, config=cfg)
            return torch.autograd.grad(out, (x, w), dy)

        grads = {}
        for mode in ("k_major", "stored"):
            gg.quantize = k_major if mode == "k_major" else real_quantize
            try:
                with use_backend("TRITON"), torch.autograd.set_multithreading_enabled(False):
                    grads[mode] = step(x, w, dy)
                    with torch.no_grad():
                        t_fwd = measure(fwd, [(x, w, dy)], iters=args.iters)
                    t_step = measure(step, [(x, w, dy)], iters=args.iters)
            finally:
                gg.quantize = real_quantize
            row = {"case": name, "m": m, "n": n, "k": k, "mode": mode, "fwd_ms": t_fwd.median_ms,
                   "step_ms": t_step.median_ms, "bwd_ms": t_step.median_ms - t_fwd.median_ms}
            rows_out.append(row)
            print(f"{name:24} {mode:8} fwd {row['fwd_ms']:.3f} ms  step {row['step_ms']:.3f} ms  "
                  f"bwd {row['bwd_ms']:.3f} ms", flush=True)
        same = all(torch.equal(a, b) for a, b in zip(grads["k_major"], grads["stored"], strict=True))
        wt = w.detach().transpose(-1, -2)  # the dgrad copy's quantization on TRITON vs the TORCH reference
        q = {}
        for backend in ("TRITON", "TORCH"):
            with use_backend(backend):
                q[backend] = quant.quantize_fp8(wt, torch.float8_e4m3fn, "ROWWISE", axis=-1)
        q_same = all(torch.equal(a.view(torch.uint8) if a.dtype != torch.float32 else a,
                                 b.view(torch.uint8) if b.dtype != torch.float32 else b)
                     for a, b in zip(q["TRITON"], q["TORCH"], strict=True))
        print(f"{name:24} K-major weight quantization bit-identical to the reference: {q_same}", flush=True)
        sk, ss = rows_out[-2], rows_out[-1]
        print(f"{name:24} gradients bit-identical: {same}; step {ss['step_ms'] / sk['step_ms']:.3f}x, "
              f"backward {ss['bwd_ms'] / sk['bwd_ms']:.3f}x faster K-major", flush=True)
        rows_out.append({"case": name, "grads_identical": same, "kmajor_quant_identical": q_same, "step_speedup": ss["step_ms"] / sk["step_ms"],
                         "bwd_speedup": ss["bwd_ms"] / sk["bwd_ms"]})
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name()}
    with open(args.out, "w") as f:
        json.dump({"environment": env, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
