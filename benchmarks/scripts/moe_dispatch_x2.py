"""turbo-deepep's DEEP_EP dispatch/combine on two GPUs (NCCL): checks, CUDA-graph capture, GB/s.

Run from the repository root on the 2-GPU kind (nvidia-h200-x2):
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src:packages/turbo-deepep/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin,turbo_deepep.plugin \
  python3 benchmarks/scripts/moe_dispatch_x2.py --out moe_dispatch_x2.json [--parts check,graph,speed]

`--dry-run` runs the check and speed parts at a small shape on the CPU over gloo (a smoke test of
this script without GPUs; its timings mean nothing).

The small-shape exactness suite is the pytest run (same environment):
  python3 -m pytest -q packages/turbo-deepep/tests/test_all_to_all_distributed.py -k nccl

check: at the DeepSeek-V3 shape, dispatch -> identity -> combine gives x * (ranks the token went to)
  (exact in bf16 for 1-2 ranks); the num_worst_tokens mode receives the same rows as the exact mode
  then zero padding; FP8 bytes and scales arrive equal to the bf16 run's rows' sources.
hostprof: cProfile of 20 eager worst-mode dispatch calls and 20 combines (top 30 by own time).
split: host microseconds per eager worst-mode call in each step (route, pack, unpack, the barriers,
  the rest: turbo-core's dispatcher and glue), 20 back-to-back eager calls' time per call, and the
  GPU kernels of 10 round trips (torch.profiler).
graph: the num_worst_tokens dispatch + combine under torch.cuda.set_sync_debug_mode("error"), then
  captured in a CUDA graph, replayed on new inputs, compared with eager.
speed: DeepSeek-V3 per rank (T=4096, H=7168, top-8 of 256 experts, uniform routing): bf16 and FP8
  (e4m3 + [T, 56] fp32 scales) dispatch, bf16 combine, exact and num_worst_tokens modes; median of
  CUDA-event times (barrier before each), GB/s = token-row bytes sent by this rank / time, against a
  raw all_to_all_single of the same rows ([N, H] with the same splits) in the same run; the
  worst-mode dispatch + combine round trip eager and replayed from a CUDA graph (the GPU's own
  time), and the host time of one eager worst-mode dispatch and combine call (launches only), also
  through the opt-in lean launch path (TURBO_DEEPEP_LAUNCH=lean) for comparison.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

T, H, K, E = 4096, 7168, 8, 256


def _routing(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234 + rank)
    return torch.rand((T, E), generator=g).topk(K, dim=1).indices


def _time(fn, dev: torch.device, iters: int = 20, warmup: int = 5) -> tuple[float, float]:
    """(median, spread) in ms over iters, each started after a barrier (``turbo bench``'s rank timing)."""
    from turbo_core.bench.ranks import time_calls

    times = time_calls(fn, dev, warmup, iters)
    return statistics.median(times), max(times) - min(times)


def _parts(rank, world, group, parts, out, dev, transports=("symm", "collective")):
    from turbo_core import use_backend
    from turbo_core.bench import ranks
    from turbo_core.dispatch.launch import moe_dispatch as launch
    from turbo_deepep.all_to_all import launch as lean
    from turbo_deepep.all_to_all.layout import token_in_rank

    idx = _routing(rank).to(dev)
    x = torch.randn((T, H), device=dev).to(torch.bfloat16)
    probs = torch.rand((T, K), device=dev)
    n_ranks = token_in_rank(idx, E, world).sum(dim=1, keepdim=True).to(torch.bfloat16)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    x8, s8 = None, None
    if fp8 is not None:
        x8 = x.float().clamp(-448, 448).to(fp8)
        s8 = torch.rand((T, H // 128), device=dev)
    res = {}
    with use_backend("DEEP_EP"):
        def dispatch(xx, scales=None, worst=0):
            return launch.moe_dispatch(xx, scales, idx, probs, E, group, num_worst_tokens=worst)

        if "check" in parts:
            rx, _, ri, rp, tpe, h = dispatch(x)
            comb, _ = launch.moe_combine(rx, h)
            res["check_combine_exact"] = bool(torch.equal(comb, x * n_ranks))
            wx, _, wi, wp, wtpe, wh = dispatch(x, worst=world * T)
            n = rx.shape[0]
            res["check_worst_rows"] = bool(torch.equal(wx[:n], rx) and not wx[n:].any() and torch.equal(wi[:n], ri)
                                           and bool((wi[n:] == -1).all()) and torch.equal(wtpe, tpe))
            wcomb, _ = launch.moe_combine(wx, wh)
            res["check_combine_worst"] = bool(torch.equal(wcomb, x * n_ranks))
            if fp8 is not None:
                r8, rs8, *_ = dispatch(x8, s8)
                back, _ = launch.moe_combine(r8.float().to(torch.bfloat16), h)  # same layout as the bf16 run
                res["check_fp8_rows"] = bool(torch.equal(back, x8.float().to(torch.bfloat16) * n_ranks))
                res["check_fp8_scales_rows"] = int(rs8.shape[0]) == n
        if "graph" in parts:
            worst = world * T
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                wx, _, _, _, _, wh = dispatch(x, worst=worst)
                launch.moe_combine(wx, wh)
                res["graph_no_sync_eager"] = True
            except RuntimeError as exc:
                res["graph_no_sync_eager"] = f"sync: {exc}"
            finally:
                torch.cuda.set_sync_debug_mode("default")
            static_x = x.clone()
            captured = {}  # the last call's output: after ranks.graphed, the graph's own output tensor

            def static_round_trip():
                gx, _, _, _, _, gh = launch.moe_dispatch(static_x, None, idx, probs, E, group, num_worst_tokens=worst)
                captured["out"], _ = launch.moe_combine(gx, gh)

            replay = ranks.graphed(static_round_trip)
            if isinstance(replay, str):
                res["graph_replay_equal"] = replay
            else:
                static_x.copy_(torch.randn_like(x))
                replay()
                torch.cuda.synchronize()
                res["graph_replay_equal"] = bool(torch.equal(captured["out"], static_x * n_ranks))
        if "hostprof" in parts:  # where the host time of an eager worst-mode dispatch and combine goes
            import cProfile
            import io
            import pstats

            for _ in range(3):
                wx, _, _, _, _, wh = dispatch(x, worst=world * T)
                launch.moe_combine(wx, wh)
            torch.cuda.synchronize()
            for name, fn in (("dispatch", lambda: dispatch(x, worst=world * T)),
                             ("combine", lambda: launch.moe_combine(wx, wh))):
                prof = cProfile.Profile()
                t0 = time.perf_counter()
                prof.enable()
                for _ in range(20):
                    fn()
                prof.disable()
                res[f"host_us_{name}_profiled"] = round((time.perf_counter() - t0) / 20 * 1e6, 1)
                torch.cuda.synchronize()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
                res[f"host_profile_{name}"] = text.getvalue().splitlines()[:60]
        if "split" in parts:  # per stage: host time of each step of an eager worst-mode call, GPU kernel times
            res.update(_split(dispatch, launch, x, x8, s8, world * T, dev))
        for tr in (transports if "speed" in parts else []):
            os.environ["TURBO_DEEPEP_TRANSPORT"] = tr  # read per call: the same process measures both
            rx, _, _, _, _, h = dispatch(x)
            st = h.state
            res[f"{tr}: transport ran"] = st.transport
            n_send, n_recv = sum(st.send_splits), sum(st.recv_splits)
            send_rows = torch.randn((n_send, H), device=dev).to(torch.bfloat16)
            recv_rows = torch.empty((n_recv, H), device=dev, dtype=torch.bfloat16)

            def raw():
                dist.all_to_all_single(recv_rows, send_rows, list(st.recv_splits), list(st.send_splits), group=group)

            def raw_back():
                dist.all_to_all_single(send_rows, recv_rows, list(st.send_splits), list(st.recv_splits), group=group)

            worst = world * T
            send_w = torch.randn((world * T, H), device=dev).to(torch.bfloat16)
            recv_w = torch.empty_like(send_w)

            def raw_worst():
                dist.all_to_all_single(recv_w, send_w, group=group)

            cases = {"raw a2a exact bf16": (raw, n_send * H * 2), "raw a2a back bf16": (raw_back, n_recv * H * 2),
                     "raw a2a worst slots bf16": (raw_worst, world * T * H * 2),
                     "dispatch exact bf16": (lambda: dispatch(x), n_send * H * 2),
                     "dispatch worst bf16": (lambda: dispatch(x, worst=worst), n_send * H * 2),
                     "combine exact bf16": (lambda: launch.moe_combine(rx, h), n_recv * H * 2)}
            wx, _, _, _, _, wh = dispatch(x, worst=worst)
            cases["combine worst bf16"] = (lambda: launch.moe_combine(wx, wh), n_recv * H * 2)
            if fp8 is not None:
                send8 = send_rows.view(torch.uint8)[:, : H].contiguous()
                recv8 = torch.empty((n_recv, H), device=dev, dtype=torch.uint8)

                def raw8():
                    dist.all_to_all_single(recv8, send8, list(st.recv_splits), list(st.send_splits), group=group)

                cases["raw a2a exact fp8"] = (raw8, n_send * H)
                cases["dispatch exact fp8+scales"] = (lambda: dispatch(x8, s8), n_send * H)
                cases["dispatch worst fp8+scales"] = (lambda: dispatch(x8, s8, worst=worst), n_send * H)
            def round_trip():
                gx, _, _, _, _, gh = dispatch(x, worst=worst)
                launch.moe_combine(gx, gh)

            cases["dispatch+combine worst bf16 eager"] = (round_trip, (n_send + n_recv) * H * 2)
            if dev.type == "cuda":  # the same round trip replayed from a CUDA graph: the GPU's time alone
                replay = ranks.graphed(round_trip)
                if isinstance(replay, str):
                    raise RuntimeError(f"round trip: {replay}")
                cases["dispatch+combine worst bf16 graph"] = (replay, (n_send + n_recv) * H * 2)
            def host_us(fn, warm: int = 0) -> float:
                """Host time of one call (launches only, nothing waited for): the eager path's floor."""
                for _ in range(warm):
                    fn()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    fn()
                us = round((time.perf_counter() - t0) / 10 * 1e6, 1)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                return us

            # Triton's own launch path (the default), then the opt-in lean one (the compiled kernel's launcher)
            for env, tag in ((None, ""), ("lean", " (lean launch)")):
                if env:
                    os.environ[lean.ENV] = env
                lean.clear()
                res[f"{tr}: host_us_per_dispatch_worst{tag}"] = host_us(lambda: dispatch(x, worst=worst), warm=3)
                res[f"{tr}: host_us_per_combine_worst{tag}"] = host_us(lambda: launch.moe_combine(wx, wh))
                os.environ.pop(lean.ENV, None)
            lean.clear()
            for name, (fn, nbytes) in cases.items():
                ms, spread = _time(fn, dev)
                res[f"{tr}: {name}"] = {"ms": round(ms, 4), "spread_ms": round(spread, 4), "GB/s": round(nbytes / ms / 1e6, 1)}
            res["rows_sent"], res["rows_received"] = n_send, n_recv
    out[rank] = res


def _split(dispatch, launch, x, x8, s8, worst, dev) -> dict:
    """Host microseconds per eager worst-mode call spent in each step (wrapping the symmetric path's
    steps), the rest being turbo-core's dispatcher and the backend's glue; then the GPU kernels of
    10 back-to-back dispatch + combine round trips (torch.profiler), and the time per call of 20
    back-to-back eager calls (the host enqueuing ahead of the GPU, as in a training step)."""
    from turbo_deepep.all_to_all import fused, symm, symm_path

    spent: dict[str, float] = {}
    saved = []

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def wrap(mod, name, label):
        orig = getattr(mod, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0
        saved.append((mod, name, orig))
        setattr(mod, name, timed)

    for name in ("route", "pack_compacted", "unpack", "pack", "reduce"):
        wrap(fused, name, name)
    wrap(symm._TorchSymmetric, "barrier", "barrier")
    wrap(symm_path, "dispatch", "symm_path.dispatch (all steps)")
    wrap(symm_path, "combine", "symm_path.combine (all steps)")
    res = {}
    try:
        for case, fn in (("dispatch bf16", lambda: dispatch(x, worst=worst)),
                         ("dispatch fp8", lambda: dispatch(x8, s8, worst=worst)) if x8 is not None else (None, None),
                         ("combine bf16", None)):
            if case is None:
                continue
            if fn is None:
                wx, _, _, _, _, wh = dispatch(x, worst=worst)
                fn = lambda: launch.moe_combine(wx, wh)  # noqa: E731
            for _ in range(3):
                fn()
            sync()
            spent.clear()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            total = time.perf_counter() - t0
            sync()
            res[f"split {case}: host us per call"] = round(total / 20 * 1e6, 1)
            for label, sec in sorted(spent.items()):
                res[f"split {case}: {label} us"] = round(sec / 20 * 1e6, 1)
            if dev.type != "cuda":
                continue
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            for _ in range(20):
                fn()
            b.record()
            torch.cuda.synchronize()
            res[f"split {case}: back-to-back eager ms per call"] = round(a.elapsed_time(b) / 20, 4)
    finally:
        for mod, name, orig in saved:
            setattr(mod, name, orig)
    if dev.type != "cuda":
        return res
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            gx, _, _, _, _, gh = dispatch(x, worst=worst)
            launch.moe_combine(gx, gh)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60)
    res["split gpu kernels (10 round trips)"] = table.splitlines()
    return res


def _small() -> None:
    global T, H, E
    T, H, E = 64, 256, 16


def _worker(rank, world, store, parts, queue, dry_run):
    if dry_run:
        _small()
        dev = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    else:
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=300), device_id=dev)
    out = {}
    try:
        _parts(rank, world, dist.group.WORLD, parts, out, dev)
    except Exception as exc:  # report, do not hang the other rank's join
        out[rank] = {"error": f"{type(exc).__name__}: {exc}"}
    queue.put(out)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="check,graph,speed")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.dry_run:
        args.parts = ",".join(p for p in args.parts.split(",") if p != "graph")
        _small()
    world = 2
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = tempfile.mktemp(prefix="turbo-ep-")
    procs = [ctx.Process(target=_worker, args=(r, world, store, args.parts.split(","), queue, args.dry_run))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        results.update(queue.get(timeout=1200))
    for p in procs:
        p.join()
    meta = {"torch": torch.__version__, "gpu": "dry run (CPU, gloo)" if args.dry_run else torch.cuda.get_device_name(0),
            "world": world, "shape": {"T": T, "H": H, "topk": K, "experts": E}, "parts": args.parts}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "ranks": results}, f, indent=1)
    for rank, res in sorted(results.items()):
        for k, v in res.items():
            print(rank, k, *(["\n" + "\n".join(v)] if isinstance(v, list) else [v]))


if __name__ == "__main__":
    main()
