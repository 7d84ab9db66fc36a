"""GPU check and benchmark of the TRITON grouped GEMM (run on the GPU machine).

1. torch._grouped_mm's calling convention on this torch, checked against float64 on small cases
   before anything is timed: 2d x 3d (forward; b row-major [G, K, N] and as a transposed [G, N, K]
   view) and 2d x 2d (wgrad: ``_grouped_mm(dy.t(), x, offs)`` -> [G, out, in]) with int32
   cumulative group ends, aligned and unaligned group lengths, a zero-size group, a tail (rows past
   the last group), and whether int64 offsets are refused.
2. TRITON correctness against float64: the forward/dgrad (both layouts of b) and the variable-K wgrad
   (trans_c, accumulate into an fp32 or bf16 out) on odd shapes (pointer kernel) and aligned ones
   (TMA kernel, and the pointer kernel forced), fp32/fp16/bf16; then every MoE model layer of the
   benchmark (bf16, balanced and skewed lengths with a zero-size group) with a tail of rows past
   the groups. Every output is poisoned with NaN before the run (torch.empty is wrapped), rows
   outside the groups of the inputs are NaN/inf, and the forward's tail rows must come out 0.
   Gate: elementwise error below 1e-2 (bf16/fp16 out) or 1e-4 (fp32 out); a model layer also passes
   at no more than twice torch._grouped_mm's own error on the same inputs (long reductions: the
   tensor cores' fp32 accumulation drifts past a fixed gate; ``torch_elem_err`` in the rows).
   The torch comparison was added after session 9's run and has not run on the GPU yet.
3. CUDA graphs: the forward (launcher and the public op turbo_core.ops.grouped_gemm pinned to
   TRITON) and the wgrad captured once, then replayed with other group lengths written into the
   captured group_lens/group_offs (balanced, skewed, all rows in one group, a tail), the output
   poisoned before each replay.
4. Timing, TRITON (through the dispatcher, pinned) vs torch._grouped_mm, bf16, forward / dgrad /
   wgrad over DeepSeek-V3 (8 local experts of 256), Qwen3-30B-A3B (8 of 128), Mixtral-8x7B (8),
   8192 tokens x top-k / experts rows per expert, balanced and skewed: eager (CUDA events around
   each call, inputs rotated beyond L2: turbo_core.bench.timing.measure) and CUDA-graph replay
   (no host overhead); a table, geomean ratios per pass and balance, JSON.
5. ``--sweep``: candidate tile configs on a few of the shapes (launcher called directly).

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/grouped_gemm_h200.py --out grouped.json [--check-only | --skip-check] \
      [--sweep | --sweep-only] [--models deepseek-v3 ...] [--max-minutes 9]

Expected run time on a fresh machine (Triton compiles everything once): checks ~3-4 minutes, the
benchmark ~3 minutes, the sweep ~4 minutes; ``--max-minutes`` stops the timing phases cleanly.

The JSON is rewritten after every phase, so a run cut short still leaves what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time

import torch
import triton

from turbo_core.bench import report, timing
from turbo_core.bench.suites import grouped_gemm as suite
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_triton.grouped_gemm import configs
from turbo_triton.grouped_gemm import launch as gl

DEV = "cuda"
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
RESULTS: dict = {"torch_convention": [], "checks": [], "graphs": [], "bench": [], "sweep": []}
T0 = time.time()
OUT = {"path": None, "deadline": float("inf")}


def log(*args):
    print(f"[{time.time() - T0:6.0f}s]", *args, flush=True)


def save(path=None):
    path = path or OUT["path"]
    RESULTS["summary"] = report.summary([{**r, "pass": f"{r['pass']}/{r['mode']}/{r['balance']}"}
                                         for r in RESULTS["bench"]])
    with open(path, "w") as fh:
        json.dump(RESULTS, fh, indent=1, default=str)


def offsets(lens, device=None):
    device = device or DEV
    lens_t = torch.tensor(lens, dtype=torch.int64, device=device)
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64, device=device)
    offs[1:] = torch.cumsum(lens_t, 0)
    return lens_t, offs


def fwd_ref(a, b, lens, trans_b):
    """float64 [M, N]: each group's rows times its matrix, zero elsewhere."""
    out = torch.zeros(a.shape[0], b.shape[1] if trans_b else b.shape[2], dtype=torch.float64, device=a.device)
    start = 0
    for g, n in enumerate(lens):
        w = b[g].double().t() if trans_b else b[g].double()
        out[start:start + n] = a[start:start + n].double() @ w
        start += n
    return out


def vark_ref(a, b, lens, trans_c):
    mats, start = [], 0
    for n in lens:
        c = a[start:start + n].double().t() @ b[start:start + n].double()
        mats.append(c.t() if trans_c else c)
        start += n
    return torch.stack(mats)


def errors(c, ref):
    """(elementwise max |c - ref| / (|ref| + 1), max |c - ref| / max |ref|, all finite)."""
    d = (c.double() - ref).abs()
    scale = ref.abs().max().item() or 1.0
    return (d / (ref.abs() + 1)).max().item(), d.max().item() / scale, bool(torch.isfinite(c).all())


@contextlib.contextmanager
def poisoned_outputs():
    """torch.empty returns NaN-filled tensors: an output element a kernel does not write shows."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


# -- 1. torch._grouped_mm convention ----------------------------------------------------------------


def check_torch_convention():
    """Returns whether torch handled unaligned group lengths correctly (reported per case)."""
    torch.manual_seed(0)
    k, n = 64, 48
    ok_unaligned = True
    for name, lens, tail in (("aligned", (32, 0, 64, 16), 0), ("unaligned", (5, 0, 17, 30), 0),
                             ("unaligned+tail", (5, 0, 17, 30), 9)):
        m = sum(lens) + tail
        g = len(lens)
        a = torch.randn(m, k, device=DEV).bfloat16()
        w = torch.randn(g, n, k, device=DEV).bfloat16()  # [G, out, in]
        dy = torch.randn(m, n, device=DEV).bfloat16()
        ends = torch.tensor(lens, device=DEV).cumsum(0).to(torch.int32)
        rows = sum(lens)
        for what, fn, ref in (
            ("2d3d b=[G,K,N] row-major", lambda: torch._grouped_mm(a, w.transpose(1, 2).contiguous(), offs=ends),
             fwd_ref(a, w, lens, True)),
            ("2d3d b=[G,N,K].transpose(-2,-1)", lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=ends),
             fwd_ref(a, w, lens, True)),
            ("2d2d wgrad _grouped_mm(dy.t(), x) -> [G,out,in]", lambda: torch._grouped_mm(dy.t(), a, offs=ends),
             vark_ref(a, dy, lens, True)),
        ):
            row = {"case": name, "lens": lens, "tail": tail, "call": what}
            try:
                c = fn()
                torch.cuda.synchronize()
                if c.dim() == 2:
                    row["tail_rows_zero"] = bool((c[rows:] == 0).all()) if tail else None
                    c, ref = c[:rows], ref[:rows]
                elem, rel, _ = errors(c, ref)
                row.update(ok=elem < 1e-2, elem_err=elem, rel_err=rel, shape=tuple(c.shape), stride=c.stride())
            except Exception as exc:
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            if not row["ok"] and "unaligned" in name:
                ok_unaligned = False
            RESULTS["torch_convention"].append(row)
            log("torch._grouped_mm", name, what, {k_: v for k_, v in row.items() if k_ not in ("case", "call")})
    try:
        torch._grouped_mm(a, w.transpose(-2, -1), offs=ends.long())
        refused = False
    except Exception as exc:
        refused = f"{type(exc).__name__}: {str(exc)[:120]}"
    RESULTS["torch_convention"].append({"case": "int64 offs", "refused": refused})
    log("torch._grouped_mm with int64 offs refused:", refused)
    # alignment: K = 36 gives 72-byte rows (not a multiple of 16 bytes)
    a36, w36 = torch.randn(52, 36, device=DEV).bfloat16(), torch.randn(4, 48, 36, device=DEV).bfloat16()
    try:
        c = torch._grouped_mm(a36, w36.transpose(-2, -1), offs=ends)
        torch.cuda.synchronize()
        refused = False
        elem = errors(c[:52], fwd_ref(a36, w36, (5, 0, 17, 30), True)[:52])[0]
    except Exception as exc:
        refused, elem = f"{type(exc).__name__}: {str(exc)[:120]}", None
    RESULTS["torch_convention"].append({"case": "K=36 (72-byte rows)", "refused": refused, "elem_err": elem})
    log("torch._grouped_mm with K=36 refused:", refused, "elem err", elem)
    return ok_unaligned


# -- 2. TRITON correctness --------------------------------------------------------------------------


def record(kind, ok, **row):
    RESULTS["checks"].append({"kind": kind, "ok": ok, **row})
    if not ok:
        log("FAIL", kind, row)
    if len(RESULTS["checks"]) % 25 == 0:
        save()


def late() -> bool:
    if time.time() > OUT["deadline"]:
        log("time budget reached: the remaining checks are skipped")
        return True
    return False


def peer_error(kind, a, b, lens, ref, trans=False, base=None):
    """``torch._grouped_mm``'s elementwise error (``errors``) on the same inputs and reference, or None
    where it cannot run the case: the yardstick for long reductions, whose fp32 accumulation on the
    tensor cores drifts past a fixed gate (model shapes: K up to 28672, groups up to 4730 rows)."""
    rows = sum(lens)
    ends = torch.tensor(lens, device=a.device).cumsum(0).to(torch.int32)
    try:
        if kind == "fwd":  # b: [G, N, K] (trans_b) or [G, K, N]
            c = torch._grouped_mm(a[:rows], b.transpose(-2, -1) if trans else b, offs=ends)
            got, want = c, ref[:rows]
        else:  # per group a^T b: [G, K, N]; ref is [G, N, K] when trans (trans_c)
            c = torch._grouped_mm(a[:rows].t(), b[:rows], offs=ends, out_dtype=torch.float32 if base is not None
                                  else None)
            got = c.transpose(-2, -1) if trans else c
            got = got.double() + base.double() if base is not None else got
            want = ref
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - no yardstick for this case
        return None
    return errors(got, want)[0]


def _within(elem: float, tol: float, peer: float | None) -> bool:
    """A check's gate: the fixed tolerance, or at most twice torch's own error where that is known."""
    return elem < tol or (peer is not None and elem <= 2.0 * peer)


def check_fwd(lens, k, n, trans_b, dtype, tail=0, path=None, cfg=None, label=""):
    g, m = len(lens), sum(lens) + tail
    a = torch.randn(m, k, device=DEV).to(dtype)
    if tail:
        a[m - tail:] = float("nan")
    b = torch.randn(*((g, n, k) if trans_b else (g, k, n)), device=DEV).to(dtype)
    lens_t, offs = offsets(lens)
    args = GroupedGemmArgs(a, b, lens_t, offs, trans_b)
    used = path or gl.kernel_path(args, cfg)
    try:
        with poisoned_outputs():
            c = gl.grouped_gemm(args, cfg, path)
        torch.cuda.synchronize()
    except Exception as exc:
        record("fwd", False, label=label, lens=lens, k=k, n=n, trans_b=trans_b, dtype=str(dtype), path=used,
               error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return
    ref = fwd_ref(a, b, lens, trans_b)
    elem, rel, finite = errors(c, ref)
    tail_zero = bool((c[m - tail:] == 0).all()) if tail else True
    peer = peer_error("fwd", a, b, lens, ref, trans_b) if "/" in label else None  # model shapes
    record("fwd", finite and tail_zero and _within(elem, TOL[dtype], peer), label=label,
           lens=lens if g <= 16 else f"G{g}", k=k, n=n, trans_b=trans_b, dtype=str(dtype), path=used, tail=tail,
           elem_err=elem, rel_err=rel, torch_elem_err=peer, finite=finite, tail_zero=tail_zero)


def check_vark(lens, k, n, trans_c, dtype, out_dtype=None, tail=0, path=None, cfg=None, label=""):
    g, m = len(lens), sum(lens) + tail
    a = torch.randn(m, k, device=DEV).to(dtype)
    b = torch.randn(m, n, device=DEV).to(dtype)
    if tail:
        a[m - tail:] = float("nan")
        b[m - tail:] = float("inf")
    lens_t, offs = offsets(lens)
    base = out = None
    if out_dtype is not None:
        base = torch.randn(*((g, n, k) if trans_c else (g, k, n)), device=DEV).to(out_dtype)
        out = base.clone()
    args = GroupedGemmVariableKArgs(a, b, lens_t, offs, trans_c, None, out)
    used = path or gl.variable_k_kernel_path(args)
    try:
        with poisoned_outputs():
            c = gl.grouped_gemm_variable_k(args, cfg, path)
        torch.cuda.synchronize()
    except Exception as exc:
        record("vark", False, label=label, lens=lens, k=k, n=n, trans_c=trans_c, dtype=str(dtype),
               out=str(out_dtype), path=used, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return
    ref = vark_ref(a, b, lens, trans_c)
    if base is not None:
        ref = ref + base.double()
    elem, rel, finite = errors(c, ref)
    peer = peer_error("vark", a, b, lens, ref, trans_c, base) if "/" in label else None  # model shapes
    record("vark", finite and _within(elem, TOL[out_dtype or dtype], peer), label=label,
           lens=lens if g <= 16 else f"G{g}", k=k, n=n, trans_c=trans_c, dtype=str(dtype), out=str(out_dtype),
           path=used, tail=tail, elem_err=elem, rel_err=rel, torch_elem_err=peer, finite=finite)


def check_triton(models):
    torch.manual_seed(1)
    odd = (5, 0, 17, 1)
    small = configs.GroupedConfig(64, 64, 32, 4, 4, 3)
    # the sm90 table's largest configs (flattened loop, epilogue in halves) on small shapes too
    large_fwd = configs.GroupedConfig(128, 256, 64, 8, 8, 3, flatten=True, subtile=True)
    large_vark = configs.GroupedConfig(128, 256, 64, 8, 8, 3, subtile=True)
    aligned_lens = (37, 0, 130, 1, 300)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        if late():
            return
        # every shape in bf16 (the training dtype); one odd and two aligned ones in fp32/fp16
        full = dtype == torch.bfloat16
        odd_kn = ((45, 33), (23, 1), (1, 19)) if full else ((45, 33),)
        aligned_kn = ((64, 48), (136, 264), (1032, 520)) if full else ((136, 264), (1032, 520))
        for tb in (False, True):
            for k, n in odd_kn:
                check_fwd(odd, k, n, tb, dtype, tail=7, label="odd")
            # aligned: the TMA kernel (default table and a small config: many partial tiles), and
            # the pointer kernel forced on the same operands
            for k, n in aligned_kn:
                check_fwd(aligned_lens, k, n, tb, dtype, tail=5, label="aligned")
                check_fwd(aligned_lens, k, n, tb, dtype, tail=5, path="pointer", label="aligned-pointer")
                if full:
                    check_fwd(aligned_lens, k, n, tb, dtype, tail=5, cfg=small, label="aligned-small")
                    check_fwd(aligned_lens, k, n, tb, dtype, tail=5, cfg=large_fwd, label="aligned-large")
        for tc in (False, True):
            for k, n in odd_kn:
                check_vark(odd, k, n, tc, dtype, tail=7, label="odd")
            for k, n in ((64, 48), (256, 512), (1032, 520)) if full else ((256, 512), (1032, 520)):
                check_vark(aligned_lens, k, n, tc, dtype, tail=5, label="aligned")
                check_vark(aligned_lens, k, n, tc, dtype, tail=5, path="pointer", label="aligned-pointer")
                check_vark(aligned_lens, k, n, tc, dtype, out_dtype=torch.float32, label="aligned-accum")
                if full:
                    check_vark(aligned_lens, k, n, tc, dtype, tail=5, cfg=small, label="aligned-small")
                    check_vark(aligned_lens, k, n, tc, dtype, tail=5, cfg=large_vark, label="aligned-large")
                    check_vark(aligned_lens, k, n, tc, dtype, out_dtype=torch.float32, cfg=large_vark,
                               label="aligned-large-accum")
                    check_vark(aligned_lens, k, n, tc, dtype, out_dtype=torch.bfloat16, label="aligned-accum")
    done = sum(1 for r in RESULTS["checks"])
    log(f"odd/aligned checks: {done} run, {sum(not r['ok'] for r in RESULTS['checks'])} failed")
    # model layers: forward NT, dgrad NN, wgrad trans_c (+ accumulate into fp32), with a tail
    for model, spec in suite.MOE.items():
        if models and model not in models:
            continue
        if late():
            break
        for layer, out_f, in_f in spec["layers"]:
            for balance in suite.BALANCES:
                lens = suite.group_lens(8192, spec, balance)
                lab = f"{model}/{layer}/{balance}"
                check_fwd(lens, in_f, out_f, True, torch.bfloat16, tail=64, label=lab + "/fwd")
                check_fwd(lens, out_f, in_f, False, torch.bfloat16, tail=64, label=lab + "/dgrad")
                check_vark(lens, in_f, out_f, True, torch.bfloat16, tail=64, label=lab + "/wgrad")
                check_vark(lens, in_f, out_f, True, torch.bfloat16, out_dtype=torch.float32, label=lab + "/wgrad-acc")
        torch.cuda.empty_cache()
    fails = [r for r in RESULTS["checks"] if not r["ok"]]
    worst = {}
    for r in RESULTS["checks"]:
        key = f"{r['kind']}/{r['dtype']}/{r.get('path')}"
        worst[key] = max(worst.get(key, 0.0), r.get("elem_err", float("inf")))
    for key, v in sorted(worst.items()):
        log(f"check {key:40s} worst elementwise err {v:.2e}")
    log(f"checks: {len(RESULTS['checks'])} run, {len(fails)} failed")


# -- 3. CUDA graphs ---------------------------------------------------------------------------------


def check_graphs():
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.ops import grouped_gemm as op

    torch.manual_seed(2)
    g, k, n, m = 8, 512, 768, 4096
    a = torch.randn(m, k, device=DEV).bfloat16()
    w = torch.randn(g, n, k, device=DEV).bfloat16()
    dy = torch.randn(m, n, device=DEV).bfloat16()
    lens0 = (512,) * 8
    lens_t, offs = offsets(lens0)
    variants = {"balanced": lens0, "skewed+zero": (1500, 900, 700, 0, 500, 300, 173, 23),
                "one group": (0, 0, 0, m, 0, 0, 0, 0), "tail 100": (500,) * 7 + (400,),
                "all empty": (0,) * 8}
    vargs = GroupedGemmVariableKArgs(a, dy, lens_t, offs, True)
    for name, run in (
        ("fwd launcher", lambda: gl.grouped_gemm(GroupedGemmArgs(a, w, lens_t, offs, True))),
        ("fwd public op", lambda: op(a, w, lens_t, offs, trans_b=True)),
        ("wgrad launcher", lambda: gl.grouped_gemm_variable_k(vargs)),
    ):
        try:
            with use_backend("TRITON"), torch.no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    run()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    c = run()
        except Exception as exc:
            RESULTS["graphs"].append({"case": name, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            log("FAIL graph capture", name, exc)
            continue
        for vname, lens in variants.items():
            new_lens, new_offs = offsets(lens)
            lens_t.copy_(new_lens)
            offs.copy_(new_offs)
            c.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            ref = vark_ref(a, dy, lens, True) if name.startswith("wgrad") else fwd_ref(a, w, lens, True)
            elem, rel, finite = errors(c, ref)
            ok = finite and elem < 1e-2
            RESULTS["graphs"].append({"case": name, "lens": vname, "ok": ok, "elem_err": elem, "rel_err": rel})
            log("graph", name, vname, "ok" if ok else "FAIL", f"{elem:.2e}")
        lens_t.copy_(offsets(lens0)[0])
        offs.copy_(offsets(lens0)[1])
        del graph


# -- 4. timing --------------------------------------------------------------------------------------


def graphed(fn, sets):
    """One CUDA graph per input set, each replaying one call; ``(graph, a tensor)`` per set (the
    tensor tells timing.measure to use CUDA events)."""
    out = []
    for s in sets:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn(*s)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(*s)
        out.append((graph, s[0]))
    return out


def bench(models, warmup, iters, deadline):
    gen = torch.Generator(device=DEV).manual_seed(0)
    peak = 989.0
    for case in suite.cases(8192, False, models):
        if time.time() > deadline:
            log("time budget reached: benchmark stopped before", case.label)
            break
        first = suite.make_inputs(case, DEV, torch.bfloat16, gen)
        per_set = sum(t.numel() * t.element_size() for t in first[:2])
        sets = [first] + [suite.make_inputs(case, DEV, torch.bfloat16, gen)
                          for _ in range(timing.copies_needed(per_set) - 1)]
        ref = suite.reference(case, first[0], first[1])
        scale = ref.abs().max().item() or 1.0
        targs = suite.turbo_args(case.pass_, *first[:4])
        path = gl.variable_k_kernel_path(targs) if case.pass_ == "wgrad" else gl.kernel_path(targs)
        base = {}
        for name, fn in (("torch", suite.torch_provider(case.pass_)),
                         ("turbo:TRITON", suite.turbo_provider("TRITON", case.pass_))):
            for mode in ("eager", "graph"):
                row = {"suite": "grouped_gemm", "case": case.label, "model": case.model, "layer": case.layer,
                       "pass": case.pass_, "balance": case.balance, "mode": mode, "provider": name,
                       "m": case.m, "n": case.out_f, "k": case.in_f, "group_lens": list(case.lens),
                       "path": path if name != "torch" else None}
                try:
                    if mode == "eager":
                        out = fn(*first)
                        err = (out.double() - ref).abs().max().item() / scale
                        del out
                        t = timing.measure(fn, sets, warmup=warmup, iters=iters)
                    else:
                        graphs = graphed(fn, sets)
                        t = timing.measure(lambda gr, _t: gr.replay(), graphs, warmup=warmup, iters=iters)
                        del graphs
                        err = None
                except Exception as exc:
                    row.update(status=f"error: {type(exc).__name__}: {str(exc)[:300]}")
                    RESULTS["bench"].append(row)
                    log("ERROR", case.label, name, mode, row["status"])
                    continue
                tflops = case.flops / t.median_ms / 1e9
                if name == "torch":
                    base[mode] = t.median_ms
                row.update(status="ok", median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms, tflops=tflops,
                           ratio=base[mode] / t.median_ms if mode in base else None, peak_fraction=tflops / peak,
                           max_rel_err=err)
                RESULTS["bench"].append(row)
        rows = {(r["provider"], r["mode"]): r for r in RESULTS["bench"] if r["case"] == case.label}

        def cell(p, md, rows=rows):
            r = rows.get((p, md))
            return f"{r['tflops']:7.1f}" if r and r.get("status") == "ok" else "  error"

        def ratio(md, rows=rows):
            r = rows.get(("turbo:TRITON", md))
            return f"{r['ratio']:5.2f}" if r and r.get("ratio") else "    -"

        log(f"{case.label:58s} {path:7s} eager torch {cell('torch', 'eager')} triton {cell('turbo:TRITON', 'eager')}"
            f" x{ratio('eager')} | graph torch {cell('torch', 'graph')} triton {cell('turbo:TRITON', 'graph')}"
            f" x{ratio('graph')}")
        del sets, first, ref
        torch.cuda.empty_cache()


def print_summary():
    groups: dict = {}
    for r in RESULTS["bench"]:
        if r.get("status") == "ok" and r["provider"] != "torch" and r.get("ratio"):
            groups.setdefault((r["mode"], r["pass"], r["balance"]), []).append(r["ratio"])
            groups.setdefault((r["mode"], r["pass"], "all"), []).append(r["ratio"])
    print("\ngeomean ratio torch._grouped_mm time / TRITON time (above 1: TRITON faster)")
    print(f"{'mode':6s} {'pass':6s} {'balance':9s} {'cases':>5s} {'geomean':>8s}")
    for (mode, pass_, bal), v in sorted(groups.items()):
        print(f"{mode:6s} {pass_:6s} {bal:9s} {len(v):5d} {report.geomean(v):8.3f}")
    misses = [r for r in RESULTS["bench"] if r.get("status") == "ok" and r["provider"] != "torch"
              and r.get("ratio") and r["ratio"] < 1.0 and r["mode"] == "graph"]
    if misses:
        print("\nshapes below 1.0x (graph mode):")
        for r in misses:
            print(f"  {r['case']:58s} {r['ratio']:.2f}x  path={r['path']}")


# -- 5. config sweep --------------------------------------------------------------------------------

C = configs.GroupedConfig
FWD_CANDS = [
    C(128, 256, 64, 8, 8, 3, flatten=True, subtile=True), C(128, 256, 64, 8, 8, 3),
    C(128, 256, 64, 8, 8, 3, subtile=True), C(128, 256, 64, 8, 8, 4, subtile=True),
    C(128, 128, 64, 8, 4, 4), C(128, 128, 64, 8, 4, 4, flatten=True, subtile=True), C(128, 128, 64, 8, 8, 4),
    C(256, 128, 64, 8, 8, 3, flatten=True, subtile=True), C(64, 128, 64, 4, 4, 4),
]
VARK_CANDS = [
    C(128, 256, 64, 8, 8, 3, subtile=True), C(128, 256, 64, 8, 8, 3), C(128, 256, 64, 8, 8, 4, subtile=True),
    C(128, 128, 64, 8, 4, 4), C(128, 128, 64, 8, 4, 4, subtile=True), C(256, 128, 64, 8, 8, 3, subtile=True),
    C(128, 256, 32, 8, 8, 5, subtile=True), C(128, 128, 128, 8, 8, 3),
]


def sweep(deadline):
    gen = torch.Generator(device=DEV).manual_seed(5)
    picks = [("deepseek-v3", "gate_up", "balanced"), ("deepseek-v3", "down", "skewed"),
             ("qwen3-30b-a3b", "gate_up", "balanced"), ("qwen3-30b-a3b", "down", "skewed"),
             ("mixtral-8x7b", "gate_up", "balanced")]
    for case in suite.cases(8192, False, None):
        if (case.model, case.layer, case.balance) not in picks:
            continue
        if time.time() > deadline:
            log("time budget reached: sweep stopped")
            return
        p, q, lens, offs, _ = suite.make_inputs(case, DEV, torch.bfloat16, gen)
        args = suite.turbo_args(case.pass_, p, q, lens, offs)
        run = gl.grouped_gemm_variable_k if case.pass_ == "wgrad" else gl.grouped_gemm
        g = len(case.lens)
        if case.pass_ == "wgrad":
            default = configs.pick_variable_k("sm90", case.in_f, case.out_f, g, gl._device_facts(p)[1], 2, 2)
        else:
            n, k = (case.out_f, case.in_f) if case.pass_ == "fwd" else (case.in_f, case.out_f)
            default = configs.pick_fwd("sm90", case.m, n, k, g, gl._device_facts(p)[1], 2)
        log(f"sweep {case.label}: the table picks {default}")
        best = None
        for cfg in VARK_CANDS if case.pass_ == "wgrad" else FWD_CANDS:
            try:
                t = _time_cfg(run, args, cfg, p)
            except Exception as exc:
                log(f"sweep {case.label} {cfg} failed: {type(exc).__name__}: {str(exc)[:160]}")
                RESULTS["sweep"].append({"case": case.label, "config": cfg.__dict__, "error": str(exc)[:300]})
                continue
            tf = case.flops / t / 1e9
            RESULTS["sweep"].append({"case": case.label, "pass": case.pass_, "config": cfg.__dict__, "ms": t,
                                     "tflops": tf})
            if best is None or tf > best[1]:
                best = (cfg, tf)
            log(f"sweep {case.label:58s} {cfg} {tf:7.1f} TFLOP/s")
        if best:
            log(f"sweep best {case.label}: {best[0]} {best[1]:.1f} TFLOP/s")
            RESULTS["sweep"].append({"case": case.label, "pass": case.pass_, "table_pick": default.__dict__,
                                     "best": best[0].__dict__, "best_tflops": best[1]})


def _time_cfg(run, args, cfg, tensor):
    """Median ms of ``run(args, cfg)`` replayed from a CUDA graph."""
    run(args, cfg)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(args, cfg)
    return timing.measure(lambda g, _t: g.replay(), [(graph, tensor)], warmup=5, iters=30).median_ms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--check-only", action="store_true")
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--sweep", action="store_true", help="also time candidate tile configs on a few shapes")
    p.add_argument("--sweep-only", action="store_true", help="only the torch convention check and the sweep")
    p.add_argument("--models", nargs="*", help="restrict model checks and timing (default: all)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--max-minutes", type=float, default=9.0, help="stop timing (cleanly) after this long")
    args = p.parse_args()
    deadline = T0 + args.max_minutes * 60
    OUT.update(path=args.out, deadline=deadline)
    RESULTS["env"] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                      "cuda": torch.version.cuda, "python": platform.python_version(), "argv": sys.argv,
                      "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    log(RESULTS["env"])
    check_torch_convention()
    save(args.out)
    if args.sweep_only:
        sweep(deadline)
        save(args.out)
        log(f"wrote {args.out}")
        return 0
    if not args.skip_check:
        check_triton(args.models)
        save(args.out)
        check_graphs()
        save(args.out)
    if not args.check_only:
        bench(args.models, args.warmup, args.iters, deadline)
        save(args.out)
        print_summary()
        if args.sweep:
            sweep(deadline)
            save(args.out)
    fails = [r for r in RESULTS["checks"] + RESULTS["graphs"] if not r.get("ok")]
    log(f"{len(fails)} check failures; wrote {args.out}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
