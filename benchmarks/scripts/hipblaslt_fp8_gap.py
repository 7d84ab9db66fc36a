"""Where HIPBLASLT's FP8 forward loses to ``torch._scaled_mm`` on some shapes of ``turbo bench gemm-fp8``
(same cuBLASLt underneath): the same quantized NT operands timed by ``turbo_core.bench.timing`` in
interleaved rounds (torch, turbo through the dispatcher, the HIPBLASLT kernel function directly, and
every rank of the heuristic's list forced through the dispatcher), so order, clocks and host overhead show.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-hipblaslt/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_hipblaslt.plugin TURBO_HIPBLASLT_JIT=1 \\
    python3 benchmarks/scripts/hipblaslt_fp8_gap.py --out gap.json
"""

from __future__ import annotations

import argparse
import json

import torch

SHAPES = [(8192, 4096, 14336), (8192, 10240, 8192), (8192, 6144, 4096)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from turbo_core import tuning
    from turbo_core.bench import timing
    from turbo_core.dispatch.dispatcher import call
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
    from turbo_core.ops.quantization import quantize_fp8
    from turbo_hipblaslt import algos, blaslt
    from turbo_hipblaslt import gemm_fp8 as hb

    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in SHAPES:
        n_sets = timing.copies_needed((m + n) * k)
        sets = []
        for _ in range(n_sets):
            a = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            b = torch.randn(n, k, device="cuda", generator=g).bfloat16()
            qa, sa = quantize_fp8(a, torch.float8_e4m3fn, "TENSORWISE")
            qb, sb = quantize_fp8(b, torch.float8_e4m3fn, "TENSORWISE")
            sets.append((qa, sa, qb, sb, GemmFp8Args(qa, sa, qb, sb, False, True, torch.bfloat16, "TENSORWISE")))

        def torch_mm(qa, sa, qb, sb, _):
            return torch._scaled_mm(qa, qb.t(), scale_a=sa.reshape(()), scale_b=sb.reshape(()),
                                    out_dtype=torch.bfloat16)

        def turbo(qa, sa, qb, sb, ga):
            with use_backend("HIPBLASLT"):
                return call("gemm_fp8", ga)

        def direct(qa, sa, qb, sb, ga):
            return hb.gemm_fp8(ga)

        providers = {"torch._scaled_mm": torch_mm, "turbo dispatch": turbo, "HIPBLASLT kernel fn": direct}
        flops = 2 * m * n * k
        res = {"shape": [m, n, k], "sets": n_sets, "rounds": []}
        for _ in range(args.rounds):
            rnd = {}
            for name, fn in providers.items():
                t = timing.measure(fn, sets, warmup=10, iters=50)
                rnd[name] = {"ms": round(t.median_ms, 4), "tflops": round(flops / t.median_ms / 1e9, 1)}
            rnd["turbo == torch"] = bool(torch.equal(turbo(*sets[0]), torch_mm(*sets[0])))
            res["rounds"].append(rnd)
            print(m, n, k, rnd, flush=True)
        # every rank the heuristic offers, forced through the dispatcher as turbo tune times them
        call_args = hb.call_for(sets[0][4])
        if isinstance(call_args, tuple):
            count = blaslt.algo_count(call_args)
            res["ranks"] = {}
            for rank in range(count):
                try:
                    with tuning.forcing("HIPBLASLT", "gemm_fp8", {"algo": rank}):
                        t = timing.measure(turbo, sets, warmup=5, iters=30)
                    res["ranks"][rank] = round(flops / t.median_ms / 1e9, 1)
                except Exception as exc:  # noqa: BLE001 - report and go on
                    res["ranks"][rank] = f"{type(exc).__name__}: {exc}"[:200]
            res["key"] = [list(x) if isinstance(x, tuple) else x for x in algos.key_of(call_args)]
            print("ranks TFLOP/s", res["ranks"], flush=True)
        rows.append(res)
        with open(args.out, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
