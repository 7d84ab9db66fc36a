"""``moe_permute`` forward at small token counts: the three-launch scatter against the one-launch search
path at several ``search_rows`` (rows a program; each step compares them with ``4096 / search_rows``
row-map entries), beside eager PyTorch (the ``turbo bench moe`` suite's torch expression). Every TRITON
output is bit-compared with the TORCH reference first; device time from CUDA graphs (20 calls a graph,
median of 15 replays). Sets ``turbo_triton.moe.permute.SEARCH_MAX`` / the default rows from data.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/moe_permute_search_sweep.py --out sweep.json [--tokens 1 2 4 8 16 32 64]

Rows: ``{"model", "tokens", "entries" (T x E), "variant", "us", "x_eager"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from turbo_core.bench.suites import moe as moe_suite
from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.manager import use_backend
from turbo_triton.moe import permute

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timing import graph_us  # noqa: E402

VARIANTS = [("scatter", {"search": False})] + [(f"search-r{r}", {"search": True, "search_rows": r})
                                               for r in (16, 8, 4, 2, 1)]


def _host_us(fn) -> list[float]:
    t0 = time.perf_counter()
    fn()
    return [(time.perf_counter() - t0) * 1e6]


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--models", default="deepseek-v3,qwen3-235b-a22b,mixtral-8x7b")
    p.add_argument("--max-entries", type=int, default=16384, help="skip search variants above this T x E")
    p.add_argument("--smoke", action="store_true", help="the CPU interpreter, host timing: checks the script only")
    args = p.parse_args()
    dev = "cpu" if args.smoke else "cuda"
    timer = _host_us if args.smoke else graph_us
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for t in args.tokens:
        for case in moe_suite.cases(t, False, args.models.split(",")):
            if case.op != "moe_permute" or case.pass_ != "fwd":
                continue
            inputs = moe_suite.make_inputs(case, dev, gen)
            name, pargs = moe_suite.turbo_args(case, inputs)
            entries = t * ((pargs.row_id_map.shape[1] - 1) // 2)
            with use_backend("TORCH"):
                want = call(name, pargs)
            eager = moe_suite.torch_provider(case, False)(inputs)
            t_eager = timer(eager)
            e_us = t_eager[len(t_eager) // 2]
            for vname, kw in VARIANTS:
                if kw.get("search") and entries > args.max_entries:
                    continue
                got = permute.moe_permute(pargs, **kw)
                same = all((a is None and b is None) or torch.equal(_bits(a), _bits(b))
                           for a, b in zip(got, want, strict=True))
                row = {"model": case.model, "tokens": t, "entries": entries, "variant": vname, "bit_exact": same}
                if same:
                    ts = timer(lambda kw=kw: permute.moe_permute(pargs, **kw))
                    row.update({"us": ts[len(ts) // 2], "eager_us": e_us, "x_eager": e_us / ts[len(ts) // 2]})
                    print(f"{case.model:16} T={t:4d} entries={entries:6d} {vname:11} {row['us']:7.2f} us  "
                          f"eager {e_us:6.2f} us  x{row['x_eager']:.2f}", flush=True)
                else:
                    print(f"{case.model:16} T={t:4d} {vname:11} NOT bit-exact", flush=True)
                rows.append(row)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu (smoke)"}
    with open(args.out, "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
