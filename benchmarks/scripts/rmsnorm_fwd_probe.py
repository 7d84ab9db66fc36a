"""RMSNorm forward (no residual) beside ``torch.compile`` on the GPU machine: launch shapes and cache
hints of the whole-row kernel, and the kernel Inductor writes.

The shipped forward (``normalization.kernels.rmsnorm_fwd_kernel``: whole rows, 1 row a program, 8
warps from hidden 4096 to 16384) runs at 0.95-0.98x ``torch.compile`` at hidden 7168-16384
(``benchmarks/issue5-targets.md`` section 7), both near the copy rate. This times, in one process,
round-robin ``--rounds`` times, at 16384 tokens, bf16, with gamma:

* ``rows R / W warps / x:X g:G``: the kernel below (the shipped kernel's code with ``eviction_policy``
  hints: ``X`` on the x load, ``G`` on the gamma load; "-" none) at R rows a program and W warps;
* ``shipped``: ``turbo_triton``'s launcher; ``compile``: ``torch.compile`` of the bench suite's torch
  expression (``turbo_core.bench.suites.norm._rmsnorm_expr``, y only).

Each variant's ``y`` and ``rstd`` are compared with the shipped launcher's: the same bits, or (another
warp count sums in another order) rstd within 1e-6 and y within one bf16 rounding; compile's y is
reported as its largest difference. GB/s by the suite's byte count (x read, y written, gamma read), medians of
``triton.testing.do_bench``. Inductor's generated code for each hidden is kept in the JSON
(``inductor_code``).

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/rmsnorm_fwd_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform

P = argparse.ArgumentParser(description=__doc__.split("\n")[0])
P.add_argument("--out", required=True)
P.add_argument("--rounds", type=int, default=3)
P.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter, no timing")
ARGS = P.parse_args()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from turbo_core.bench.suites.norm import _rmsnorm_expr  # noqa: E402
from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs  # noqa: E402
from turbo_triton.normalization import launch  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
TOKENS = 64 if ARGS.smoke else 16384
HIDDENS = (96, 200) if ARGS.smoke else (4096, 7168, 8192, 16384)
VARIANTS = [(1, 8, "", ""), (1, 8, "evict_first", ""), (1, 8, "evict_first", "evict_last"), (1, 8, "", "evict_last"),
            (1, 4, "", ""), (1, 16, "", ""), (2, 8, "", ""), (2, 16, "", ""), (1, 4, "evict_first", "evict_last"),
            (1, 16, "evict_first", "evict_last")]
EPS = 1e-6
RESULTS: dict = {"rows": [], "inductor_code": {}}


@triton.jit
def fwd_kernel(x_ptr, g_ptr, y_ptr, rstd_ptr, T, H, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               EVICT_X: tl.constexpr, EVICT_G: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < T
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * H + cols[None, :]
    s = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT_X).to(tl.float32)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(s * s, axis=1) / H + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    g = tl.load(g_ptr + cols, mask=col_ok, other=0.0, eviction_policy=EVICT_G).to(tl.float32)
    y = s * rstd[:, None] * g[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def variant(x, w, rows, warps, ex, eg):
    t, h = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(t, dtype=torch.float32, device=x.device)
    fwd_kernel[(triton.cdiv(t, rows),)](x, w, y, rstd, t, h, EPS, BLOCK_M=rows, BLOCK_N=triton.next_power_of_2(h),
                                        EVICT_X=ex, EVICT_G=eg, num_warps=warps)
    return y, rstd


def ms(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    RESULTS["env"] = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                      "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"}
    print(RESULTS["env"], flush=True)
    if DEV == "cuda":
        src = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        RESULTS["copy_GBps"] = copy = 2 * src.numel() / ms(lambda: dst.copy_(src)) / 1e6
        del src, dst
    else:
        copy = float("nan")
    gen = torch.Generator(device=DEV).manual_seed(0)
    ok = True
    for h in HIDDENS:
        dt = torch.float32 if ARGS.smoke else torch.bfloat16  # the interpreter's bf16 store truncates
        x = torch.randn(TOKENS, h, device=DEV, generator=gen).to(dt)
        w = (1 + 0.1 * torch.randn(h, device=DEV, generator=gen)).to(dt)
        moved = (2 * x.numel() + h) * x.element_size()
        want_y, want_r, _ = launch.rmsnorm_fwd(RmsNormFwdArgs(x, w, EPS))
        fns = [("shipped", lambda x=x, w=w: launch.rmsnorm_fwd(RmsNormFwdArgs(x, w, EPS)))]
        for rows, warps, ex, eg in VARIANTS:
            name = f"rows {rows} / {warps} warps / x:{ex or '-'} g:{eg or '-'}"
            got_y, got_r = variant(x, w, rows, warps, ex, eg)
            same = torch.equal(got_y, want_y) and torch.equal(got_r, want_r)
            # another warp count may sum the squares in another order: rstd within 1e-6, y within one rounding
            close = ((got_r - want_r).abs() <= 1e-6 * want_r.abs()).all() and \
                ((got_y.float() - want_y.float()).abs() <= 2.0 ** -7 * want_y.float().abs() + 1e-30).all()
            RESULTS["rows"].append({"hidden": h, "variant": name, "check": "same bits" if same else
                                    ("within one rounding" if close else "differs")})
            if not (same or close):
                print(f"H={h} {name}: differs from the shipped kernel beyond rounding", flush=True)
                ok = False
                continue
            fns.append((name, lambda x=x, w=w, a=(rows, warps, ex, eg): variant(x, w, *a)))
        if DEV == "cuda":
            from torch._inductor.utils import run_and_get_code

            torch._dynamo.reset()
            comp = torch.compile(_rmsnorm_expr, dynamic=False)
            y_c, code = run_and_get_code(comp, x, w)
            RESULTS["inductor_code"][str(h)] = [c[:12000] for c in code]
            err = (y_c.float() - want_y.float()).abs().max().item()
            print(f"H={h} compile max |y - shipped y| = {err:.3g}", flush=True)
            fns.append(("compile", lambda x=x, w=w, comp=comp: comp(x, w)))
        times = {name: [] for name, _ in fns}
        for _ in range(1 if ARGS.smoke else ARGS.rounds):
            for name, fn in fns:
                times[name].append(ms(fn))
        for name, t in times.items():
            best = min(t)
            row = {"hidden": h, "tokens": TOKENS, "variant": name, "ms": t, "GBps": moved / best / 1e6,
                   "of_copy": moved / best / 1e6 / copy}
            RESULTS["rows"].append(row)
            print(f"H={h:6d} {name:42s} {' '.join(f'{v * 1e3:7.1f}' for v in t)} us  {row['GBps']:6.0f} GB/s "
                  f"{100 * row['of_copy']:5.1f}%", flush=True)
        with open(ARGS.out, "w") as f:
            json.dump(RESULTS, f, indent=1)
    print("ALL OK" if ok else "MISMATCHES (see above)", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
