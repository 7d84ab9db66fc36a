"""HBM bandwidth by read:write mix on the GPU machine: is a write-heavy op's ceiling the copy figure?

``moe_permute`` forward (each token row read once, written top-k times) and ``moe_unpermute``
backward (the same mix) reach 72-82% of the device-to-device copy bandwidth at 16384 tokens, while the
read-heavy gathers reach 97-101%. This times plain PyTorch kernels that move bytes in fixed mixes at
the same sizes, with the issue's byte accounting (bytes read + bytes written), beside ``copy_``:

* ``copy``: ``y.copy_(x)`` (1 read : 1 write), the reference figure of every table;
* ``fill``: ``y.fill_(1)`` (write only);
* ``sum``: ``x.sum(dtype=float32)`` (read only);
* ``bcast-K``: ``y.view(T, K, H).copy_(x[:, None].expand(T, K, H))`` (1 read : K writes), K = 2 and 8
  (Mixtral's and DeepSeek-V3's top-k);
* ``triton-copy``, ``triton-fill``, ``triton-bcast-K``: the same mixes by minimal Triton kernels (one
  program a row and 2048-column block: load it once, store it once or K times, or store a constant),
  since torch's broadcast copy takes a slow strided path and its figure says little about the HBM;
* ``triton-scatter-K``: ``triton-bcast-K`` with the K copies of row ``t`` stored to rows
  ``perm[t * K + k]`` of a random permutation, as ``moe_permute`` forward scatters a token to its
  experts' rows (the destination rows of one program are far apart).

Device time (``turbo_core.bench.timing.measure``, inputs rotated past L2), median of 30.

    PYTHONPATH=packages/turbo-core/src python3 benchmarks/scripts/write_mix_bandwidth.py --out mix.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

from turbo_core.bench import timing

BH = 2048  # columns a program


@triton.jit
def _bcast_kernel(x_ptr, y_ptr, perm_ptr, H, K: tl.constexpr, BH: tl.constexpr, FILL: tl.constexpr,
                  SCATTER: tl.constexpr):
    """``y[t * K + k, :] = x[t, :]`` for ``k < K`` (``SCATTER``: to row ``perm[t * K + k]``;
    ``FILL``: ``y[t, :] = 1`` and ``x`` unread)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BH + tl.arange(0, BH)
    ok = cols < H
    if FILL:
        tl.store(y_ptr + t * H + cols, tl.full((BH,), 1.0, y_ptr.dtype.element_ty), mask=ok)
    else:
        v = tl.load(x_ptr + t * H + cols, mask=ok)
        for k in tl.static_range(K):
            d = t * K + k
            if SCATTER:
                d = tl.load(perm_ptr + d).to(tl.int64)
            tl.store(y_ptr + d * H + cols, v, mask=ok)


def _triton_mix(x, y, k, fill=False, perm=None):
    t, h = (y.shape[0], y.shape[1]) if fill else x.shape
    _bcast_kernel[(t, triton.cdiv(h, BH))](y if fill else x, y, y if perm is None else perm, h, K=k, BH=BH,
                                           FILL=fill, SCATTER=perm is not None, num_warps=4)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (checks the script only)")
    args = p.parse_args()
    dev = "cpu" if args.smoke else "cuda"
    t, h = (64, 128) if args.smoke else (args.tokens, args.hidden)
    dt = torch.bfloat16
    rows = []
    result = {"command": "python3 " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
              "torch": torch.__version__, "gpu": None if args.smoke else torch.cuda.get_device_name(), "rows": rows}
    sets = 2 if args.smoke else 3

    def run(name, make, fn, nbytes, check=None):
        inputs = [make() for _ in range(sets)]
        if check is not None:  # the kernel moves the right bytes
            fn(*inputs[0])
            if not check(*inputs[0]):
                raise SystemExit(f"{name}: wrong output")
        ms = timing.measure(fn, inputs, warmup=5, iters=30).median_ms
        row = {"case": name, "T": t, "H": h, "bytes": nbytes, "ms": ms, "GBps": nbytes / ms / 1e6}
        rows.append(row)
        return row

    e = t * h * 2
    base = run("copy", lambda: (torch.randn(t, h, device=dev).to(dt), torch.empty(t, h, dtype=dt, device=dev)),
               lambda x, y: y.copy_(x), 2 * e)
    run("fill", lambda: (torch.empty(t, h, dtype=dt, device=dev),), lambda y: y.fill_(1), e)
    run("sum", lambda: (torch.randn(t, h, device=dev).to(dt),), lambda x: x.sum(dtype=torch.float32), e)
    for k in (2, 8):
        run(f"bcast-{k}", lambda k=k: (torch.randn(t, h, device=dev).to(dt),
                                      torch.empty(t * k, h, dtype=dt, device=dev)),
            lambda x, y, k=k: y.view(t, k, h).copy_(x[:, None].expand(t, k, h)), e + k * e)
    run("triton-fill", lambda: (torch.empty(t, h, dtype=dt, device=dev),), lambda y: _triton_mix(None, y, 1, True), e,
        check=lambda y: bool((y == 1).all()))
    for k in (1, 2, 8):
        run("triton-copy" if k == 1 else f"triton-bcast-{k}",
            lambda k=k: (torch.randn(t, h, device=dev).to(dt), torch.empty(t * k, h, dtype=dt, device=dev)),
            lambda x, y, k=k: _triton_mix(x, y, k), e + k * e,
            check=lambda x, y, k=k: torch.equal(y.view(t, k, h), x[:, None].expand(t, k, h)))
    for k in (2, 8):
        perm = torch.randperm(t * k, device=dev).to(torch.int32)
        run(f"triton-scatter-{k}",
            lambda k=k: (torch.randn(t, h, device=dev).to(dt), torch.empty(t * k, h, dtype=dt, device=dev)),
            lambda x, y, k=k, perm=perm: _triton_mix(x, y, k, perm=perm), e + k * e,
            check=lambda x, y, k=k, perm=perm: torch.equal(y[perm.long()].view(t, k, h), x[:, None].expand(t, k, h)))
    for r in rows:
        r["of_copy"] = r["GBps"] / base["GBps"]
        print(f"{r['case']:10s} {r['bytes'] / 1e6:9.1f} MB {r['ms'] * 1e3:9.1f} us {r['GBps']:7.0f} GB/s "
              f"{r['of_copy']:6.1%} of copy", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
