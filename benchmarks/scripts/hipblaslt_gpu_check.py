"""GPU check of turbo-hipblaslt (the CUDA build of its one C++ source over cuBLASLt) on the H200.

Run from the repository root (no install needed; nothing is downloaded):

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/hipblaslt_gpu_check.py --out hipblaslt_gpu_check.json \\
      [--parts pytest,conformance,graph,bench] [--quick]

About 5-8 minutes for all parts (most of it the pytest and conformance parts); split across two
calls with --parts if a call's limit is near (the compiled extension is cached in
TURBO_HIPBLASLT_CACHE_DIR: pass the same folder to both calls to build once).

The script puts packages/turbo-hipblaslt/src on sys.path and turbo_hipblaslt.plugin into
TURBO_PLUGINS itself when they are missing, and sets TURBO_HIPBLASLT_JIT=1 with a fresh
TURBO_HIPBLASLT_CACHE_DIR (a temporary folder) unless given: the extension is compiled here, by the
host C++ compiler against /usr/local/cuda's cublasLt.h and libcublasLt (no pybind11 involved: the
binding is the CPython stable ABI).

What it writes (JSON, one object; every section has ``ok`` and its numbers or the error):

1. ``build``: the toolkit found, compile + load time, ``turbo_hipblaslt.api.capabilities()``
   (library version; which FP8 scale modes and epilogues the loaded cuBLASLt has on this GPU).
2. ``pytest``: packages/turbo-hipblaslt/tests/test_gpu.py (every layout/dtype vs float64, beta=1,
   FP8 granularities x layouts vs the float64 reference, grouped, epilogues, streams, errors):
   counts and the failures' tails.
3. ``conformance``: turbo-core's conformance cases of the gemm, gemm_fp8 and grouped_gemm families
   with HIPBLASLT pinned on the primitives it serves (forward and backward through the public ops):
   passed / declined (the capability check's reason) / failed, each failure's message.
4. ``cuda_graph``: capture + replay of a bf16 gemm and a TENSORWISE NN gemm_fp8 (the Hopper TN copy
   inside the graph) against eager.
5. ``bench``: medians (CUDA events, inputs rotated beyond L2: turbo_core.bench.timing) side by side in
   one process, with ``ratio`` = torch time / ours (>= 0.98 is the target):
   dense bf16 NT/NN/TN at Llama shapes vs torch.matmul; FP8 TENSORWISE/ROWWISE vs torch._scaled_mm,
   BLOCKWISE 1x128 x 128x128 vs torch.nn.functional.scaled_mm; grouped bf16 vs torch._grouped_mm
   (group offsets on the GPU: one host sync per call; and on the CPU: none); fused-bias Linear vs
   the same GEMM + a separate bias add and vs F.linear; small-shape overhead (direct kernel and
   through turbo's dispatcher) vs torch.matmul.

Exit status 0 when build, pytest, conformance and cuda_graph are ok.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "packages" / "turbo-hipblaslt" / "src"


def setup_env() -> None:
    """turbo_hipblaslt importable, its plugin loaded, the JIT on with a fresh cache (unless given)."""
    if importlib.util.find_spec("turbo_hipblaslt") is None:
        sys.path.insert(0, str(SRC))
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    plugins = [p for p in os.environ.get("TURBO_PLUGINS", "").split(",") if p]
    if "turbo_hipblaslt.plugin" not in plugins:
        os.environ["TURBO_PLUGINS"] = ",".join([*plugins, "turbo_hipblaslt.plugin"])
    os.environ.setdefault("TURBO_HIPBLASLT_JIT", "1")
    if not os.environ.get("TURBO_HIPBLASLT_CACHE_DIR"):
        os.environ["TURBO_HIPBLASLT_CACHE_DIR"] = tempfile.mkdtemp(prefix="turbo_hipblaslt_jit_")


RESULT: dict = {}
OUT: list[Path] = []  # where RESULT is (re)written after every section, so a killed run keeps what finished


def save() -> None:
    if OUT:
        OUT[0].write_text(json.dumps(RESULT, indent=1, default=str))


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def section(name: str):
    def wrap(fn):
        def run(*args, **kw):
            t0 = time.time()
            try:
                RESULT[name] = {"ok": True, **(fn(*args, **kw) or {})}
            except Exception as exc:  # recorded, the other sections still run
                RESULT[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "traceback": traceback.format_exc()[-4000:]}
            RESULT[name]["seconds"] = round(time.time() - t0, 1)
            log(f"[{name}] ok={RESULT[name]['ok']} ({RESULT[name]['seconds']} s)")
            save()
        return run
    return wrap


# -- 1. build ----------------------------------------------------------------------------------------------

@section("build")
def build():
    from turbo_hipblaslt import _ext
    from turbo_hipblaslt.api import capabilities
    from turbo_hipblaslt.probe import probe

    tc, reason = _ext.jit_toolchain()
    t0 = time.time()
    module = _ext.load()
    load_s = time.time() - t0
    caps = capabilities()
    return {"toolchain": tc.describe() if tc else reason, "module": module.__file__, "compile_and_load_s": load_s,
            "probe": probe(), "capabilities": caps, "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0), "python": platform.python_version()}


# -- 2. pytest ---------------------------------------------------------------------------------------------

@section("pytest")
def run_pytest(timeout: int):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "--tb=short",
           str(ROOT / "packages" / "turbo-hipblaslt" / "tests" / "test_gpu.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    if proc.returncode not in (0,):
        raise RuntimeError(f"pytest exit {proc.returncode}: {summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    skips = [ln for ln in lines if ln.startswith("SKIPPED")]
    return {"summary": summary, "skipped": skips[:40]}


# -- 3. conformance ------------------------------------------------------------------------------------------

@section("conformance")
def conformance(max_s: float):
    from turbo_core.dispatch.dispatcher import BackendError
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.testing.conformance import _served

    dev = torch.device("cuda")
    counts = {"passed": 0, "declined": 0, "skipped": 0, "failed": 0, "not_run": 0}
    failures, declines, outcomes = [], {}, {}
    t0 = time.time()
    for fam in ("gemm", "gemm_fp8", "grouped_gemm"):
        for case in importlib.import_module(f"turbo_core.testing.cases.{fam}").CASES:
            if time.time() - t0 > max_s:
                counts["not_run"] += 1
                continue
            served, reason = _served("HIPBLASLT", case.primitives)
            if reason is not None:
                counts["skipped"] += 1
                outcomes[case.id] = "skipped"
                continue
            try:
                with use_backend("HIPBLASLT", primitives=served):
                    case.run(device=dev)
                counts["passed"] += 1
                outcomes[case.id] = "passed"
            except BackendError as exc:
                if "cannot run this call" not in str(exc):
                    counts["failed"] += 1
                    failures.append({"case": case.id, "error": str(exc)[-1500:]})
                    outcomes[case.id] = "failed"
                    continue
                counts["declined"] += 1
                why = str(exc).split("cannot run this call: ", 1)[-1][:300]
                declines.setdefault(why, []).append(case.id)
                outcomes[case.id] = "declined"
            except Exception as exc:
                counts["failed"] += 1
                failures.append({"case": case.id, "error": f"{type(exc).__name__}: {str(exc)[-1500:]}"})
                outcomes[case.id] = "failed"
    if counts["failed"]:
        RESULT["conformance_detail"] = {"failures": failures}
        raise AssertionError(f"{counts['failed']} conformance cases failed: {failures[:5]}")
    return {"counts": counts, "declined": {k: {"n": len(v), "cases": v[:6]} for k, v in declines.items()},
            "outcomes": outcomes}


# -- 4. CUDA graph -------------------------------------------------------------------------------------------

@section("cuda_graph")
def cuda_graph():
    from turbo_core.dispatch.specs.gemm import GemmArgs
    from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
    from turbo_hipblaslt import gemm as dense
    from turbo_hipblaslt import gemm_fp8 as fp8

    a, b = torch.randn(512, 768, device="cuda").bfloat16(), torch.randn(768, 384, device="cuda").bfloat16()
    qa = torch.randn(512, 768, device="cuda").to(torch.float8_e4m3fn)
    qb = torch.randn(768, 384, device="cuda").to(torch.float8_e4m3fn)  # NN: b is copied to [N, K] on Hopper
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")

    def step():
        return (dense.gemm(GemmArgs(a, b)),
                fp8.gemm_fp8(GemmFp8Args(qa, sa, qb, sb, False, False, torch.bfloat16, "TENSORWISE")))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the capture stream (handles, heuristics, workspace)
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):  # the warmed-up stream: its workspace is reused
        c1, c2 = step()
    a.copy_(torch.randn_like(a))
    qb.copy_(torch.randn(768, 384, device="cuda").to(torch.float8_e4m3fn))
    graph.replay()
    torch.cuda.synchronize()
    e1, e2 = step()  # eager, on the new inputs (a stale replay would differ by O(1))
    d1 = ((c1.float() - e1.float()).abs().max() / e1.float().abs().max()).item()
    d2 = ((c2.float() - e2.float()).abs().max() / e2.float().abs().max()).item()
    if not (d1 <= 1e-2 and d2 <= 1e-2):
        raise AssertionError(f"replay differs from eager: gemm {d1}, gemm_fp8 {d2} (max abs diff / max abs)")
    return {"rel_diff_gemm": d1, "rel_diff_gemm_fp8": d2, "bit_identical": d1 == 0.0 and d2 == 0.0}


# -- 5. bench --------------------------------------------------------------------------------------------------

def timed(fn, make, *, bytes_per_set: int, iters: int) -> dict:
    from turbo_core.bench.timing import copies_needed, measure

    sets = [make() for _ in range(copies_needed(bytes_per_set))]
    t = measure(fn, sets, warmup=10, iters=iters)
    del sets
    return {"ms": t.median_ms, "p10": t.p10_ms, "p90": t.p90_ms}


def pair(rows: list, label: str, flops: float, ours, theirs, make, bytes_per_set: int, iters: int, **extra):
    try:
        mine = timed(ours, make, bytes_per_set=bytes_per_set, iters=iters)
        ref = timed(theirs, make, bytes_per_set=bytes_per_set, iters=iters)
        row = {"case": label, "ours": mine, "torch": ref, "ratio": ref["ms"] / mine["ms"],
               "ours_tflops": flops / mine["ms"] * 1e-9, "torch_tflops": flops / ref["ms"] * 1e-9, **extra}
    except Exception as exc:
        row = {"case": label, "error": f"{type(exc).__name__}: {exc}"[:800]}
    rows.append(row)
    log(" ", label, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                     if k in ("ratio", "ours_tflops", "torch_tflops", "error")})


@section("bench")
def bench(quick: bool, iters: int):
    from turbo_core.dispatch.dispatcher import call
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.dispatch.specs.gemm import GemmArgs
    from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
    from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs
    from turbo_hipblaslt import api, runtime
    from turbo_hipblaslt import gemm as dense
    from turbo_hipblaslt import gemm_fp8 as fp8
    from turbo_hipblaslt import grouped_gemm as grouped

    rows: list = []
    bf16, e4m3 = torch.bfloat16, torch.float8_e4m3fn
    tokens = 8192
    layers = [("8b/qkv", 6144, 4096), ("8b/gate_up", 28672, 4096), ("8b/down", 4096, 14336),
              ("70b/o", 8192, 8192)]
    if quick:
        layers = layers[:1]

    # dense bf16: forward NT, dgrad NN, wgrad TN (turbo's layout names)
    for name, out_f, in_f in layers:
        for pass_, (m, n, k), (ta, tb) in (("fwd NT", (tokens, out_f, in_f), (False, True)),
                                           ("dgrad NN", (tokens, in_f, out_f), (False, False)),
                                           ("wgrad TN", (out_f, in_f, tokens), (True, False))):
            def make(m=m, n=n, k=k, ta=ta, tb=tb):
                a = torch.randn(*((k, m) if ta else (m, k)), device="cuda").to(bf16)
                b = torch.randn(*((n, k) if tb else (k, n)), device="cuda").to(bf16)
                return a, b, ta, tb

            pair(rows, f"bf16 {name} {pass_} {m}x{n}x{k}", 2 * m * n * k,
                 lambda a, b, ta, tb: dense.gemm(GemmArgs(a, b, ta, tb)),
                 lambda a, b, ta, tb: torch.matmul(a.t() if ta else a, b.t() if tb else b),
                 make, 2 * (m * k + k * n + m * n), iters)
            if rows[-1].get("ratio", 1.0) < 0.98:  # would torch's split-K freedom (bf16 partial sums) close it?
                ext = runtime.ext()
                ext.set_reduction_mask(7)
                try:
                    alt = timed(lambda a, b, ta, tb: dense.gemm(GemmArgs(a, b, ta, tb)), make,
                                bytes_per_set=2 * (m * k + k * n + m * n), iters=iters)
                    rows[-1]["ours_splitk_any"] = alt
                    rows[-1]["ratio_splitk_any"] = rows[-1]["torch"]["ms"] / alt["ms"]
                finally:
                    ext.set_reduction_mask(2)

    # FP8 forward NT (a [M, K], b [N, K]) vs torch._scaled_mm / F.scaled_mm on the same buffers
    fp8_shapes = [(8192, 8192, 8192), (tokens, 28672, 4096), (tokens, 4096, 14336)]
    if quick:
        fp8_shapes = fp8_shapes[:1]
    for m, n, k in fp8_shapes:
        flops = 2 * m * n * k
        nbytes = m * k + n * k + 2 * m * n

        def make_t(m=m, n=n, k=k):
            return (torch.randn(m, k, device="cuda").to(e4m3), torch.rand((), device="cuda") + 0.5,
                    torch.randn(n, k, device="cuda").to(e4m3), torch.rand((), device="cuda") + 0.5)

        pair(rows, f"fp8 TENSORWISE NT {m}x{n}x{k}", flops,
             lambda a, sa, b, sb: fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, bf16, "TENSORWISE")),
             lambda a, sa, b, sb: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=bf16),
             make_t, nbytes, iters)

        def make_r(m=m, n=n, k=k):
            return (torch.randn(m, k, device="cuda").to(e4m3), torch.rand(m, 1, device="cuda") + 0.5,
                    torch.randn(n, k, device="cuda").to(e4m3), torch.rand(n, 1, device="cuda") + 0.5)

        pair(rows, f"fp8 ROWWISE NT {m}x{n}x{k}", flops,
             lambda a, sa, b, sb: fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, bf16, "ROWWISE")),
             lambda a, sa, b, sb: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=bf16),
             make_r, nbytes, iters)

        def make_b(m=m, n=n, k=k):
            # turbo's layouts: a 1x128 blocks [M, K/128], b (weight) 128x128 tiles [N/128, K/128]; plus a's
            # scales already in torch's (cuBLASLt's) outer-dim-major order, made once outside the timing
            sa = torch.rand(m, k // 128, device="cuda") + 0.5
            return (torch.randn(m, k, device="cuda").to(e4m3), sa, torch.randn(n, k, device="cuda").to(e4m3),
                    torch.rand(n // 128, k // 128, device="cuda") + 0.5, sa.t().contiguous().t())

        def torch_block(a, sa, b, sb, sa_outer):
            from torch.nn.functional import ScalingType, scaled_mm

            return scaled_mm(a, b.t(), sa_outer, ScalingType.BlockWise1x128, sb.t(), ScalingType.BlockWise128x128,
                             output_dtype=bf16)

        pair(rows, f"fp8 BLOCKWISE 1x128 x 128x128 NT {m}x{n}x{k}", flops,
             lambda a, sa, b, sb, _: fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, bf16, "BLOCKWISE", 128)),
             torch_block, make_b, nbytes, iters,
             note="ours includes re-laying a's scales out of turbo's [M, K/128] row-major (one small copy); "
                  "torch gets them pre-laid-out")

    # grouped bf16 forward: G x (rows x K -> N) vs torch._grouped_mm
    for g, rows_per, k, n in ((8, 4096, 4096, 2048), (64, 512, 2048, 1408)):
        flops = 2 * g * rows_per * k * n

        def make_g(g=g, rows_per=rows_per, k=k, n=n, host=False):
            a = torch.randn(g * rows_per, k, device="cuda").to(bf16)
            w = torch.randn(g, n, k, device="cuda").to(bf16)  # [G, N, K]: trans_b
            lens = torch.full((g,), rows_per, dtype=torch.int64, device="cpu" if host else "cuda")
            offs = torch.zeros(g + 1, dtype=torch.int64, device=lens.device)
            offs[1:] = torch.cumsum(lens, 0)
            ends = offs[1:].to(device="cuda", dtype=torch.int32)
            return a, w, lens, offs, ends

        for host in (False, True):
            pair(rows, f"grouped bf16 G{g} {rows_per}x{k}->{n} offs on {'CPU' if host else 'GPU'}", flops,
                 lambda a, w, lens, offs, ends: grouped.grouped_gemm(GroupedGemmArgs(a, w, lens, offs, True)),
                 lambda a, w, lens, offs, ends: torch._grouped_mm(a, w.transpose(-2, -1), offs=ends),
                 lambda host=host, make_g=make_g: make_g(host=host), 2 * (g * rows_per * (k + n) + g * n * k),
                 iters)

    # fused-bias Linear forward vs GEMM + separate bias add (and vs F.linear)
    for m, n, k in ((tokens, 4096, 4096), (tokens, 14336, 4096), (2048, 4096, 4096)):
        def make_l(m=m, n=n, k=k):
            return (torch.randn(m, k, device="cuda").to(bf16), torch.randn(n, k, device="cuda").to(bf16),
                    torch.randn(n, device="cuda").to(bf16))

        flops = 2 * m * n * k
        nb = 2 * (m * k + n * k + m * n)
        pair(rows, f"linear+bias fused vs gemm+add {m}x{n}x{k}", flops,
             lambda x, w, bias: api.linear(x, w, bias),
             lambda x, w, bias: dense.gemm(GemmArgs(x, w, False, True)) + bias, make_l, nb, iters,
             note="'torch' column here is our own GEMM followed by a separate bias add")
        pair(rows, f"linear+bias fused vs F.linear {m}x{n}x{k}", flops,
             lambda x, w, bias: api.linear(x, w, bias),
             lambda x, w, bias: torch.nn.functional.linear(x, w, bias), make_l, nb, iters)

    # overhead at small shapes: the kernel called directly, and through turbo's dispatcher
    for s in (256, 1024):
        def make_s(s=s):
            return torch.randn(s, s, device="cuda").to(bf16), torch.randn(s, s, device="cuda").to(bf16)

        pair(rows, f"small bf16 NT {s}^3 direct kernel", 2 * s ** 3,
             lambda a, b: dense.gemm(GemmArgs(a, b, False, True)), lambda a, b: torch.matmul(a, b.t()),
             make_s, 6 * s * s, iters)

        def via_dispatch(a, b):
            with use_backend("HIPBLASLT"):
                return call("gemm", GemmArgs(a, b, False, True))

        pair(rows, f"small bf16 NT {s}^3 through turbo dispatch", 2 * s ** 3, via_dispatch,
             lambda a, b: torch.matmul(a, b.t()), make_s, 6 * s * s, iters)

    ok_rows = [r for r in rows if "ratio" in r]
    vs_torch = [r["ratio"] for r in ok_rows if r["case"].split(" ")[0] in ("bf16", "fp8", "grouped")]
    return {"rows": rows, "min_ratio_vs_torch": min(vs_torch, default=None),
            "blaslt_cache": runtime.ext().cache_info()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="one shape per benchmark family")
    ap.add_argument("--parts", default="pytest,conformance,graph,bench",
                    help="comma-separated, from pytest,conformance,graph,bench (the build always runs)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--pytest-timeout", type=int, default=240)
    ap.add_argument("--conformance-max-s", type=float, default=200.0)
    args = ap.parse_args()
    parts = {p for p in args.parts.split(",") if p}
    unknown = parts - {"pytest", "conformance", "graph", "bench"}
    if unknown:
        ap.error(f"--parts: unknown {sorted(unknown)}")
    setup_env()
    OUT.append(Path(args.out))
    RESULT["command"] = " ".join(sys.argv)
    RESULT["env"] = {k: os.environ.get(k) for k in ("TURBO_PLUGINS", "TURBO_HIPBLASLT_JIT", "TURBO_HIPBLASLT_CACHE_DIR")}
    build()
    if RESULT["build"]["ok"]:
        if "pytest" in parts:
            run_pytest(args.pytest_timeout)
        if "conformance" in parts:
            conformance(args.conformance_max_s)
        if "graph" in parts:
            cuda_graph()
        if "bench" in parts:
            bench(args.quick, args.iters)
    save()
    log(f"wrote {args.out}")
    gates = ("build", "pytest", "conformance", "cuda_graph")  # those that ran
    return 0 if all(RESULT.get(g, {"ok": True})["ok"] for g in gates) else 1


if __name__ == "__main__":
    sys.exit(main())
