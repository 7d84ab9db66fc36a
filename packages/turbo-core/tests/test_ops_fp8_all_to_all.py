"""``turbo_core.ops.fp8_all_to_all`` over gloo (2 and 3 processes, forked), against float64 math
written here from the spec: rows routed by the split sizes, the FP8 payload quantized with ONE
scale agreed by every rank (the largest amax over all ranks' inputs), so every received row is an
E4M3 (gradient: E5M2 with HYBRID) value times that one ``scale_inv``, and within FP8's rounding of
the row that was sent, whichever rank sent it (a rank whose own amax is small is not mis-scaled).

Every rank rebuilds every rank's inputs from one seed, so each computes its own expectations."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from ranks_harness import needs_two_gpus, run_ranks

H = 6


def _splits(world: int, rank: int) -> list[int]:
    """Rows rank ``rank`` sends to each rank: unequal, with a zero."""
    return [(rank + 2 * d) % 4 for d in range(world)]


def _out_rows(world: int, rank: int) -> int:
    return sum(_splits(world, s)[rank] for s in range(world))


def _inputs(world: int, dtype):
    """Every rank's input ``[sum(its splits), H]`` and its output's gradient ``[rows received, H]``;
    the ranks' magnitudes differ by 10x, so a per-rank scale would show."""
    g = torch.Generator().manual_seed(7)
    xs = [(torch.randn((sum(_splits(world, r)), H), generator=g, dtype=torch.float64) * 10.0 ** (r - 1)).to(dtype)
          for r in range(world)]
    gs = [(torch.randn((_out_rows(world, r), H), generator=g, dtype=torch.float64) * 3 * 10.0 ** (1 - r)).to(dtype)
          for r in range(world)]
    return xs, gs


def _forward_rows(xs, world: int, rank: int):
    """What ``rank`` receives: from each source in rank order, the block that source sends it."""
    return torch.cat([xs[s][sum(_splits(world, s)[:rank]):][:_splits(world, s)[rank]] for s in range(world)])


def _backward_rows(gs, world: int, rank: int):
    """``rank``'s input gradient: from each destination ``d``'s output gradient, the block that came
    from ``rank``."""
    return torch.cat([gs[d][sum(_splits(world, s)[d] for s in range(rank)):][:_splits(world, rank)[d]]
                      for d in range(world)])


def _expected(sent_all, received, fp8):
    """``received`` (float64) quantized with the scale of ``sent_all``'s global amax, dequantized.
    The scale is the library's FP32 scale as ``quantize_fp8`` computes it, ``fp8_max / amax`` in
    torch's float-by-tensor division (a reciprocal, then a product), so the payload must equal what
    a TENSORWISE ``quantize_fp8`` with that amax would produce."""
    fmax = torch.finfo(fp8).max
    amax = max(float(t.double().abs().max()) for t in sent_all if t.numel())
    scale = float(fmax) / torch.tensor(amax, dtype=torch.float32)
    q = (received.float() * scale).clamp(-fmax, fmax).to(fp8)
    return q.float() * (1.0 / scale), scale


def _check_rank(rank: int, world: int, dev: torch.device) -> None:
    from turbo_core.low_precision import Float8QuantConfig, Format
    from turbo_core.ops import fp8_all_to_all

    group = dist.group.WORLD
    out_splits = [_splits(world, s)[rank] for s in range(world)]
    in_splits = _splits(world, rank)
    for dtype in (torch.float32, torch.bfloat16):
        xs, gs = _inputs(world, dtype)
        for fmt in (Format.E4M3, Format.HYBRID):
            x = xs[rank].to(dev, copy=True).requires_grad_()
            out = fp8_all_to_all(x, group, out_splits, in_splits, config=Float8QuantConfig(format=fmt))
            assert out.device == dev
            out = out.cpu()
            recv64 = _forward_rows([t.double() for t in xs], world, rank)
            want, scale = _expected(xs, recv64, torch.float8_e4m3fn)
            assert out.dtype == dtype and out.shape == recv64.shape
            assert torch.equal(out, want.to(dtype)), f"{dtype} {fmt} forward"
            # one shared scale: every value is an E4M3 number times 1/scale
            codes = (out.float() * scale).to(torch.float8_e4m3fn).float() * (1.0 / scale)
            assert torch.equal(codes.to(dtype), out)
            # and every row is its sender's row within E4M3's rounding (3 mantissa bits), plus the
            # subnormal step of the shared scale for rows far below the global amax
            step = (1.0 / scale).item() * 2.0 ** -9
            assert ((out.double() - recv64).abs() <= recv64.abs() * 2.0 ** -4 + step + 1e-30).all()
            out.backward(gs[rank])
            bwd_fp8 = torch.float8_e5m2 if fmt == Format.HYBRID else torch.float8_e4m3fn
            want_g, _ = _expected(gs, _backward_rows([t.double() for t in gs], world, rank), bwd_fp8)
            assert torch.equal(x.grad.cpu(), want_g.to(dtype)), f"{dtype} {fmt} backward"
        # no quantization: a plain all-to-all, exact
        x = xs[rank].to(dev, copy=True).requires_grad_()
        out = fp8_all_to_all(x, group, out_splits, in_splits, fwd_quant=False, bwd_quant=False)
        assert torch.equal(out.cpu(), _forward_rows(xs, world, rank))
        out.backward(gs[rank].to(dev))
        assert torch.equal(x.grad.cpu(), _backward_rows(gs, world, rank))


@pytest.mark.distributed
@pytest.mark.skipif(getattr(torch, "float8_e4m3fn", None) is None, reason="this torch has no float8 dtypes")
@pytest.mark.parametrize("world", [2, 3])
def test_fp8_all_to_all_shares_one_scale(world, tmp_path):
    run_ranks(_check_rank, world, tmp_path)


@pytest.mark.gpu
@pytest.mark.distributed
@needs_two_gpus
def test_fp8_all_to_all_over_nccl(tmp_path):
    """The same checks on two GPUs over NCCL (the amax agreement is an all_reduce on the device; the
    quantizer is the GPU's default backend)."""
    run_ranks(_check_rank, 2, tmp_path, "nccl")


def test_bad_arguments_are_named():
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.ops import fp8_all_to_all

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        x = torch.randn(4, 3)
        with pytest.raises(ValueError, match="group"):
            fp8_all_to_all(x, None)
        with pytest.raises(ValueError, match="config: FP8AllToAll supports TENSORWISE"):
            fp8_all_to_all(x, group, config=Float8QuantConfig(granularity=ScalingGranularity.ROWWISE))
        with pytest.raises(ValueError, match="input_split_sizes: must sum"):
            fp8_all_to_all(x, group, [4], [3])
        with pytest.raises(ValueError, match="output_split_sizes: expected 1"):
            fp8_all_to_all(x, group, [2, 2], [4])
        with pytest.raises(ValueError, match="input_: expected a floating-point"):
            fp8_all_to_all(torch.ones(4, dtype=torch.int64), group)
        out = fp8_all_to_all(x, group)  # one rank: the input, unchanged
        assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
    finally:
        dist.destroy_process_group()
