"""turbo_core's ``fused_mega_moe`` expert-parallel over gloo processes (the dispatch and combine of
DEEP_EP, the experts' GEMMs and SwiGLU of the reference backend), forward and backward, against the
single-process float64 layer over every rank's tokens and every expert
(``turbo_core.testing.mega_moe_reference``).

Every rank rebuilds every rank's inputs from one seed: routing with -1 slots, a repeated expert id
and an expert no token uses; the loss is ``sum over ranks <y_r, G_r>``, so a rank's gradients of
x and topk_weights are the reference's on its rows, and its w1/w2 gradients the reference's on its
experts. fp32 against float64 (rtol 1e-4, atol 1e-4 of the largest magnitude); FP8 by SNR.

Cases per world size: the worst-case exchange (``num_worst_tokens=None``: no host sync), the exact
exchange with a different token count per rank (one of them none at 4 ranks), the split form
(stage 1 + stage 2), and TENSORWISE FP8; on two GPUs the same over NCCL/RCCL (gpu-marked).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rank_cases import two_gpu_reason

F64 = torch.float64
H, INTER, LOCAL, K = 16, 8, 2, 3


def _data(world: int, tokens: list[int], seed: int):
    """Every rank's float64 ``(x, topk_idx, topk_weights, w1 [G, 2I, H], w2 [G, H, I], G)``."""
    g = torch.Generator().manual_seed(seed)
    e = LOCAL * world
    out = []
    for r in range(world):
        t = tokens[r]
        idx = torch.randint(0, e - 1, (t, K), generator=g)  # expert e - 1: no token
        idx[torch.rand((t, K), generator=g) < 0.25] = -1
        if t > 1:
            idx[1] = torch.tensor([r % e, r % e, -1])  # a repeated id: its weights add up
        x = torch.randn((t, H), generator=g, dtype=F64)
        w = torch.rand((t, K), generator=g, dtype=F64)
        w1 = torch.randn((LOCAL, 2 * INTER, H), generator=g, dtype=F64) / H ** 0.5
        w2 = torch.randn((LOCAL, H, INTER), generator=g, dtype=F64) / INTER ** 0.5
        gy = torch.randn((t, H), generator=g, dtype=F64)
        out.append((x, idx, w, w1, w2, gy))
    return out


def _reference(data):
    """float64 ``(y, dx, dw)`` of every rank and ``(dw1, dw2)`` of every rank's experts."""
    from turbo_core.testing.mega_moe_reference import mega_moe_reference_ep

    leaves = [[t.clone().requires_grad_() for t in (x, w, w1, w2)] for x, _, w, w1, w2, _ in data]
    ys = mega_moe_reference_ep([lv[0] for lv in leaves], [d[1] for d in data], [lv[1] for lv in leaves],
                               [lv[2] for lv in leaves], [lv[3] for lv in leaves])
    sum((y * d[5]).sum() for y, d in zip(ys, data, strict=True)).backward()
    return [(y.detach(), *(t.grad for t in lv)) for y, lv in zip(ys, leaves, strict=True)]


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    atol = 1e-4 * max(1.0, want.abs().max().item() if want.numel() else 1.0)
    torch.testing.assert_close(got.detach().double(), want, rtol=1e-4, atol=atol, msg=lambda m: f"{what}: {m}")


def _run(rank, group, dev, data, fn, dtype=torch.float32):
    x, idx, w, w1, w2, gy = data[rank]
    ins = [t.to(dev, dtype).requires_grad_() for t in (x, w, w1, w2)]
    y = fn(group, ins[0], idx.to(dev), ins[1], ins[2], ins[3])
    (y * gy.to(dev, dtype)).sum().backward()
    return [t.detach().cpu() for t in [y] + [t.grad for t in ins]]


def _case(rank, world, group, dev, *, tokens, seed, fn, check):
    data = _data(world, tokens, seed)
    got = _run(rank, group, dev, data, fn)
    want = _reference(data)[rank]
    for name, a, b in zip(("y", "grad x", "grad topk_weights", "grad w1", "grad w2"), got, want, strict=True):
        check(a, b, name)


def _fp8_check(a, b, what):
    from turbo_core.testing import snr_db

    assert snr_db(b, a) >= 20.0, f"{what}: SNR {snr_db(b, a):.1f} dB < 20 dB"


def _check_all(rank: int, world: int, dev: torch.device) -> None:
    from turbo_core import use_backend
    from turbo_core.low_precision import Float8QuantConfig
    from turbo_core.ops import fused_mega_moe, fused_mega_moe_fp8, fused_mega_moe_stage1, fused_mega_moe_stage2

    group = dist.group.WORLD
    equal = [6] * world
    unequal = [(5, 7, 0, 3)[r % 4] for r in range(world)]

    def stages(group, x, idx, w, w1, w2):
        h, row_w, handle = fused_mega_moe_stage1(x, idx, w, w1, group)
        return fused_mega_moe_stage2(h, row_w, handle, idx, w, w2, group)

    cases = {
        "worst case (no host sync)": dict(tokens=equal, seed=1, fn=fused_mega_moe, check=_close),
        "exact exchange": dict(tokens=unequal, seed=2, check=_close,
                               fn=lambda *a: fused_mega_moe(*a, num_worst_tokens=0)),
        "stages": dict(tokens=equal, seed=3, fn=stages, check=_close),
        "fp8 tensorwise": dict(tokens=equal, seed=4, check=_fp8_check,
                               fn=lambda *a: fused_mega_moe_fp8(*a, config=Float8QuantConfig())),
    }
    # on a GPU the fp32 GEMMs stay fp32 (no TF32 tiles), to compare with float64
    pin = use_backend("TORCH", primitives=("grouped_gemm", "grouped_gemm_variable_k")) if dev.type != "cpu" \
        else contextlib.nullcontext()
    with pin:
        for name, kw in cases.items():
            try:
                _case(rank, world, group, dev, **kw)
            except Exception as exc:
                raise AssertionError(f"rank {rank}/{world}, case {name!r}: {exc}") from exc


def _worker(rank: int, world: int, store: str, backend: str) -> None:
    torch.set_num_threads(1)
    dev, kw = torch.device("cpu"), {}
    if backend == "nccl":
        dev = kw["device_id"] = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120), **kw)
    try:
        _check_all(rank, world, dev)
    except BaseException:
        traceback.print_exc()  # the other ranks may wait in a collective: leave at once
        sys.stderr.flush()
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()


def _launch(world: int, tmp_path, backend: str) -> None:
    mp.start_processes(_worker, args=(world, str(tmp_path / "store"), backend), nprocs=world, join=True,
                       start_method="fork" if backend == "gloo" else "spawn")  # CUDA cannot be used in forked children


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_fused_mega_moe_gloo(world, tmp_path):
    _launch(world, tmp_path, "gloo")


# The same cases over NCCL/RCCL with one GPU per rank (the dispatch/combine backend and the kernels
# selection picks there, but the fp32 grouped GEMMs of the reference backend).
@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(two_gpu_reason() is not None, reason=two_gpu_reason() or "")
def test_fused_mega_moe_nccl(tmp_path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    _launch(2, tmp_path, "nccl")
