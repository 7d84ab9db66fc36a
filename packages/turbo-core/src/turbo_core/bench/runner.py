"""Runs a suite: every provider on every case, side by side, and returns JSON-ready rows.

Row keys: suite, case, model, layer, pass, layout, m, n, k, dtype, provider, status ("ok",
"declined: <reason>", "error: <message>"), median_ms, p10_ms, p90_ms, tflops, ratio (to the
``torch`` baseline on the same case), peak_fraction (of the datasheet dense peak), max_rel_err
(``max|out - ref| / max|ref|`` against float64 math).
"""

from __future__ import annotations

import platform as _platform

import torch

from turbo_core.bench import timing
from turbo_core.bench.suites import gemm as gemm_suite

#: Datasheet dense bf16 TFLOP/s by device-name substring.
PEAK_BF16 = {"H200": 989.0, "H100": 989.0, "MI300X": 1307.0, "MI325X": 1307.0, "MI355X": 2500.0, "MI350X": 2300.0}


def peak_tflops(device_name: str) -> float | None:
    for key, value in PEAK_BF16.items():
        if key in device_name:
            return value
    return None


def environment(device: str) -> dict:
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip,
            "triton": version("triton"), "python": _platform.python_version(), "device": device}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    return info


def gemm_backends() -> list[str]:
    from turbo_core.plugins.host import get_host

    registry = get_host().registry
    names = []
    for kernel in registry.kernels_for("gemm"):
        if registry.backend(kernel.backend).unavailable_reason() is None:
            names.append(kernel.backend)
    return names


def run_gemm(*, quick: bool, tokens: int, models: list[str] | None, providers: list[str] | None,
             include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    from turbo_core.dispatch.dispatcher import decline_reason
    from turbo_core.dispatch.primitives import get_primitive
    from turbo_core.platform import platform_of

    dtype = torch.bfloat16
    prim = get_primitive("gemm")
    backends = [b for b in gemm_backends() if include_reference or b != "TORCH"]
    table = [("torch", gemm_suite.torch_provider)] + [(f"turbo:{b}", gemm_suite.turbo_provider(b)) for b in backends]
    if providers:
        table = [(name, fn) for name, fn in table if name in providers]
    gen = torch.Generator(device=device).manual_seed(0)
    peak = peak_tflops(torch.cuda.get_device_name()) if device == "cuda" else None
    all_cases = list(gemm_suite.cases(tokens, quick, models))
    task = progress.add_task("gemm", total=len(all_cases) * len(table)) if progress else None
    rows: list[dict] = []
    for case in all_cases:
        first = gemm_suite.make_inputs(case, device, dtype, gen)
        per_set = first[0].numel() * first[0].element_size() + first[1].numel() * first[1].element_size()
        sets = [first] + [gemm_suite.make_inputs(case, device, dtype, gen)
                          for _ in range(timing.copies_needed(per_set) - 1)]
        ref = gemm_suite.reference(*first)
        ref_scale = ref.abs().max().item() or 1.0
        base_ms = None
        for name, fn in table:
            row = {"suite": "gemm", "case": case.label, "model": case.model, "layer": case.layer,
                   "pass": case.pass_, "layout": case.layout, "m": case.m, "n": case.n, "k": case.k,
                   "dtype": "bf16", "provider": name}
            if name.startswith("turbo:"):
                a, b, ta, tb = first
                from turbo_core.dispatch.specs.gemm import GemmArgs

                reason = decline_reason(prim, name.split(":", 1)[1], GemmArgs(a, b, ta, tb), platform_of(a.device))
                if reason:
                    rows.append({**row, "status": f"declined: {reason}"})
                    if progress:
                        progress.advance(task)
                    continue
            try:
                out = fn(*first)
                err = (out.double() - ref).abs().max().item() / ref_scale
                t = timing.measure(fn, sets, warmup=warmup, iters=iters)
            except Exception as exc:  # one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                if progress:
                    progress.advance(task)
                continue
            tflops = case.flops / t.median_ms / 1e9
            if name == "torch":
                base_ms = t.median_ms
            rows.append({**row, "status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "tflops": tflops, "ratio": (base_ms / t.median_ms) if base_ms else None,
                         "peak_fraction": (tflops / peak) if peak else None, "max_rel_err": err})
            if progress:
                progress.advance(task)
        del sets, ref
    return rows
