"""Where the ``grouped_gemm_fp8`` op's training step spends its GPU time: ``torch.profiler`` over a few
steps (forward + backward, pinned to TRITON), kernel time per step summed by kernel name.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/grouped_fp8_op_profile_h200.py --out op_profile.json

Cases: DeepSeek-V3 gate_up and down, Mixtral-8x7B gate_up (8 local experts, 8192 tokens x top-k,
balanced), ROWWISE and BLOCKWISE. Rows: ``{"case", "granularity", "kernels": [[name, us_per_step,
calls_per_step], ...], "total_us"}``, largest first.
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
from torch.profiler import ProfilerActivity, profile

from turbo_core import Float8QuantConfig
from turbo_core.dispatch.manager import use_backend
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8

CASES = {  # rows, N (out features), K (in features)
    "deepseek-v3/gate_up": (2048, 4096, 7168),
    "deepseek-v3/down": (2048, 7168, 2048),
    "mixtral-8x7b/gate_up": (16384, 28672, 4096),
}
G = 8


def _kernel_times(prof, steps: int) -> list[list]:
    total = collections.defaultdict(float)
    calls = collections.Counter()
    for evt in prof.events():
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            total[evt.name] += evt.time_range.elapsed_us()  # a kernel's own span on the device
            calls[evt.name] += 1
    return sorted(([name[:90], us / steps, calls[name] / steps] for name, us in total.items()), key=lambda r: -r[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (m, n, k) in CASES.items():
        lens = torch.full((G,), m // G, device="cuda", dtype=torch.int64)
        x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
        w = (torch.randn(G, n, k, generator=gen, device="cuda") * k ** -0.5).to(torch.bfloat16).requires_grad_()
        dy = torch.randn(m, n, generator=gen, device="cuda").to(torch.bfloat16)
        for gran in ("ROWWISE", "BLOCKWISE"):
            cfg = Float8QuantConfig(granularity=gran, block_size=128 if gran == "BLOCKWISE" else None)

            def step():
                out = grouped_gemm_fp8(x, w, lens, config=cfg)
                return torch.autograd.grad(out, (x, w), dy)

            with use_backend("TRITON"), torch.autograd.set_multithreading_enabled(False):
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.steps):
                        step()
                    torch.cuda.synchronize()
            kernels = _kernel_times(prof, args.steps)
            total = sum(r[1] for r in kernels)
            rows.append({"case": name, "granularity": gran, "kernels": kernels, "total_us": total})
            print(f"== {name} {gran}: {total:.0f} us of kernels per step", flush=True)
            for kname, us, c in kernels[:12]:
                print(f"   {us:8.1f} us  {c:4.1f}x  {kname}", flush=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name()}
    with open(args.out, "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
