"""The ``grouped_gemm_fp8`` op's training step (forward + backward, ROWWISE, pinned to TRITON) with its
quantizations done three ways, same process, same inputs, device time:

* ``stored`` (the op's default): each copy from its own ``quantize_fp8`` call, the dgrad's weight copy
  along N in the stored ``[G, N, K]`` layout (the launcher copies it K-major before the dgrad kernel);
* ``k_major``: the dgrad's weight copy quantized K-major (``[G, K, N]``, from the transposed view:
  ``quantize(..., k_major=True)``). Session 14 on the H200: 0.98-1.00x, so not the default;
* ``fused_rowwise``: both ROWWISE copies of the tokens, the weight and the gradient from one
  ``quantize_fp8_with_trans`` call each (``quantize(..., fused_rowwise=True)``: x read twice, not three
  times). Not yet run on a GPU.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/grouped_fp8_op_step_h200.py --out op_step.json [--modes stored,fused_rowwise]

MoE layers (8 local experts, 8192 tokens x top-k, balanced): DeepSeek-V3, Qwen3-30B-A3B, Mixtral-8x7B,
gate_up and down. Rows: ``{"case", "mode", "fwd_ms", "step_ms", "bwd_ms"}`` (medians of
``turbo_core.bench.timing.measure``: the GPU held while the calls are queued), then per case each
alternative's speed-ups over ``stored`` and whether its gradients are bit-identical, and whether TRITON's
quantization of the K-major copy is bit-identical to the TORCH reference's.
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


def _modes(real_quantize):
    """``{mode: the quantize helper the op calls}``: the op's default, and the two alternatives."""
    def k_major(scheme, t, dims, role, **kw):  # the 3-D weights only: the tokens keep the wgrad's layout
        return real_quantize(scheme, t, dims, role, **({"k_major": True} if t.dim() == 3 else kw))

    def fused_rowwise(scheme, t, dims, role, **kw):  # both ROWWISE copies from one quantize_fp8_with_trans
        return real_quantize(scheme, t, dims, role, fused_rowwise=True, **kw)

    return {"stored": real_quantize, "k_major": k_major, "fused_rowwise": fused_rowwise}


def _same_quantization(w) -> bool:
    """TRITON's quantization of the K-major dgrad copy (a 3-D transposed view) bit-identical to TORCH's."""
    wt = w.detach().transpose(-1, -2)
    q = {}
    for backend in ("TRITON", "TORCH"):
        with use_backend(backend):
            q[backend] = quant.quantize_fp8(wt, torch.float8_e4m3fn, "ROWWISE", axis=-1)
    return all(torch.equal(a.view(torch.uint8) if a.dtype != torch.float32 else a,
                           b.view(torch.uint8) if b.dtype != torch.float32 else b)
               for a, b in zip(q["TRITON"], q["TORCH"], strict=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--modes", default="stored,k_major,fused_rowwise")
    args = p.parse_args()
    real_quantize = gg.quantize
    modes = {k: v for k, v in _modes(real_quantize).items() if k in args.modes.split(",")}
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

        grads, rows = {}, {}
        for mode, helper in modes.items():
            gg.quantize = helper
            try:
                with use_backend("TRITON"), torch.autograd.set_multithreading_enabled(False):
                    grads[mode] = step(x, w, dy)
                    with torch.no_grad():
                        t_fwd = measure(fwd, [(x, w, dy)], iters=args.iters)
                    t_step = measure(step, [(x, w, dy)], iters=args.iters)
            finally:
                gg.quantize = real_quantize
            rows[mode] = row = {"case": name, "m": m, "n": n, "k": k, "mode": mode, "fwd_ms": t_fwd.median_ms,
                                "step_ms": t_step.median_ms, "bwd_ms": t_step.median_ms - t_fwd.median_ms}
            rows_out.append(row)
            print(f"{name:24} {mode:13} fwd {row['fwd_ms']:.3f} ms  step {row['step_ms']:.3f} ms  "
                  f"bwd {row['bwd_ms']:.3f} ms", flush=True)
        summary = {"case": name, "kmajor_quant_identical": _same_quantization(w)}
        base = rows.get("stored")
        for mode in rows:
            if mode == "stored" or base is None:
                continue
            same = all(torch.equal(a, b) for a, b in zip(grads[mode], grads["stored"], strict=True))
            summary[mode] = {"grads_identical": same, "step_speedup": base["step_ms"] / rows[mode]["step_ms"],
                             "bwd_speedup": base["bwd_ms"] / rows[mode]["bwd_ms"],
                             "fwd_speedup": base["fwd_ms"] / rows[mode]["fwd_ms"]}
            print(f"{name:24} {mode}: gradients bit-identical {same}; step {summary[mode]['step_speedup']:.3f}x, "
                  f"forward {summary[mode]['fwd_speedup']:.3f}x, backward {summary[mode]['bwd_speedup']:.3f}x "
                  f"(above 1: faster than the op's default)", flush=True)
        rows_out.append(summary)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name()}
    with open(args.out, "w") as f:
        json.dump({"environment": env, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
