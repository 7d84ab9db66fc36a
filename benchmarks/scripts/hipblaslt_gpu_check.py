"""GPU check of turbo-hipblaslt (the CUDA build of its one C++ source over cuBLASLt) on the H200.

Run from the repository root (no install needed; nothing is downloaded):

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/hipblaslt_gpu_check.py --out hipblaslt_gpu_check.json \\
      [--parts pytest,conformance,precision,graph,bench] [--quick] \\
      [--pytest-k EXPR] [--conformance-families gemm,gemm_fp8,grouped_gemm]

About 4-6 minutes for all parts (most of it the conformance part: ~3 minutes for its three families).
The fast re-check of the FP8 path (about 2 minutes):

  ... hipblaslt_gpu_check.py --out hipblaslt_gpu_check.json --parts pytest,conformance,precision \\
      --conformance-families gemm_fp8

The script puts packages/turbo-hipblaslt/src on sys.path and turbo_hipblaslt.plugin into
TURBO_PLUGINS itself when they are missing, and sets TURBO_HIPBLASLT_JIT=1 with a fresh
TURBO_HIPBLASLT_CACHE_DIR (a temporary folder) unless given: the extension is compiled here, by the
host C++ compiler against /usr/local/cuda's cublasLt.h and libcublasLt (no pybind11 involved: the
binding is the CPython stable ABI).

What it writes (JSON, one object, rewritten after every section; every section has ``ok`` and its
numbers or the error; ``summary`` holds the lines also printed at the end):

1. ``build``: the toolkit found, compile + load time, ``turbo_hipblaslt.api.capabilities()``
   (library version; which FP8 scale modes and epilogues the loaded cuBLASLt has on this GPU).
2. ``pytest``: packages/turbo-hipblaslt/tests/test_gpu.py (every layout/dtype vs float64, beta=1,
   FP8 granularities x layouts vs the float64 reference, grouped, epilogues, streams, errors):
   the summary line, every failure with the first lines of its message (from a JUnit report), the
   skip reasons with their counts.
3. ``conformance``: turbo-core's conformance cases of the chosen families with HIPBLASLT pinned on
   the primitives it serves (forward and backward through the public ops): counts of passed /
   declined (the capability check's reason) / failed / skipped / unpinned, each failure's first message
   lines, every case's outcome. Each case runs with torch.autograd.set_multithreading_enabled(False): a
   CUDA backward otherwise runs on autograd's device thread, where the use_backend pin (a context
   variable) is unset, so the backward's primitives were not pinned (the second run's fused-wgrad
   "failure": HIPBLASLT declines the fp32 main_grad, so the default order's next backend, TRITON, ran
   that wgrad). ``unpinned``: the cases whose pinned primitives were still served by another backend
   (from the dispatcher's call statistics; a passed case among them counts as unpinned, not passed).
4. ``precision``: fp32 results of FP8 GEMMs (TENSORWISE, hybrid, ROWWISE, BLOCKWISE; K = 512 and 4096)
   against float64, ours (with TURBO_HIPBLASLT_FP8_FP32_OUT=1) beside torch._scaled_mm /
   F.scaled_mm on the same operands: whether fp32 results miss fp32's tolerance in the library itself
   (the reason turbo_hipblaslt declines them on sm89/sm90 by default).
5. ``cuda_graph``: capture + replay of a bf16 gemm and a TENSORWISE NN gemm_fp8 (the Hopper TN copy
   inside the graph) against eager.
6. ``bench``: medians (CUDA events, inputs rotated beyond L2: turbo_core.bench.timing) side by side in
   one process, with ``ratio`` = torch time / ours (>= 0.98 is the target):
   dense bf16 NT/NN/TN at Llama shapes vs torch.matmul; FP8 TENSORWISE/ROWWISE vs torch._scaled_mm,
   BLOCKWISE 1x128 x 128x128 vs torch.nn.functional.scaled_mm; grouped bf16 vs torch._grouped_mm
   (group offsets on the GPU: one host sync per call; and on the CPU: none); fused-bias Linear vs
   the same GEMM + a separate bias add and vs F.linear; small-shape overhead (direct kernel and
   through turbo's dispatcher) vs torch.matmul.

Exit status 0 when build, pytest, conformance and cuda_graph (those that ran) are ok.
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
                res = dict(fn(*args, **kw) or {})
                RESULT[name] = {"ok": bool(res.pop("ok", True)), **res}
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

def first_lines(text: str, n: int = 12, limit: int = 2000) -> str:
    """The first ``n`` non-empty lines of ``text``, at most ``limit`` characters."""
    lines = [ln.rstrip() for ln in (text or "").splitlines() if ln.strip()]
    return "\n".join(lines[:n])[:limit]


def junit_failures(path: Path) -> list[dict]:
    """``[{"test", "message"}]`` for every failed or erroring test case of a JUnit XML report: the
    first lines of the exception message, or of the ``E`` lines of the traceback when it has none."""
    import xml.etree.ElementTree as ET

    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is None:
                continue
            msg = node.get("message") or ""
            e_lines = "\n".join(ln[1:].strip() for ln in (node.text or "").splitlines() if ln.startswith("E "))
            out.append({"test": f"{case.get('name')}", "kind": kind,
                        "message": first_lines(msg if msg.count("\n") >= 2 else (e_lines or msg))})
    return out


@section("pytest")
def run_pytest(timeout: int, k_expr: str | None):
    report = Path(tempfile.mkdtemp(prefix="hipblaslt_pytest_")) / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--tb=short",
           f"--junitxml={report}", str(ROOT / "packages" / "turbo-hipblaslt" / "tests" / "test_gpu.py")]
    if k_expr:
        cmd += ["-k", k_expr]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    failures = junit_failures(report) if report.exists() else []
    skips: dict[str, int] = {}
    for ln in lines:  # "SKIPPED [4] path:line: reason"
        if ln.startswith("SKIPPED"):
            why = ln.split(": ", 1)[-1][:300]
            count = ln.split("[", 1)[1].split("]", 1)[0] if "[" in ln else "1"
            skips[why] = skips.get(why, 0) + (int(count) if count.isdigit() else 1)
    res = {"ok": proc.returncode == 0, "exit": proc.returncode, "summary": summary, "failed": len(failures),
           "failures": failures[:80], "skipped": skips}
    if proc.returncode != 0 and not failures:  # collection errors, crashes: keep the raw output
        res["stdout_tail"] = proc.stdout[-6000:]
        res["stderr_tail"] = proc.stderr[-3000:]
    return res


# -- 3. conformance ------------------------------------------------------------------------------------------

@section("conformance")
def conformance(max_s: float, families: list[str], backend: str = "HIPBLASLT", device: str = "cuda"):
    from turbo_core.dispatch import dispatcher
    from turbo_core.dispatch.dispatcher import BackendError
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.testing.conformance import _served

    dev = torch.device(device)
    counts = {"passed": 0, "declined": 0, "skipped": 0, "failed": 0, "unpinned": 0, "not_run": 0}
    failures, declines, outcomes, unpinned = [], {}, {}, {}
    t0 = time.time()
    for fam in families:
        for case in importlib.import_module(f"turbo_core.testing.cases.{fam}").CASES:
            if time.time() - t0 > max_s:
                counts["not_run"] += 1
                continue
            served, reason = _served(backend, case.primitives)
            if reason is not None:
                counts["skipped"] += 1
                outcomes[case.id] = "skipped"
                continue
            dispatcher.clear_warnings()  # empties the call statistics read below
            try:
                # The backward on this thread: a CUDA backward otherwise runs on autograd's device thread,
                # where use_backend's pin (a context variable) is unset, so the dgrad/wgrad primitives would
                # go through the default selection instead of HIPBLASLT.
                with use_backend(backend, primitives=served), torch.autograd.set_multithreading_enabled(False):
                    case.run(device=dev)
                outcome = "passed"
            except BackendError as exc:
                if "cannot run this call" in str(exc):
                    outcome = "declined"
                    why = str(exc).split("cannot run this call: ", 1)[-1][:300]
                    declines.setdefault(why, []).append(case.id)
                else:
                    outcome = "failed"
                    failures.append({"case": case.id, "message": first_lines(f"BackendError: {exc}")})
            except Exception as exc:
                outcome = "failed"
                failures.append({"case": case.id, "message": first_lines(f"{type(exc).__name__}: {exc}")})
            # Which backend served each of the case's pinned primitives (a guard: all of them `backend`).
            ran = {f"{prim}->{name} ({how})": n for (prim, name, how), n in dispatcher.stats().items()
                   if prim in served and name != backend}
            if ran:
                unpinned[case.id] = ran
                if outcome == "passed":
                    outcome = "unpinned"
                elif outcome == "failed":
                    failures[-1]["served_by"] = ran
            counts[outcome] += 1
            outcomes[case.id] = outcome
    ok = counts["failed"] == 0 and counts["unpinned"] == 0 and counts["not_run"] == 0
    return {"ok": ok, "families": families, "counts": counts, "failures": failures,
            "declined": {k: {"n": len(v), "cases": v[:8]} for k, v in declines.items()},
            "unpinned": unpinned, "outcomes": outcomes}


# -- 4. FP8 accumulation precision: ours and torch's cuBLASLt calls on the same operands ---------------------

def _error_row(got: torch.Tensor, ref: torch.Tensor) -> dict:
    """Errors of ``got`` against the float64 ``ref`` (CPU), and the share of elements outside the
    tolerance of turbo_core.testing.numerics for fp32 and for bf16 results."""
    from turbo_core.testing.numerics import error_stats, tolerance

    got = got.cpu().double()
    row = dict(error_stats(ref, got))
    for dtype, key in ((torch.float32, "frac_beyond_fp32_tol"), (torch.bfloat16, "frac_beyond_bf16_tol")):
        rtol, atol = tolerance(dtype)
        row[key] = ((got - ref).abs() > atol + rtol * ref.abs()).double().mean().item()
    return row


@section("precision")
def precision():
    """fp32 results of FP8 GEMMs against float64 on the dequantized operands: HIPBLASLT (fp32 results
    opted in) beside torch._scaled_mm / F.scaled_mm (the same library, called by torch) on the same
    operands. Equal errors in both mean the error is the library's (Hopper's FP8 accumulation), not our
    mapping."""
    from turbo_hipblaslt import runtime

    rows: list = []
    os.environ[runtime.FP8_FP32_OUT_ENV] = "1"
    try:
        _precision_rows(rows, torch.Generator().manual_seed(0))
    finally:
        del os.environ[runtime.FP8_FP32_OUT_ENV]
    return {"rows": rows}


def _precision_rows(rows: list, gen: torch.Generator) -> None:
    from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
    from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
    from turbo_hipblaslt import gemm_fp8 as fp8

    e4m3, e5m2, f32 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float32
    for gran, (da, db), (m, n, k) in (
            ("TENSORWISE", (e4m3, e4m3), (128, 256, 512)), ("TENSORWISE", (e4m3, e4m3), (256, 512, 4096)),
            ("TENSORWISE", (e4m3, e5m2), (128, 256, 512)), ("ROWWISE", (e4m3, e4m3), (128, 256, 512)),
            ("ROWWISE", (e4m3, e4m3), (256, 512, 4096)), ("BLOCKWISE", (e4m3, e4m3), (128, 256, 512)),
            ("BLOCKWISE", (e4m3, e4m3), (256, 512, 4096))):
        row = {"case": f"{gran} {str(da).split('float8_')[1]} x {str(db).split('float8_')[1]} NT {m}x{n}x{k} fp32 out"}
        try:
            a = torch.randn(m, k, generator=gen).to(da)
            b = torch.randn(n, k, generator=gen).to(db)  # NT: b [N, K]
            if gran == "TENSORWISE":
                sa, sb = torch.rand((), generator=gen) + 0.5, torch.rand((), generator=gen) + 0.5
                bs = None
            elif gran == "ROWWISE":
                sa, sb = torch.rand(m, 1, generator=gen) + 0.5, torch.rand(n, 1, generator=gen) + 0.5
                bs = None
            else:  # a: 1x128 blocks [M, K/128]; b (weight): 128x128 tiles [N/128, K/128]
                sa, sb = torch.rand(m, k // 128, generator=gen) + 0.5, torch.rand(n // 128, k // 128, generator=gen) + 0.5
                bs = 128
            ref = reference(GemmFp8Args(a, sa, b, sb, False, True, torch.float64, gran, bs))
            row["max_abs_ref"] = ref.abs().max().item()
            ac, bc, sac, sbc = a.cuda(), b.cuda(), sa.cuda(), sb.cuda()
            ours = fp8.gemm_fp8(GemmFp8Args(ac, sac, bc, sbc, False, True, f32, gran, bs))
            row["ours"] = _error_row(ours, ref)
            try:
                if gran == "TENSORWISE":
                    theirs = torch._scaled_mm(ac, bc.t(), scale_a=sac, scale_b=sbc, out_dtype=f32)
                elif gran == "ROWWISE":
                    theirs = torch._scaled_mm(ac, bc.t(), scale_a=sac, scale_b=sbc.t(), out_dtype=f32)
                else:
                    from torch.nn.functional import ScalingType, scaled_mm

                    theirs = scaled_mm(ac, bc.t(), sac.t().contiguous().t(), ScalingType.BlockWise1x128, sbc.t(),
                                       ScalingType.BlockWise128x128, output_dtype=f32)
                row["torch"] = _error_row(theirs, ref)
                row["ours_vs_torch_max_abs"] = (ours - theirs).abs().max().item()
            except Exception as exc:  # torch lacks this path: ours is still reported
                row["torch_error"] = f"{type(exc).__name__}: {exc}"[:400]
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:800]
        rows.append(row)
        log(" ", row["case"], {w: {x: round(y, 6) for x, y in row[w].items()} for w in ("ours", "torch") if w in row})


# -- 5. CUDA graph -------------------------------------------------------------------------------------------

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


# -- 6. bench --------------------------------------------------------------------------------------------------

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


def summary() -> list[str]:
    """A few lines per section: what to read first in the JSON."""
    out = []
    b = RESULT.get("build", {})
    caps = b.get("capabilities") or {}
    out.append(f"build: ok={b.get('ok')} {caps.get('library')} {caps.get('library_version')} "
               f"sm{''.join(map(str, caps.get('compute_capability') or ()))} {b.get('error', '')}".rstrip())
    if "pytest" in RESULT:
        r = RESULT["pytest"]
        out.append(f"pytest: ok={r['ok']} {r.get('summary') or r.get('error', '')}")
        out += [f"  FAILED {f['test']}: {' | '.join(f['message'].splitlines()[:3])[:300]}"
                for f in r.get("failures", [])[:8]]
    if "conformance" in RESULT:
        r = RESULT["conformance"]
        out.append(f"conformance: ok={r['ok']} {r.get('counts') or r.get('error', '')}")
        out += [f"  FAILED {f['case']}: {' | '.join(f['message'].splitlines()[:3])[:300]}"
                for f in r.get("failures", [])[:8]]
        out += [f"  declined x{v['n']}: {k[:160]}" for k, v in list(r.get("declined", {}).items())[:6]]
        out += [f"  UNPINNED {case}: {ran}" for case, ran in list(r.get("unpinned", {}).items())[:8]]
    if "precision" in RESULT:
        r = RESULT["precision"]
        out.append(f"precision (fp32 results vs float64; max_rel = max abs err / max |ref|): ok={r['ok']}")
        for row in r.get("rows", []):
            parts = [f"{who} max_rel {row[who]['max_rel']:.2e} beyond-fp32-tol {row[who]['frac_beyond_fp32_tol']:.0%}"
                     for who in ("ours", "torch") if who in row]
            out.append(f"  {row['case']}: {'; '.join(parts) or row.get('error', '')}")
    if "cuda_graph" in RESULT:
        out.append(f"cuda_graph: ok={RESULT['cuda_graph']['ok']}")
    if "bench" in RESULT:
        r = RESULT["bench"]
        out.append(f"bench: ok={r['ok']} min ratio vs torch {r.get('min_ratio_vs_torch')}")
    return out


PARTS = ("pytest", "conformance", "precision", "graph", "bench")
FAMILIES = ("gemm", "gemm_fp8", "grouped_gemm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="one shape per benchmark family")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated, from {','.join(PARTS)} (the build always runs)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--pytest-timeout", type=int, default=240)
    ap.add_argument("--pytest-k", default=None, help="pytest -k expression for tests/test_gpu.py")
    ap.add_argument("--conformance-families", default=",".join(FAMILIES),
                    help=f"comma-separated conformance families, from {','.join(FAMILIES)}")
    ap.add_argument("--conformance-max-s", type=float, default=200.0)
    args = ap.parse_args()
    parts = {p for p in args.parts.split(",") if p}
    unknown = parts - set(PARTS)
    if unknown:
        ap.error(f"--parts: unknown {sorted(unknown)}")
    families = [f for f in args.conformance_families.split(",") if f]
    if set(families) - set(FAMILIES):
        ap.error(f"--conformance-families: unknown {sorted(set(families) - set(FAMILIES))}")
    setup_env()
    OUT.append(Path(args.out))
    RESULT["command"] = " ".join(sys.argv)
    RESULT["env"] = {k: os.environ.get(k) for k in ("TURBO_PLUGINS", "TURBO_HIPBLASLT_JIT", "TURBO_HIPBLASLT_CACHE_DIR")}
    build()
    if RESULT["build"]["ok"]:
        if "pytest" in parts:
            run_pytest(args.pytest_timeout, args.pytest_k)
        if "conformance" in parts:
            conformance(args.conformance_max_s, families)
        if "precision" in parts:
            precision()
        if "graph" in parts:
            cuda_graph()
        if "bench" in parts:
            bench(args.quick, args.iters)
    RESULT["summary"] = summary()
    save()
    print("\n".join(["== hipblaslt_gpu_check summary ==", *RESULT["summary"]]), flush=True)
    log(f"wrote {args.out}")
    gates = ("build", "pytest", "conformance", "cuda_graph")  # those that ran
    return 0 if all(RESULT.get(g, {"ok": True})["ok"] for g in gates) else 1


if __name__ == "__main__":
    sys.exit(main())
