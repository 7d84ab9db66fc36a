"""Where the grouped MX col-wise FP8 dequantize loses to the dense one (GPU machine).

The dense MX col-wise dequantize (``q [N, M] -> out [M, N]``, tiles of 128 data rows x 64 columns
stored transposed) runs at about 80% of copy on the H200; the grouped one
(``grouped_mx_dequant_trans_kernel``: the same tiles over the padded data ``[N, M_pad]``, stored to
the output rows ``inv[p]``) at about 30%. This times minimal kernels on the same padded data, one
change at a time:

* ``ident``: out row = p (an output of ``M_pad`` rows), no map: the dense kernel's work;
* ``ident-mask``: as ``ident``, masked by ``inv[p] >= 0`` (a loaded, data-dependent mask);
* ``inv``: out row = ``inv[p]`` (gathered row addresses), masked by ``inv[p] >= 0``;
* ``inv-back``: ``inv`` plus the check ``map[inv[p]] == p`` (the grouped kernel's main programs);
* ``grouped``: ``grouped_dequantize_fp8(..., fast=True)`` itself (map kernel and row programs too);
* ``maps``: its map kernel alone (``_unpad_map(..., inverse=True)``);
* ``fix`` / ``main``: ``grouped_mx_dequant_fix_kernel`` (the rows of no group) and
  ``grouped_mx_dequant_trans_kernel`` alone, on precomputed maps.

Each variant's output rows are compared with the grouped op's (bit for bit); bytes as
``grouped_quant_fast_gpu.py`` counts them (data and scales read, output written).

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
    python3 benchmarks/scripts/grouped_mx_col_dequant_probe.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os

P = argparse.ArgumentParser(description=__doc__.split("\n")[0])
P.add_argument("--out", required=True)
P.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter")
ARGS = P.parse_args()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from turbo_core.dispatch.specs import quantization as qs  # noqa: E402
from turbo_core.reference import quantization as ref  # noqa: E402
from turbo_triton.quantization import grouped  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"


@triton.jit
def _probe_kernel(x_ptr, s_ptr, map_ptr, inv_ptr, out_ptr, C, P, BM: tl.constexpr, BN: tl.constexpr,
                  MODE: tl.constexpr):
    """MODE 0 ident, 1 ident-mask, 2 inv, 3 inv-back (see the module doc); fp32 math, bf16 out."""
    pid = tl.program_id(0)
    tiles_p = tl.cdiv(P, BN)
    tn = pid % tiles_p
    tm = pid // tiles_p
    cs = tm.to(tl.int64) * BM + tl.arange(0, BM)
    ps = tn.to(tl.int64) * BN + tl.arange(0, BN)
    cm = cs < C
    ok = cm[:, None] & (ps < P)[None, :]
    q = tl.load(x_ptr + cs[:, None] * P + ps[None, :], mask=ok, other=0.0).to(tl.float32)
    blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
    byte = tl.load(s_ptr + cs[:, None] * (P // 32) + blk[None, :], mask=cm[:, None], other=127).to(tl.int32)
    scale = tl.broadcast_to(tl.exp2((byte - 127).to(tl.float32))[:, :, None], (BM, BN // 32, 32))
    v = (q * tl.reshape(scale, (BM, BN))).to(tl.bfloat16)
    if MODE == 0:
        rows = ps
        w = ps < P
    else:
        r = tl.load(inv_ptr + ps, mask=ps < P, other=-1).to(tl.int64)
        w = r >= 0
        rows = ps if MODE == 1 else r
        if MODE == 3:
            w = w & (tl.load(map_ptr + r, mask=w, other=-1).to(tl.int64) == ps)
    tl.store(out_ptr + rows[:, None] * C + cs[None, :], tl.trans(v), mask=w[:, None] & cm[None, :])


def _ms(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    m, n, g = (600, 96, 4) if ARGS.smoke else (16384, 7168, 32)
    gen = torch.Generator().manual_seed(g)
    w = torch.rand(g, generator=gen) ** 3
    lens = (w / w.sum() * (m - m // 20)).floor().to(torch.int64).to(DEV)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64, device=DEV), lens.cumsum(0)])
    x = (torch.randn(m, n, device=DEV) * 3).to(torch.bfloat16)
    q, s, _, op = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(x, torch.float8_e4m3fn, "MX_BLOCKWISE",
                                                                      lens, offs, 0, 32))
    d8 = qs.GroupedDequantizeFp8Args(q, s, torch.bfloat16, "MX_BLOCKWISE", offs, op, m, 0, 32)
    want = grouped.grouped_dequantize_fp8(d8, fast=True)
    c, p = q.shape
    idx, inv = grouped._unpad_map(offs, op, m, p, inverse=True)
    sb = s.view(torch.uint8)
    src = torch.empty(1 << (16 if ARGS.smoke else 30), dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / _ms(lambda: dst.copy_(src)) / 1e6
    moved = want.numel() * 2 + q.numel() + sb.numel()
    rows = []
    bm, bn = (128, 64) if DEV == "cuda" else (32, 32)
    grid = (triton.cdiv(c, bm) * triton.cdiv(p, bn),)
    names = ["ident", "ident-mask", "inv", "inv-back"]
    for mode, name in enumerate(names):
        out = torch.zeros((p if mode < 2 else m, c), dtype=torch.bfloat16, device=DEV)

        def fn(out=out, mode=mode):
            _probe_kernel[grid](q, sb, idx, inv, out, c, p, BM=bm, BN=bn, MODE=mode, num_warps=8)

        fn()
        got = out[idx.long().clamp(min=0)] if mode < 2 else out  # output row r sits at row idx[r] in ident*
        err = None if torch.equal(got.view(torch.int16)[idx >= 0], want.view(torch.int16)[idx >= 0]) else "differs"
        rows.append((name, _ms(fn), err))
    rows.append(("grouped", _ms(lambda: grouped.grouped_dequantize_fp8(d8, fast=True)), None))
    rows.append(("maps", _ms(lambda: grouped._unpad_map(offs, op, m, p, inverse=True)), None))
    from turbo_triton.quantization import common, grouped_kernels

    fmt = common.fmt_constexprs(q.dtype)
    consts = dict(MB=fmt["MB"], BIAS=fmt["BIAS"], FNUZ=fmt["FNUZ"], SOFT=fmt["SOFT"], ROUND_BF16=common.soft())
    out = torch.zeros((m, c), dtype=torch.bfloat16, device=DEV)
    o = out.view(torch.int16) if common.soft() else out
    fix = common.pick(m, c, 1, 1, cap_n=1024, target=65536, warps=8)

    def run_fix():
        grouped_kernels.grouped_mx_dequant_fix_kernel[common.grid(1, m, c, fix)](
            common.data_arg(q), sb, idx, inv, o, m, c, *q.stride(), *sb.stride(), BR=fix.block_m, BC=fix.block_n,
            GC=min(64, fix.block_n), **consts, num_warps=fix.num_warps)

    def run_main():
        grouped_kernels.grouped_mx_dequant_trans_kernel[(triton.cdiv(c, bm) * triton.cdiv(p, bn),)](
            common.data_arg(q), sb, idx, inv, o, c, p, *q.stride(), *sb.stride(), BM=bm, BN=bn, **consts,
            num_warps=8)

    run_fix()
    run_main()
    err = None if torch.equal(out.view(torch.int16), want.view(torch.int16)) else "differs"
    rows += [("fix", _ms(run_fix), err), ("main", _ms(run_main), err)]
    result = {"M": m, "N": n, "groups": g, "M_pad": p, "copy_GBps": copy,
              "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "torch": torch.__version__,
              "triton": triton.__version__, "rows": []}
    for name, ms, err in rows:
        gbps = moved / ms / 1e6
        result["rows"].append({"variant": name, "ms": ms, "GBps": gbps, "of_copy": gbps / copy, "error": err})
        print(f"{name:12s} {ms * 1e3:9.1f} us {gbps:7.0f} GB/s {100 * gbps / copy:6.1f}% of copy {err or 'same bits'}",
              flush=True)
    with open(ARGS.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
