"""Per-call host overhead of ``turbo_core.dispatch.call`` against calling the selected kernel directly.

For each primitive (``gemm``; ``grouped_gemm`` too with ``--prims gemm,grouped_gemm``) on tiny
tensors, times loops of ``--iters`` calls of each of the following, round-robin for ``--repeat``
rounds (median and min over the rounds, microseconds per call; round-robin so that a busy machine
slows every metric alike):

* ``kernel``: ``Kernel.run(args)`` of the backend that dispatch selects (no validation, no selection);
* ``call``: ``dispatch.call(primitive, args)`` (validation + selection + stats + the same kernel);
* ``overhead`` = call - kernel;
* the parts: ``check_args`` (validation), ``select`` (the full, uncached selection order),
  ``args_key`` (the auto-tuner's call signature), and when the dispatcher has a selection cache
  ``signature`` (the cache's call signature) and ``cached_select`` (a cache hit);
* ``torch``: the plain PyTorch expression, for scale (``a @ b``; a loop over groups for grouped).

With a real kernel, ``call - kernel`` also carries the kernel's own timing noise (on a small shared
CPU it swings by tens of microseconds), so the script also registers a benchmark-only backend
``NOOPBENCH`` whose kernels return at once, makes it the primitive's default for the run (the
defaults table, restored after: the selection goes through pin, code settings, environment and
default like an ordinary call) and reports ``noop_kernel``, ``noop_call`` and ``noop_overhead``:
the dispatch overhead alone.

On a GPU the timings are host time per call with one synchronize after each loop: with tiny
tensors that is the launch path, which is what eager mode pays per call.

Usage (repository root, no install needed):
  CPU:  PYTHONPATH=packages/turbo-core/src TURBO_PLUGINS=turbo_core.reference.plugin \
        python3 benchmarks/scripts/dispatch_overhead.py [--prims gemm,grouped_gemm]
  GPU:  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
        TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
        python3 benchmarks/scripts/dispatch_overhead.py --device cuda --out dispatch_overhead.json
``--out FILE`` writes the rows as JSON (primitive, device, backend, how, metric, median_us, min_us).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import types

import torch


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    p.add_argument("--prims", default="gemm", help="comma-separated: gemm, grouped_gemm")
    p.add_argument("--iters", type=int, default=2000, help="calls per timed loop")
    p.add_argument("--repeat", type=int, default=15, help="timed rounds (each times every metric once)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU intra-op threads)")
    p.add_argument("--out", help="write the rows as JSON to this file")
    return p.parse_args()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_all(fns: dict, device: torch.device, iters: int, repeat: int) -> dict:
    """``{name: (median, min)}`` microseconds per call: round-robin, ``repeat`` rounds each timing a
    loop of ``iters`` calls of every function, so that all of them see the same machine load."""
    for fn in fns.values():
        for _ in range(min(iters, 200)):
            fn()
    _sync(device)
    samples: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            _sync(device)
            samples[name].append((time.perf_counter() - start) / iters * 1e6)
    return {name: (statistics.median(v), min(v)) for name, v in samples.items()}


def _gemm_case(device: torch.device):
    from turbo_core.dispatch.specs.gemm import GemmArgs

    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    a = torch.randn(16, 32, device=device, dtype=dtype)
    b = torch.randn(32, 24, device=device, dtype=dtype)
    return GemmArgs(a, b), (lambda: a @ b)


def _grouped_gemm_case(device: torch.device):
    from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs

    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    lens = [8, 16, 8, 32]
    a = torch.randn(sum(lens), 32, device=device, dtype=dtype)
    b = torch.randn(len(lens), 32, 24, device=device, dtype=dtype)
    group_lens = torch.tensor(lens, device=device, dtype=torch.int64)
    group_offs = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device=device, dtype=torch.int64)
    starts = [0, *torch.tensor(lens).cumsum(0).tolist()]

    def torch_ref():
        return [a[starts[g]:starts[g + 1]] @ b[g] for g in range(len(lens))]

    return GroupedGemmArgs(a, b, group_lens, group_offs), torch_ref


CASES = {"gemm": _gemm_case, "grouped_gemm": _grouped_gemm_case}
NOOP = "NOOPBENCH"


def _noop(args):
    return None


def _install_noop_plugin(prims: list[str]) -> None:
    """A plugin module (named in TURBO_PLUGINS before the host loads) whose backend NOOPBENCH
    serves ``prims`` with a kernel that does nothing; last in the fallback order, never tuned."""
    from turbo_core.plugins import BackendInfo, Kernel, hookimpl

    mod = types.ModuleType("dispatch_overhead_noop_plugin")

    @hookimpl
    def turbo_backend_info():
        return BackendInfo(name=NOOP, package="dispatch-overhead-benchmark", version="0",
                           description="kernels that do nothing (measures dispatch overhead)")

    @hookimpl
    def turbo_register_kernels(register):
        for name in prims:
            register(Kernel(name, NOOP, _noop, autotune=False, priority=-1000))

    mod.turbo_backend_info = turbo_backend_info
    mod.turbo_register_kernels = turbo_register_kernels
    sys.modules[mod.__name__] = mod
    os.environ["TURBO_PLUGINS"] = ",".join(p for p in (os.environ.get("TURBO_PLUGINS", ""), mod.__name__) if p)


def main() -> int:
    opts = _parse()
    device = torch.device(opts.device)
    torch.set_num_threads(opts.threads)
    names = [p.strip() for p in opts.prims.split(",") if p.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown primitive {unknown[0]!r}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    _install_noop_plugin(names)
    from turbo_core.dispatch import defaults, dispatcher
    from turbo_core.dispatch.primitives import args_key, get_primitive
    from turbo_core.plugins.host import get_host

    rows = []
    print(f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
          f"device {device}, {opts.iters} calls x {opts.repeat} rounds (median / min us per call)")
    for name in names:
        args, torch_ref = CASES[name](device)
        prim = get_primitive(name)
        sel = dispatcher.select(prim, args)
        kernel = get_host().registry.kernel(name, sel.backend)
        parts = {
            "torch": torch_ref,
            "kernel": lambda: kernel.run(args),
            "call": lambda: dispatcher.call(name, args),
            "check_args": lambda: prim.check_args(args),
            "select": lambda: dispatcher.select(prim, args),
            "args_key": lambda: args_key(args),
        }
        cached = getattr(dispatcher, "cached_select", None)
        if cached is not None:
            from turbo_core.dispatch.selection_cache import call_signature

            parts["signature"] = lambda: call_signature(args)
            parts["cached_select"] = lambda: cached(prim, args)
        results = _time_all(parts, device, opts.iters, opts.repeat)
        results["overhead"] = (results["call"][0] - results["kernel"][0],
                               results["call"][1] - results["kernel"][1])
        noop = get_host().registry.kernel(name, NOOP)
        saved = defaults.DEFAULTS.get(name)
        defaults.DEFAULTS[name] = {"*": (NOOP,)}
        try:
            noop_sel = dispatcher.select(prim, args)
            assert (noop_sel.backend, noop_sel.how) == (NOOP, "default"), noop_sel
            noop_results = _time_all({"noop_kernel": lambda: noop.run(args),
                                      "noop_call": lambda: dispatcher.call(name, args)},
                                     device, opts.iters, opts.repeat)
        finally:
            if saved is None:
                defaults.DEFAULTS.pop(name, None)
            else:
                defaults.DEFAULTS[name] = saved
        results.update(noop_results)
        results["noop_overhead"] = (results["noop_call"][0] - results["noop_kernel"][0],
                                    results["noop_call"][1] - results["noop_kernel"][1])
        print(f"\n{name} -> {sel.backend} ({sel.how})")
        for metric, (med, low) in results.items():
            print(f"  {metric:<14} {med:9.2f} {low:9.2f}")
            rows.append({"primitive": name, "device": str(device), "backend": sel.backend, "how": sel.how,
                         "metric": metric, "median_us": med, "min_us": low})
    if opts.out:
        env = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
               "device": str(device), "iters": opts.iters, "repeat": opts.repeat}
        if device.type == "cuda":
            env["gpu"] = torch.cuda.get_device_name(device)
        with open(opts.out, "w") as fh:
            json.dump({"environment": env, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
