"""TRITON ``rmsnorm_fwd_fp8`` compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``): ``q`` and
``scale_inv`` bit for bit TRITON's ``quantize_fp8`` of the returned ``y`` along the rows, ``x_plus_r`` bit for
bit ``rmsnorm_fwd``'s, and ``y`` / ``rstd`` those of TRITON's ``rmsnorm_fwd`` within a last-bit difference
(the two compiled kernels may sum a row in another order: the spec allows it), at model widths (2048 ... 16384, DeepSeek's 7168, odd 5000), 1 / 4096 / 16384 tokens,
ROWWISE, BLOCKWISE 128 and MX, E4M3 and E5M2, bf16 and fp16, with the residual; outputs allocated
poisoned (an element never written shows); no host sync; replayed from a CUDA graph on new data.

The kernel normalizes on ``rmsnorm_fwd``'s own tile; a reduction that went wrong, not merely in another
order, shows as a difference past one rounding step.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, no_host_sync, poisoned_empty, replay

from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GRANS = {"rowwise": ("ROWWISE", None), "block128": ("BLOCKWISE", 128), "mx": ("MX_BLOCKWISE", 32)}


def _args(tokens, hidden, dtype, gran_id, fp8, residual, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed + tokens + hidden)
    x = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype)
    r = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype) if residual else None
    g = (1 + 0.5 * torch.randn(hidden, device=DEV, generator=gen)).to(dtype)
    gran, bs = GRANS[gran_id]
    return RmsNormFwdFp8Args(x, g, fp8, gran, bs, 1e-5, False, r, store_y=True)


def _check(got, args, what):
    """``got`` = (q, scale_inv, y, rstd, x_plus_r) against the unfused primitives (module doc)."""
    from turbo_triton.normalization.launch import rmsnorm_fwd
    from turbo_triton.quantization.quantize import quantize_fp8

    q, s, y, rstd, xr = got
    y2, rstd2, xr2 = rmsnorm_fwd(RmsNormFwdArgs(args.x, args.gamma, args.eps, args.zero_centered, args.residual))
    q3, s3 = quantize_fp8(QuantizeFp8Args(y, args.out_dtype, args.granularity, -1, args.block_size))
    assert_same_bits([q, s], [q3, s3], what=f"{what}: q, scale_inv vs quantize_fp8 of the returned y")
    if xr2 is not None:
        assert_same_bits([xr], [xr2], what=f"{what}: x_plus_r")
    torch.testing.assert_close(rstd, rstd2, rtol=2 * torch.finfo(torch.float32).eps, atol=0)
    torch.testing.assert_close(y.float(), y2.float(), rtol=torch.finfo(y.dtype).eps, atol=0)


@pytest.mark.parametrize("gran_id", list(GRANS))
@pytest.mark.parametrize("tokens, hidden, dtype, fp8, residual", [
    (4096, 4096, torch.bfloat16, E4M3, False), (4096, 7168, torch.bfloat16, E4M3, True),
    (16384, 8192, torch.bfloat16, E4M3, False), (1, 2048, torch.bfloat16, E5M2, True),
    (4096, 5000, torch.float16, E4M3, False), (4096, 16384, torch.bfloat16, E5M2, False),
])
def test_against_rmsnorm_then_quantize(gran_id, tokens, hidden, dtype, fp8, residual):
    from turbo_triton.normalization.fp8_launch import can_handle, rmsnorm_fwd_fp8

    args = _args(tokens, hidden, dtype, gran_id, fp8, residual)
    assert can_handle(args) is None
    with poisoned_empty(), no_host_sync():
        got = list(rmsnorm_fwd_fp8(args))
    _check(got, args, f"{gran_id} {tokens}x{hidden}")


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_cuda_graph_replay(gran_id):
    from turbo_triton.normalization.fp8_launch import rmsnorm_fwd_fp8

    args = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True)
    graph, out = capture(lambda: rmsnorm_fwd_fp8(args))
    fresh = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True, seed=5)
    args.x.copy_(fresh.x)
    args.residual.copy_(fresh.residual)
    replay(graph)
    _check(list(out), args, f"{gran_id} replay")
