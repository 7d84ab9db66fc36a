"""TRITON ``rmsnorm_fwd_fp8`` compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``): bit for
bit TRITON's ``rmsnorm_fwd`` (y, rstd, x_plus_r) followed by TRITON's ``quantize_fp8`` of that y
along the rows, at model widths (2048 ... 16384, DeepSeek's 7168, odd 5000), 1 / 4096 / 16384 tokens,
ROWWISE, BLOCKWISE 128 and MX, E4M3 and E5M2, bf16 and fp16, with the residual; outputs allocated
poisoned (an element never written shows); no host sync; replayed from a CUDA graph on new data.

The kernel normalizes on ``rmsnorm_fwd``'s own tile so that its ``y`` has that kernel's bits; this
is where a compiler that reduced the row differently inside the fused kernel would show.
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


def _expected(args):
    from turbo_triton.normalization.launch import rmsnorm_fwd
    from turbo_triton.quantization.quantize import quantize_fp8

    y, rstd, xr = rmsnorm_fwd(RmsNormFwdArgs(args.x, args.gamma, args.eps, args.zero_centered, args.residual))
    q, s = quantize_fp8(QuantizeFp8Args(y, args.out_dtype, args.granularity, -1, args.block_size))
    return [q, s, y, rstd, xr]


@pytest.mark.parametrize("gran_id", list(GRANS))
@pytest.mark.parametrize("tokens, hidden, dtype, fp8, residual", [
    (4096, 4096, torch.bfloat16, E4M3, False), (4096, 7168, torch.bfloat16, E4M3, True),
    (16384, 8192, torch.bfloat16, E4M3, False), (1, 2048, torch.bfloat16, E5M2, True),
    (4096, 5000, torch.float16, E4M3, False), (4096, 16384, torch.bfloat16, E5M2, False),
])
def test_bit_for_bit_against_rmsnorm_then_quantize(gran_id, tokens, hidden, dtype, fp8, residual):
    from turbo_triton.normalization.fp8_launch import can_handle, rmsnorm_fwd_fp8

    args = _args(tokens, hidden, dtype, gran_id, fp8, residual)
    assert can_handle(args) is None
    with poisoned_empty(), no_host_sync():
        got = list(rmsnorm_fwd_fp8(args))
    assert_same_bits(got, _expected(args), what=f"{gran_id} {tokens}x{hidden}")


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_cuda_graph_replay(gran_id):
    from turbo_triton.normalization.fp8_launch import rmsnorm_fwd_fp8

    args = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True)
    graph, out = capture(lambda: rmsnorm_fwd_fp8(args))
    fresh = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True, seed=5)
    args.x.copy_(fresh.x)
    args.residual.copy_(fresh.residual)
    replay(graph)
    assert_same_bits(list(out), _expected(args), what=f"{gran_id} replay")
