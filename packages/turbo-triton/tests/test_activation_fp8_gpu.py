"""TRITON ``swiglu_fwd_fp8`` / ``geglu_fwd_fp8`` compiled, on the GPU (``@pytest.mark.gpu``; see
``gpu_support``): ``y`` bit for bit TRITON's ``<kind>_fwd`` and ``q`` / ``scale_inv`` bit for bit TRITON's
``quantize_fp8`` of that ``y`` along the rows, at model widths (the expert FFNs of Qwen3-30B-A3B 768 and
DeepSeek-V3 2048, Llama-3.1-8B / Mixtral's 14336, 28672 on a whole-row ROWWISE tile of 32768, odd
5000), 1 / 4096 / 16384 tokens, ROWWISE, BLOCKWISE 128 and MX, E4M3 and E5M2, bf16 and fp16, with
and without a row mask; outputs allocated poisoned (an element never written shows); no host sync;
replayed from a CUDA graph on new data; and the op into ``Float8Linear`` bit for bit against the
unfused ``swiglu_with_probs`` into the same layer (forward and every gradient).

The kernel recomputes the activation with ``glu_fwd_kernel``'s helpers on its own tile; this is
where a compiler that contracted or reordered the fp32 arithmetic differently in the fused kernel
would show as a ``y`` bit.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, no_host_sync, poisoned_empty, replay

from turbo_core.dispatch.specs.activation import GluFwdArgs
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GRANS = {"rowwise": ("ROWWISE", None), "block128": ("BLOCKWISE", 128), "mx": ("MX_BLOCKWISE", 32)}


def _args(tokens, half, dtype, gran_id, fp8, masked, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed + tokens + half)
    x = (2 * torch.randn(tokens, 2 * half, device=DEV, generator=gen)).to(dtype)
    probs = torch.rand(tokens, device=DEV, generator=gen)
    mask = (torch.rand(tokens, device=DEV, generator=gen) < 0.7).to(torch.int64) if masked else None
    gran, bs = GRANS[gran_id]
    return GluFwdFp8Args(x, probs, fp8, gran, bs, mask, store_y=True)


def _expected(kind, args):
    from turbo_triton.activation.launch import glu_fwd
    from turbo_triton.quantization.quantize import quantize_fp8

    y = glu_fwd(kind, GluFwdArgs(args.x, args.probs, args.row_mask))
    q, s = quantize_fp8(QuantizeFp8Args(y, args.out_dtype, args.granularity, -1, args.block_size))
    return [q, s, y]


@pytest.mark.parametrize("gran_id", list(GRANS))
@pytest.mark.parametrize("kind, tokens, half, dtype, fp8, masked", [
    ("swiglu", 4096, 14336, torch.bfloat16, E4M3, False), ("swiglu", 16384, 768, torch.bfloat16, E4M3, True),
    ("swiglu", 4096, 2048, torch.bfloat16, E5M2, True), ("swiglu", 1, 4096, torch.bfloat16, E4M3, False),
    ("swiglu", 4096, 5000, torch.float16, E4M3, False), ("swiglu", 512, 28672, torch.bfloat16, E4M3, False),
    ("geglu", 4096, 14336, torch.bfloat16, E4M3, False), ("geglu", 4096, 2048, torch.float16, E5M2, True),
])
def test_bit_for_bit_against_glu_then_quantize(gran_id, kind, tokens, half, dtype, fp8, masked):
    from turbo_triton.activation.fp8_launch import can_handle, glu_fwd_fp8

    args = _args(tokens, half, dtype, gran_id, fp8, masked)
    assert can_handle(args) is None
    with poisoned_empty(), no_host_sync():
        got = list(glu_fwd_fp8(kind, args))
    assert_same_bits(got, _expected(kind, args), what=f"{kind} {gran_id} {tokens}x{half}")


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_cuda_graph_replay(gran_id):
    from turbo_triton.activation.fp8_launch import glu_fwd_fp8

    args = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True)
    graph, out = capture(lambda: glu_fwd_fp8("swiglu", args))
    fresh = _args(2048, 4096, torch.bfloat16, gran_id, E4M3, True, seed=5)
    for mine, new in ((args.x, fresh.x), (args.probs, fresh.probs), (args.row_mask, fresh.row_mask)):
        mine.copy_(new)
    replay(graph)
    assert_same_bits(list(out), _expected("swiglu", args), what=f"{gran_id} replay")


def _mlp_step(cfg, fused):
    from turbo_core.modules import Float8Linear
    from turbo_core.ops import swiglu_with_probs, swiglu_with_probs_fp8

    torch.manual_seed(0)
    down = Float8Linear(2048, 1024, config=cfg, device=DEV, dtype=torch.bfloat16)
    h = torch.randn(1024, 4096, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(1024, device=DEV, requires_grad=True)
    a = swiglu_with_probs_fp8(h, probs, config=cfg, with_trans=True) if fused else swiglu_with_probs(h, probs)
    out = down(a)
    out.backward(torch.randn(out.shape, device=DEV, dtype=out.dtype))
    return [out.detach(), h.grad, probs.grad, down.weight.grad, down.bias.grad]


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_op_into_float8_linear_bit_for_bit(gran_id):
    from turbo_core import Float8QuantConfig

    gran, bs = GRANS[gran_id]
    cfg = Float8QuantConfig(granularity=gran, block_size=bs if gran == "BLOCKWISE" else None)
    for i, (a, b) in enumerate(zip(_mlp_step(cfg, True), _mlp_step(cfg, False), strict=True)):
        assert_same_bits(a, b, what=f"{gran_id}: tensor {i}")
