"""RMSNorm forward (no residual) beside ``torch.compile`` on the GPU machine: launch shapes and cache
hints of the whole-row kernel, and the kernel Inductor writes.

The shipped forward (``normalization.kernels.rmsnorm_fwd_kernel``: whole rows, 1 row a program, 8
warps from hidden 4096 to 16384) runs at 0.95-0.98x ``torch.compile`` at hidden 7168-16384
(``benchmarks/issue5-targets.md`` section 7), both near the copy rate. This times, in one process,
round-robin ``--rounds`` times, at 16384 tokens, bf16, with gamma:

* ``rows R / W warps / x:X g:G``: the kernel below (the shipped kernel's code with ``eviction_policy``
  hints: ``X`` on the x load, ``G`` on the gamma load; "-" none) at R rows a program and W warps;
* ``--chunked``: ``chunks of B / W warps / S stages / hints``: the two-walk kernel below (the row walked
  twice in B-element chunks, as Inductor's kernel and the shipped ``rmsnorm_fwd_chunked_kernel``), with
  or without Inductor's cache hints (first walk evict_last, second evict_first, gamma evict_last);
* ``--mirror``: the two-walk kernel at the config Inductor's autotuner kept for this hidden (read from
  its loaded modules, with and without the hints), and ``H constant / W warps``: the whole-row kernel
  with ``H`` a compile-time constant and 32-bit offsets, as Inductor specializes;
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
P.add_argument("--chunked", action="store_true", help="the two-walk kernel's shapes (CHUNKED) beside two whole-row ones")
P.add_argument("--mirror", action="store_true",
               help="the two-walk kernel at the config Inductor's autotuner kept, and the whole-row kernel with H constant")
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
#: ``--chunked``: (block_n, warps, stages, hints) of the two-walk kernel; hints "LFL" = the first walk's x
#: load evict_last, the second's evict_first, gamma evict_last (the hints of Inductor's kernel)
CHUNKED = [(bn, w, 1, hints) for bn in (1024, 2048, 4096) for w in (4, 8) for hints in ("", "LFL")] + \
    [(2048, 8, 3, "LFL"), (2048, 4, 3, "LFL")]
if ARGS.chunked or ARGS.mirror:
    VARIANTS = [(1, 8, "", ""), (1, 8, "", "evict_last")]
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


@triton.jit
def fwd_chunked_kernel(x_ptr, g_ptr, y_ptr, rstd_ptr, T, H, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       EVICT_1: tl.constexpr, EVICT_2: tl.constexpr, EVICT_G: tl.constexpr):
    """Rows ``[pid * BLOCK_M, +BLOCK_M)`` walked twice in ``BLOCK_N`` chunks (the sum of squares, then y;
    the second walk's loads served by L2), as ``normalization.kernels.rmsnorm_fwd_chunked_kernel``
    (one row) with cache hints."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < T
    base = rows.to(tl.int64)[:, None] * H
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, H, BLOCK_N):
        c = start + cols
        m = row_ok[:, None] & (c < H)[None, :]
        s = tl.load(x_ptr + base + c[None, :], mask=m, other=0.0, eviction_policy=EVICT_1).to(tl.float32)
        acc += s * s
    rstd = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=1) / H + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    for start in range(0, H, BLOCK_N):
        c = start + cols
        m = row_ok[:, None] & (c < H)[None, :]
        s = tl.load(x_ptr + base + c[None, :], mask=m, other=0.0, eviction_policy=EVICT_2).to(tl.float32)
        g = tl.load(g_ptr + c, mask=c < H, other=0.0, eviction_policy=EVICT_G).to(tl.float32)
        tl.store(y_ptr + base + c[None, :], (s * rstd[:, None] * g[None, :]).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def fwd_const_kernel(x_ptr, g_ptr, y_ptr, rstd_ptr, T, eps, H: tl.constexpr, BLOCK_N: tl.constexpr,
                     EVICT_G: tl.constexpr):
    """The whole-row kernel (one row a program) with ``H`` a compile-time constant and 32-bit offsets
    (``T * H < 2^31``), as Inductor specializes its kernels."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = cols < H
    s = tl.load(x_ptr + row * H + cols, mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(s * s, axis=0) / H + eps)
    tl.store(rstd_ptr + row, rstd)
    g = tl.load(g_ptr + cols, mask=m, other=0.0, eviction_policy=EVICT_G).to(tl.float32)
    tl.store(y_ptr + row * H + cols, (s * rstd * g).to(y_ptr.dtype.element_ty), mask=m)


def const_h(x, w, warps, eg):
    t, h = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(t, dtype=torch.float32, device=x.device)
    fwd_const_kernel[(t,)](x, w, y, rstd, t, EPS, H=h, BLOCK_N=triton.next_power_of_2(h), EVICT_G=eg,
                           num_warps=warps)
    return y, rstd


def inductor_configs(name_part="rsqrt"):
    """The configs Inductor's autotuner kept for the kernels it compiled (``[{kernel, XBLOCK, R0_BLOCK,
    num_warps, num_stages, n_regs, n_spills}]``), read from its loaded output-code modules."""
    from torch._inductor.codecache import PyCodeCache

    out = []
    for mod in list(PyCodeCache.modules):
        for kname, obj in vars(mod).items():
            if name_part not in kname or not getattr(obj, "launchers", None):
                continue
            for ln in obj.launchers:
                c = ln.config
                out.append({"kernel": kname, **{k: v for k, v in c.kwargs.items()}, "num_warps": c.num_warps,
                            "num_stages": c.num_stages, "n_regs": getattr(ln, "n_regs", None),
                            "n_spills": getattr(ln, "n_spills", None)})
    return out


def chunked(x, w, bn, warps, stages, hints, bm=1):
    t, h = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(t, dtype=torch.float32, device=x.device)
    ev = ("evict_last", "evict_first", "evict_last") if hints == "LFL" else ("", "", "")
    fwd_chunked_kernel[(triton.cdiv(t, bm),)](x, w, y, rstd, t, h, EPS, BLOCK_M=bm, BLOCK_N=bn, EVICT_1=ev[0],
                                              EVICT_2=ev[1], EVICT_G=ev[2], num_warps=warps, num_stages=stages)
    return y, rstd


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
        comp, cfgs = None, []
        if DEV == "cuda":
            from torch._inductor.utils import run_and_get_code

            torch._dynamo.reset()
            comp = torch.compile(_rmsnorm_expr, dynamic=False)
            y_c, code = run_and_get_code(comp, x, w)
            RESULTS["inductor_code"][str(h)] = [c[:12000] for c in code]
            try:
                cfgs = inductor_configs()
            except Exception as exc:  # noqa: BLE001 -- Inductor internals: record and go on
                print(f"H={h} Inductor's config not found: {type(exc).__name__}: {exc}", flush=True)
            RESULTS.setdefault("inductor_configs", {})[str(h)] = cfgs[-1:] if cfgs else []
            print(f"H={h} compile max |y - shipped y| = {(y_c.float() - want_y.float()).abs().max().item():.3g}; "
                  f"Inductor's config {cfgs[-1] if cfgs else None}", flush=True)
        cands = [(f"rows {r} / {wp} warps / x:{ex or '-'} g:{eg or '-'}", variant, (r, wp, ex, eg))
                 for r, wp, ex, eg in VARIANTS]
        if ARGS.mirror:
            cands += [(f"H constant / {wp} warps / g:{eg or '-'}", const_h, (wp, eg)) for wp in (8, 16)
                      for eg in ("", "evict_last")]
            if cfgs or ARGS.smoke:  # the smoke run (no Inductor) takes a small stand-in config
                cfg = cfgs[-1] if cfgs else {"XBLOCK": 1, "R0_BLOCK": 64, "num_warps": 2, "num_stages": 1}
                bn, bm = cfg.get("R0_BLOCK", cfg.get("RBLOCK", 2048)), cfg.get("XBLOCK", 1)
                for hints in ("LFL", ""):
                    cands.append((f"Inductor's config: {bm} x {bn} / {cfg['num_warps']} warps / "
                                  f"{cfg['num_stages']} stages / {hints or 'no hints'}", chunked,
                                  (bn, cfg["num_warps"], cfg["num_stages"], hints, bm)))
        if ARGS.chunked:
            cands += [(f"chunks of {bn} / {wp} warps / {st} stages / {hints or 'no hints'}", chunked, (bn, wp, st, hints))
                      for bn, wp, st, hints in CHUNKED]
        for name, vfn, vargs in cands:
            got_y, got_r = vfn(x, w, *vargs)
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
            fns.append((name, lambda x=x, w=w, vfn=vfn, a=vargs: vfn(x, w, *a)))
        if comp is not None:
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
