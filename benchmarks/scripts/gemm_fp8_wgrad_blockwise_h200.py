"""wgrad's BLOCKWISE FP8 GEMM on the H200: the Gluon kernel's per-column scale path against the
Triton kernel, through the op's launcher, and the Gluon kernel alone on K-major copies.

wgrad is TN: ``a`` (activations) stored ``[K = tokens, M]``, ``b`` (gradients) stored ``[K, N]``, both
quantized in 1 x 128 blocks along K (``turbo_core.bench.suites.gemm_fp8.quantize_operand``), so b's
scales are per column and K block. Device time, inputs rotated (``turbo_core.bench.timing``).

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src python3 benchmarks/scripts/gemm_fp8_wgrad_blockwise_h200.py
"""

import os

import torch

from turbo_core.bench import timing
from turbo_core.bench.suites.gemm_fp8 import quantize_operand
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.low_precision import ScalingGranularity as G
from turbo_triton.gemm_fp8 import launch


def wgrad(qa, sa, qb, sb):
    return GemmFp8Args(qa, sa, qb, sb, True, False, torch.bfloat16, G.BLOCKWISE, 128)


def nt(qa, sa, qb, sb):
    return GemmFp8Args(qa, sa.t(), qb, sb.t(), False, True, torch.bfloat16, G.BLOCKWISE, 128)


def main():
    for k, m, n in ((8192, 8192, 8192), (8192, 4096, 14336)):
        sets = []
        for _ in range(3):
            x, g = torch.randn(k, m, device="cuda"), torch.randn(k, n, device="cuda")
            sets.append((*quantize_operand(x, torch.float8_e4m3fn, G.BLOCKWISE, -2, "act"),
                         *quantize_operand(g, torch.float8_e4m3fn, G.BLOCKWISE, -2, "grad")))
        flops = 2 * m * n * k
        print(k, m, n, launch.kernel_path(wgrad(*sets[0])), launch.scale_addressing(wgrad(*sets[0])))
        res = {}
        for flag in ("1", "0"):
            os.environ["TURBO_TRITON_FP8_GLUON"] = flag
            res[flag] = timing.measure(lambda *s: launch.gemm_fp8(wgrad(*s)), sets).median_ms
        os.environ["TURBO_TRITON_FP8_GLUON"] = "1"
        print(f"  gluon {flops / res['1'] / 1e9:.0f} TFLOP/s, triton {flops / res['0'] / 1e9:.0f}, "
              f"broken={launch._GLUON_BROKEN}")
        kset = [(s[0].t().contiguous(), s[1], s[2].t().contiguous(), s[3]) for s in sets]
        print("  NT path", launch.kernel_path(nt(*kset[0])), launch.scale_addressing(nt(*kset[0])))
        t = timing.measure(lambda *s: launch.gemm_fp8(nt(*s)), kset).median_ms
        print(f"  gluon on K-major copies {flops / t / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
