"""Launch shapes of ``indices_to_multihot_bwd`` on the GPU machine, beside ``torch.compile``.

``grad_probs[t, k] = grad_multihot[t, indices[t, k]]`` where slot ``k`` is its id's first slot in the
row and the id lies in ``[0, E)``, else 0. Session 18 timed the kernel then shipped (``[BLOCK_T, K]``
tiles, 128 rows a program at top-8; ``tile_bwd_kernel`` here) at 0.68-0.85x compile (1.95-2.56 µs
against 1.64-1.91). This times, in one process and on the same tensors:

* ``tile BT/W``: that kernel at ``BLOCK_T`` rows a program and ``W`` warps;
* ``flat B/W``: ``multihot_kernels.multihot_bwd_kernel`` (shipped since this probe: 128/4), one slot
  ``(t, k)`` a lane, ``B`` slots a program (the layout compile's kernel has), the row's earlier slots
  reloaded (cached) and compared, unrolled;
* ``shipped``: the launcher as it stands; ``compile``: ``torch.compile`` of the TORCH reference.

Every variant is bit-compared with the reference first. Device time per call from a CUDA graph of 20
calls (``graph_timing.py``), median of 15 replays. Shapes: DeepSeek-V3 (256 experts, top 8), Qwen3
(128, top 8), Mixtral (8, top 2) at 1 to 16384 tokens.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/multihot_bwd_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform

P = argparse.ArgumentParser(description=__doc__.split("\n")[0])
P.add_argument("--out", required=True)
P.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter, no timing")
ARGS = P.parse_args()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from _bitcheck import compare  # noqa: E402  (benchmarks/scripts)

from turbo_core.dispatch.specs.moe import IndicesToMultihotBwdArgs  # noqa: E402
from turbo_core.reference import moe_routing as ref  # noqa: E402
from turbo_triton.moe import common, multihot  # noqa: E402
from turbo_triton.moe import multihot_kernels as kern  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
MODELS = {"DeepSeek-V3": (256, 8), "Qwen3": (128, 8), "Mixtral": (8, 2)}
TOKENS = (1, 16, 100) if ARGS.smoke else (1, 16, 128, 4096, 16384)
TILES = [(bt, w) for bt in (16, 32, 64, 128) for w in (1, 2, 4)]
FLATS = [(b, w) for b in (128, 256, 512, 1024) for w in (1, 2, 4)]
RESULTS: dict = {"rows": []}


@triton.jit
def tile_bwd_kernel(idx_ptr, gd_ptr, out_ptr, T, E, K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """The kernel shipped until Session 18: ``[BLOCK_T, K]`` tiles, each slot's first-slot test against
    the row's earlier slots reloaded (unrolled), then the gather."""
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rm = rows < T
    ks = tl.arange(0, BLOCK_K)
    km = rm[:, None] & (ks < K)[None, :]
    ids = tl.load(idx_ptr + rows.to(tl.int64)[:, None] * K + ks[None, :], mask=km, other=-1).to(tl.int64)
    first = km & (ids >= 0) & (ids < E)
    for k in tl.static_range(K - 1):
        prev = tl.load(idx_ptr + rows.to(tl.int64) * K + k, mask=rm, other=-1).to(tl.int64)
        first = first & ~((ids == prev[:, None]) & (ks[None, :] > k))
    v = tl.load(gd_ptr + rows.to(tl.int64)[:, None] * E + ids, mask=first, other=0)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * K + ks[None, :], v, mask=km)


def tile_variant(args, bt, w):
    idx, gd = args.indices, args.grad_multihot
    t, k = idx.shape
    out = torch.empty((t, k), dtype=gd.dtype, device=gd.device)
    tile_bwd_kernel[(triton.cdiv(t, bt),)](
        idx, common.bits(gd), common.bits(out), t, gd.shape[1], K=k, BLOCK_T=bt,
        BLOCK_K=triton.next_power_of_2(k), num_warps=w)
    return out


def flat_variant(args, b, w):
    idx, gd = args.indices, args.grad_multihot
    t, k = idx.shape
    out = torch.empty((t, k), dtype=gd.dtype, device=gd.device)
    kern.multihot_bwd_kernel[(triton.cdiv(t * k, b),)](idx, common.bits(gd), common.bits(out), t * k, gd.shape[1],
                                                       K=k, BLOCK=b, num_warps=w)
    return out


def timed(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    from graph_timing import graph_us

    t = graph_us(fn)
    return t[len(t) // 2]


def main():
    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
           "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"}
    RESULTS["env"] = env
    print(env, flush=True)
    gen = torch.Generator(device=DEV).manual_seed(3)
    ok = True
    for model, (e, k) in MODELS.items():
        for t in TOKENS:
            idx = torch.rand(t, e, device=DEV, generator=gen).topk(k, dim=1).indices.to(torch.int32)
            if t > 2:  # a repeated id and an invalid slot, as routers may hand over
                idx[1, k - 1] = idx[1, 0]
                idx[2, 0] = -1
            gd = torch.randn(t, e, device=DEV, generator=gen)
            args = IndicesToMultihotBwdArgs(gd, idx)
            want = ref.indices_to_multihot_bwd(args)
            variants = [("shipped", lambda: multihot.indices_to_multihot_bwd(args))]
            variants += [(f"tile {bt}/{w}", lambda bt=bt, w=w: tile_variant(args, bt, w)) for bt, w in TILES]
            variants += [(f"flat {b}/{w}", lambda b=b, w=w: flat_variant(args, b, w)) for b, w in FLATS]
            if DEV == "cuda":
                torch._dynamo.reset()
                comp = torch.compile(ref.indices_to_multihot_bwd, dynamic=False)
                variants.append(("compile", lambda comp=comp: comp(args)))
            line = []
            for name, fn in variants:
                err = compare(fn(), want)
                us = float("nan") if err else timed(fn)
                RESULTS["rows"].append({"model": model, "experts": e, "topk": k, "tokens": t, "variant": name,
                                        "us": us, "error": err})
                ok &= err is None or name == "compile"
                line.append((us, name))
                if err:
                    print(f"{model} T={t} {name}: {err}", flush=True)
            best = sorted(x for x in line if x[0] == x[0])[:4]
            ship = [u for u, n in line if n == "shipped"][0]
            comp_us = [u for u, n in line if n == "compile"]
            print(f"{model:12s} T={t:5d} shipped {ship:6.2f} compile {comp_us[0] if comp_us else float('nan'):6.2f} "
                  f"best: " + ", ".join(f"{n} {u:.2f}" for u, n in best), flush=True)
    with open(ARGS.out, "w") as f:
        json.dump(RESULTS, f, indent=1)
    print("ALL OK" if ok else "MISMATCHES (see above)", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
