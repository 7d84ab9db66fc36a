"""GPU check and bandwidth of the TRITON MoE data-movement kernels (run on the GPU machine).

What it does, each result one JSON row (``ok`` plus the numbers or the error):

1. ``correct``: at DeepSeek-V3 (H 7168, 256 experts, top-8; also 32 local experts = EP 8),
   Qwen3 (H 4096 / 2048, 128 experts, top-8) and Mixtral (H 4096, 8 experts, top-2) shapes: ``moe_permute_preprocess`` (pad 0 / 16,
   no cap / a tight cap that overflows / Megatron capacity), ``moe_permute`` (bf16 with probs; fp8
   with per-128 scales), ``moe_unpermute`` (merging probs; permuted probs scattered back),
   ``moe_unpermute_bwd``, ``indices_to_multihot(_bwd)``, ``tokens_per_expert_to_mask``, each against
   the TORCH reference on the same GPU. Outputs land in memory poisoned with 0xFF bytes first (NaN in
   every float format), so a row the kernel forgot shows. Everything is bit-exact except
   ``grad_merging_probs`` (dot products; a different fp32 reduction order: checked to 1e-5 relative).
   The TRITON calls run under ``torch.cuda.set_sync_debug_mode("error")``: a host sync raises.
2. ``graph``: preprocess + permute + unpermute captured in a CUDA graph and replayed (no host sync).
3. ``bench``: median / p20 / p80 time (``triton.testing.do_bench``) and GB/s from an explicit byte
   count (inputs read once, outputs written once) for TRITON, the TORCH reference (eager) and
   ``torch.compile`` of the reference; the device-to-device copy bandwidth for scale.

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/moe_permute_gpu_check.py --out moe_permute_gpu_check.json [--quick]
  [--shapes mixtral,odd] [--no-graph]
Exit status 0 when every correctness row is ok.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback

import torch
import triton

from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
    TokensPerExpertToMaskArgs,
)
from turbo_core.reference import moe_permute as ref
from turbo_core.reference import moe_routing as ref_routing
from turbo_triton.moe import multihot, permute, permute_preprocess, unpermute

DEV = torch.device("cuda")
# (name, tokens, hidden, local experts, top-k)
SHAPES = [
    ("dsv3-ep1", 4096, 7168, 256, 8),
    ("dsv3-ep1", 16384, 7168, 256, 8),
    ("dsv3-ep8", 16384, 7168, 32, 8),
    ("qwen3-235b", 8192, 4096, 128, 8),
    ("qwen3-235b", 32768, 4096, 128, 8),
    ("qwen3-30b", 16384, 2048, 128, 8),
    ("mixtral", 4096, 4096, 8, 2),
    ("odd", 777, 1000, 7, 3),
    # small batches: moe_permute's one-launch search path (T x E <= turbo_triton.moe.permute.SEARCH_MAX)
    ("dsv3-ep1", 1, 7168, 256, 8),
    ("dsv3-ep1", 16, 7168, 256, 8),
    ("mixtral", 300, 4096, 8, 2),
]
ROWS: list[dict] = []


def _row(kind: str, **kw) -> dict:
    r = {"kind": kind, **kw}
    ROWS.append(r)
    print(json.dumps(r), flush=True)
    return r


def _poison() -> None:
    """Fill the caching allocator's free memory with 0xFF (NaN in every float format)."""
    torch.cuda.synchronize()
    free = torch.cuda.mem_get_info()[0]
    blob = torch.empty(int(free * 0.6), dtype=torch.uint8, device=DEV).fill_(0xFF)
    del blob


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def _inputs(t, e, k, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    scores = torch.rand((t, e), generator=g, device=DEV)
    idx = scores.topk(k, dim=1).indices.to(torch.int32)
    if t > 3:
        idx[1, 0] = -1  # a dropped slot
        idx[2, -1] = idx[2, 0]  # a repeated id
    probs = torch.rand((t, k), generator=g, device=DEV)
    return idx, probs


def _triton(fn, *a, **kw):
    """``fn`` once to compile its kernels, then again into poisoned memory with host syncs forbidden."""
    fn(*a, **kw)
    _poison()
    torch.cuda.set_sync_debug_mode("error")
    try:
        return fn(*a, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def check(name, t, h, e, k) -> None:
    idx, probs = _inputs(t, e, k)
    fails = []
    configs = [dict(pad_multiple=0), dict(pad_multiple=16), dict(pad_multiple=16, num_permuted_tokens=t * k // 2),
               dict(expert_capacity=max(1, t * k // e // 2)), dict(pad_multiple=0, probs_layout="topk")]
    for cfg in configs:
        for emap in (idx, ref_routing.indices_to_multihot(IndicesToMultihotArgs(idx, probs, e))[0]):
            if emap.dtype == torch.bool and cfg.get("probs_layout") == "topk":
                continue
            a = MoePermutePreprocessArgs(emap, e, **cfg)
            got = _triton(permute_preprocess.moe_permute_preprocess, a)
            want = ref.moe_permute_preprocess(a)
            if not all(_same(x, y) for x, y in zip(got, want, strict=True)):
                fails.append(f"preprocess {cfg} {emap.dtype}")
    rmap, tpe, over, _ = ref.moe_permute_preprocess(MoePermutePreprocessArgs(idx, e, pad_multiple=16,
                                                                             probs_layout="topk"))
    n = int(tpe.sum())
    x = torch.randn((t, h), device=DEV, dtype=torch.bfloat16)
    for args in (MoePermuteArgs(x, rmap, n, None, probs),
                 MoePermuteArgs(x.to(torch.float8_e4m3fn), rmap, n,
                                torch.rand((t, triton.cdiv(h, 128)), device=DEV), probs)):
        got = _triton(permute.moe_permute, args)
        if not all(_same(p, q) for p, q in zip(got, ref.moe_permute(args), strict=True)):
            fails.append(f"permute {args.tokens.dtype}")
    y = torch.randn((n, h), device=DEV, dtype=torch.bfloat16)
    pp = torch.rand((n,), device=DEV)
    ua = MoeUnpermuteArgs(y, rmap, pp, k, probs)
    got = _triton(unpermute.moe_unpermute, ua)
    want = ref.moe_unpermute(ua)
    exact = _same(got[0], want[0])  # expected on a GPU: fp32 sums in the same order, fp-fusion off
    if not _same(got[1], want[1]):
        fails.append("unpermute probs")
    if not exact and not torch.allclose(got[0].float(), want[0].float(), rtol=2 ** -8, atol=1e-6):
        fails.append(f"unpermute (max diff {(got[0].float() - want[0].float()).abs().max().item()})")
    gt = torch.randn((t, h), device=DEV, dtype=torch.bfloat16)
    ba = MoeUnpermuteBwdArgs(gt, y, rmap, probs)
    got = _triton(unpermute.moe_unpermute_bwd, ba)
    want = ref.moe_unpermute_bwd(ba)
    if not _same(got[0], want[0]):
        fails.append("unpermute_bwd grad_permuted")
    if not torch.allclose(got[1], want[1], rtol=1e-5, atol=1e-5 * float(gt.float().abs().mean() * h)):
        fails.append(f"unpermute_bwd grad_merging_probs (max diff {(got[1] - want[1]).abs().max().item()})")
    ma = IndicesToMultihotArgs(idx, probs, e)
    got = _triton(multihot.indices_to_multihot, ma)
    if not all(_same(p, q) for p, q in zip(got, ref_routing.indices_to_multihot(ma), strict=True)):
        fails.append("indices_to_multihot")
    mb = IndicesToMultihotBwdArgs(torch.randn((t, e), device=DEV), idx)
    if not _same(_triton(multihot.indices_to_multihot_bwd, mb), ref_routing.indices_to_multihot_bwd(mb)):
        fails.append("indices_to_multihot_bwd")
    tm = TokensPerExpertToMaskArgs(tpe, n + 100)
    if not _same(_triton(multihot.tokens_per_expert_to_mask, tm), ref_routing.tokens_per_expert_to_mask(tm)):
        fails.append("tokens_per_expert_to_mask")
    _row("correct", shape=name, T=t, H=h, E=e, K=k, ok=not fails, fails=fails, unpermute_bit_exact=exact)


def graph(t, h, e, k) -> None:
    idx, probs = _inputs(t, e, k)
    x = torch.randn((t, h), device=DEV, dtype=torch.bfloat16)
    cap = t * k + e * 16

    def step():
        rmap, _, _, _ = permute_preprocess.moe_permute_preprocess(
            MoePermutePreprocessArgs(idx, e, pad_multiple=16, num_permuted_tokens=cap, probs_layout="topk"))
        out, _, pp = permute.moe_permute(MoePermuteArgs(x, rmap, cap, None, probs))
        return unpermute.moe_unpermute(MoeUnpermuteArgs(out, rmap, pp, k, probs))[0]

    eager = step()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    g.replay()
    torch.cuda.synchronize()
    _row("graph", T=t, H=h, E=e, K=k, ok=_same(out, eager))


def _time(fn) -> tuple[float, float, float]:
    q = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
    return tuple(float(v) for v in q)


def _bench_op(op, shape, nbytes, impls) -> None:
    for impl, fn in impls.items():
        try:
            fn()
            ms, lo, hi = _time(fn)
            _row("bench", op=op, shape=shape, impl=impl, ms=ms, p20=lo, p80=hi, gbps=nbytes / ms / 1e6, ok=True)
        except Exception as exc:  # noqa: BLE001  (a failing peer is a row, not the end of the run)
            _row("bench", op=op, shape=shape, impl=impl, ok=False, error=repr(exc)[:300])


def bench(name, t, h, e, k) -> None:
    shape = f"{name} T{t} H{h} E{e} K{k}"
    idx, probs = _inputs(t, e, k, seed=1)
    pa = MoePermutePreprocessArgs(idx, e, pad_multiple=16, probs_layout="topk")
    rmap, tpe, _, _ = ref.moe_permute_preprocess(pa)
    n = int(tpe.sum())
    es = 2
    x = torch.randn((t, h), device=DEV, dtype=torch.bfloat16)
    y = torch.randn((n, h), device=DEV, dtype=torch.bfloat16)
    gt = torch.randn((t, h), device=DEV, dtype=torch.bfloat16)
    compiled = {}

    def comp(key, f):
        if key not in compiled:
            compiled[key] = torch.compile(f, dynamic=False)
        return compiled[key]

    pre_bytes = idx.numel() * 4 + rmap.numel() * 4 + e * 8
    _bench_op("moe_permute_preprocess", shape, pre_bytes, {
        "triton": lambda: permute_preprocess.moe_permute_preprocess(pa),
        "torch": lambda: ref.moe_permute_preprocess(pa),
        "torch.compile": lambda: comp("pre", lambda i: ref.moe_permute_preprocess(
            MoePermutePreprocessArgs(i, e, pad_multiple=16, probs_layout="topk")))(idx),
    })
    perm_bytes = t * h * es + n * h * es + rmap.numel() * 4 + probs.numel() * 4 + n * 4
    _bench_op("moe_permute", shape, perm_bytes, {
        "triton": lambda: permute.moe_permute(MoePermuteArgs(x, rmap, n, None, probs)),
        "torch": lambda: ref.moe_permute(MoePermuteArgs(x, rmap, n, None, probs)),
        "torch.compile": lambda: comp("perm", lambda a, r, p: ref.moe_permute(MoePermuteArgs(a, r, n, None, p)))(
            x, rmap, probs),
    })
    unp_bytes = n * h * es + t * h * es + rmap.numel() * 4 + probs.numel() * 4
    _bench_op("moe_unpermute", shape, unp_bytes, {
        "triton": lambda: unpermute.moe_unpermute(MoeUnpermuteArgs(y, rmap, merging_probs=probs)),
        "torch": lambda: ref.moe_unpermute(MoeUnpermuteArgs(y, rmap, merging_probs=probs)),
        "torch.compile": lambda: comp("unp", lambda a, r, p: ref.moe_unpermute(MoeUnpermuteArgs(a, r, merging_probs=p)))(
            y, rmap, probs),
    })
    bwd_bytes = t * h * es + 2 * n * h * es + rmap.numel() * 4 + 2 * probs.numel() * 4
    _bench_op("moe_unpermute_bwd", shape, bwd_bytes, {
        "triton": lambda: unpermute.moe_unpermute_bwd(MoeUnpermuteBwdArgs(gt, y, rmap, probs)),
        "torch": lambda: ref.moe_unpermute_bwd(MoeUnpermuteBwdArgs(gt, y, rmap, probs)),
        "torch.compile": lambda: comp("bwd", lambda g, a, r, p: ref.moe_unpermute_bwd(MoeUnpermuteBwdArgs(g, a, r, p)))(
            gt, y, rmap, probs),
    })


def copy_bandwidth() -> None:
    a = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    ms, lo, hi = _time(lambda: b.copy_(a))
    _row("copy", bytes=2 * a.numel(), ms=ms, gbps=2 * a.numel() / ms / 1e6, ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="correctness only (no timing)")
    ap.add_argument("--shapes", help="comma list of shape names (default: all), e.g. mixtral,odd")
    ap.add_argument("--no-graph", action="store_true", help="leave out the CUDA-graph replay check")
    opts = ap.parse_args()
    shapes = [sh for sh in SHAPES if not opts.shapes or sh[0] in opts.shapes.split(",")]
    _row("env", torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
         device=torch.cuda.get_device_name(), ok=True)
    for sh in shapes:
        try:
            check(*sh)
        except Exception:  # noqa: BLE001
            _row("correct", shape=sh[0], T=sh[1], ok=False, error=traceback.format_exc()[-2000:])
    if not opts.no_graph:
        try:
            graph(4096, 7168, 256, 8)
        except Exception:  # noqa: BLE001
            _row("graph", ok=False, error=traceback.format_exc()[-2000:])
    if not opts.quick:
        copy_bandwidth()
        for sh in shapes:
            bench(*sh)
    with open(opts.out, "w") as f:
        json.dump(ROWS, f, indent=1)
    print(f"\n{'op':<24} {'shape':<34} {'impl':<14} {'ms':>10} {'GB/s':>10}")
    for r in ROWS:
        if r["kind"] == "bench" and r["ok"]:
            print(f"{r['op']:<24} {r['shape']:<34} {r['impl']:<14} {r['ms']:>10.4f} {r['gbps']:>10.1f}")
    bad = [r for r in ROWS if r["kind"] in ("correct", "graph") and not r["ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
