"""The FP8/FP4 GEMM family on its reference backend TORCH, on the GPU (``@pytest.mark.gpu``).

* GPU against CPU: ``gemm_fp8`` (every granularity x E4M3/HYBRID), ``gemm_fp4``, ``grouped_gemm_fp8``
  and ``grouped_gemm_fp4``, forward, dgrad and wgrad, on the GPU and on the CPU from the same inputs.
  The quantizers must agree and the GEMMs differ only by fp32 (GPU) against float64 (CPU) sums
  (relative norm of the difference below 1e-4); the grouped GEMMs take the reference's sync-free
  path on the GPU. Each GPU result also reaches its format's SNR floor against the unquantized
  float64 product.
* ``torch.compile(fullgraph=True, backend="aot_eager")`` of ``gemm_fp8``, ``grouped_gemm_fp8`` and
  ``Float8Linear``, forward and backward, on the GPU (the FP8 dtypes are looked up per device at
  call time, outside dynamo's way), equal to eager.
* The premise of ``turbo_core.testing.numerics.FP8_MMA_ATOL``: cuBLASLt (``torch._scaled_mm``, with
  and without fast accumulation) lands within that gate of float64 math on the same FP8 operands,
  the floor the FP8 GEMM gates of every backend rest on.

CUDA-graph capture of the FP8 GEMMs is in ``test_cuda_graphs.py``.
"""

from __future__ import annotations

import pytest
import torch

from turbo_core import Float4QuantConfig, Float8QuantConfig, use_backend
from turbo_core.low_precision import ScalingGranularity
from turbo_core.ops.gemm_fp8 import gemm_fp4, gemm_fp8
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp4, grouped_gemm_fp8
from turbo_core.testing.numerics import SNR_DB, assert_close_fp8_gemm, assert_snr

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]

G = ScalingGranularity
LENS = (40, 0, 77, 33)  # an empty group, unaligned lengths; 5 rows past the last group
GRANS = [("TENSORWISE", None), ("ROWWISE", None), ("BLOCKWISE", 128), ("MX_BLOCKWISE", None)]
SETUPS = {f"{g}-{fmt}": (Float8QuantConfig(format=fmt, granularity=g, block_size=bs), fmt)
          for g, bs in GRANS for fmt in ("E4M3", "HYBRID")}
SETUPS["FP4"] = (Float4QuantConfig(), "FP4")


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.detach().double().cpu(), y.detach().double().cpu()
    return float((x - y).norm() / y.norm().clamp_min(1e-300))


def _run(fn, inputs, grad, **kw):
    """``(out, grad of each floating input)`` of ``fn(*inputs, **kw).backward(grad)`` on TORCH, the
    backward on this thread (where the pin holds)."""
    leaves = [t.clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
    with use_backend("TORCH"), torch.autograd.set_multithreading_enabled(False):
        out = fn(*leaves, **kw)
        out.backward(grad)
    return [out.detach()] + [t.grad for t in leaves if t.is_floating_point()]


def _ideal(dense: bool, inputs, grad):
    """float64 out, dA, dB of the unquantized product."""
    a, b = (t.double().requires_grad_() for t in inputs[:2])
    if dense:
        c = a @ b.t()
    else:
        rows, start = [], 0
        for g, n in enumerate(LENS):
            rows.append(a[start:start + n] @ b[g].t())
            start += n
        c = torch.cat(rows + [a.new_zeros(a.shape[0] - start, b.shape[1])])
    c.backward(grad.double())
    return [c.detach(), a.grad, b.grad]


@pytest.mark.parametrize("kind", ["dense", "grouped"])
@pytest.mark.parametrize("setup", list(SETUPS))
def test_gpu_matches_cpu_and_reaches_the_snr_floor(setup, kind):
    config, fmt = SETUPS[setup]
    gen = torch.Generator().manual_seed(0)
    if kind == "dense":  # NT, a Linear's layout; multiples of 128 for BLOCKWISE, of 32 for MX/FP4
        fn = gemm_fp4 if fmt == "FP4" else gemm_fp8
        inputs = [torch.randn(256, 384, generator=gen), torch.randn(512, 384, generator=gen)]
        grad, kw = torch.randn(256, 512, generator=gen), {"trans_b": True}
    else:
        fn = grouped_gemm_fp4 if fmt == "FP4" else grouped_gemm_fp8
        inputs = [torch.randn(sum(LENS) + 5, 256, generator=gen), torch.randn(len(LENS), 128, 256, generator=gen),
                  torch.tensor(LENS, dtype=torch.int64)]
        grad, kw = torch.randn(sum(LENS) + 5, 128, generator=gen), {}
    cpu = _run(fn, inputs, grad, config=config, **kw)
    gpu = _run(fn, [t.cuda() for t in inputs], grad.cuda(), config=config, **kw)
    ideal = _ideal(kind == "dense", inputs, grad)
    for name, g, c, i in zip(("out", "grad a", "grad b"), gpu, cpu, ideal, strict=True):
        assert g.device.type == "cuda"
        assert _rel(g, c) < 1e-4, f"{name}: GPU vs CPU relative difference {_rel(g, c):.2e}"
        assert_snr(i, g.cpu(), fmt, what=f"{name} (floor {SNR_DB[fmt]} dB)")


@pytest.mark.parametrize("gran,bs", GRANS)
def test_compile_fullgraph_matches_eager(gran, bs):
    from turbo_core.modules.float8_linear import Float8Linear

    config = Float8QuantConfig(format="HYBRID", granularity=gran, block_size=bs)
    g = torch.Generator(device="cuda").manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, device="cuda", generator=g, dtype=torch.bfloat16)

    lens = torch.tensor(LENS, dtype=torch.int64, device="cuda")
    a, b = r(128, 256), r(384, 256)
    calls = [(lambda x, y: gemm_fp8(x, y, trans_b=True, config=config), (a, b)),
             (lambda x, y, gl: grouped_gemm_fp8(x, y, gl, config=config), (r(sum(LENS), 256), r(len(LENS), 128, 256), lens))]
    with use_backend("TORCH"), torch.autograd.set_multithreading_enabled(False):
        for fn, args in calls:
            eager = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
            comp = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
            e = fn(*eager)
            e.float().square().sum().backward()
            c = torch.compile(fn, fullgraph=True, backend="aot_eager")(*comp)
            c.float().square().sum().backward()
            assert _rel(c, e) < 1e-6
            for ct, et in zip(comp, eager, strict=True):
                if et.is_floating_point():
                    assert _rel(ct.grad, et.grad) < 1e-6
        mod = Float8Linear(256, 384, config=config, device="cuda", dtype=torch.bfloat16)
        x = a.clone().requires_grad_()
        out = torch.compile(mod, fullgraph=True, backend="aot_eager")(x)
        out.float().sum().backward()
        assert x.grad is not None and _rel(out, mod(a)) < 1e-6


# K from a few MMA steps to 8192; inputs ~ N(0, K^-1/2) so results are of size ~1. Promoted sums only: the
# gate is the floor of fp32 promotion every MMA step; use_fast_accum=True keeps the reduced-precision sums
# and is expected to miss it at long K.
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
@pytest.mark.parametrize("m,n,k", [(64, 48, 96), (128, 256, 384), (256, 256, 1024), (256, 256, 4096),
                                   (1024, 1024, 8192)])
def test_cublaslt_fp8_results_within_the_mma_floor(gran, m, n, k):
    if torch.version.hip or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("torch._scaled_mm with OCP FP8: CUDA sm89+")
    from turbo_core.ops.quantization import quantize_fp8

    g = torch.Generator(device="cuda").manual_seed(k)
    a = torch.randn(m, k, device="cuda", generator=g) * k ** -0.25
    b = torch.randn(n, k, device="cuda", generator=g) * k ** -0.25
    axis = {"axis": -1} if gran == "ROWWISE" else {}
    with use_backend("TORCH"):
        qa, sa = quantize_fp8(a, torch.float8_e4m3fn, G(gran), **axis)
        qb, sb = quantize_fp8(b, torch.float8_e4m3fn, G(gran), **axis)
    exact = (qa.double() * sa.double().reshape(-1, 1)) @ (qb.double() * sb.double().reshape(-1, 1)).t()
    scale_a = sa.float().reshape(-1, 1) if gran == "ROWWISE" else sa.float().reshape(())
    scale_b = sb.float().reshape(1, -1) if gran == "ROWWISE" else sb.float().reshape(())
    got = torch._scaled_mm(qa, qb.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.float32,
                           use_fast_accum=False)
    assert_close_fp8_gemm(got, exact, what=f"torch._scaled_mm {gran}")
