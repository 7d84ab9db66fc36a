"""Conformance cases for ``gemm_fp8`` / ``gemm_fp4`` and ``grouped_gemm_fp8`` / ``grouped_gemm_fp4``
(forward, dgrad, wgrad, fused wgrad accumulation).

Each case checks every pass twice:

* **exact-ish**: against float64 math on the dequantized operands the op's documented recipe
  gives (``turbo_core.ops.gemm_fp8``: which tensor is quantized along which dim, in which format).
  The operands are quantized with the public quantize ops (so on the backend under test) and
  dequantized by the quantization family's reference functions called directly (plain torch,
  independent of any GEMM code). Tolerance: that of the result dtype (fp32 1e-4, bf16 1e-2); on an
  accelerator the absolute tolerance is at least ``2^-9 * max |exact|`` (``assert_close_fp8_gemm``:
  Hopper's FP8 tensor cores do not add products as an fp32 sum, and cuBLASLt lands as far off).
* **end to end**: the SNR against the unquantized float64 product must reach the format's floor
  (E4M3 25 dB, E5M2/HYBRID 20 dB, FP4 10 dB; ``turbo_core.testing.numerics``).

Shapes: odd sizes where the granularity allows them (67x45x96, M=1, N=1, K=17 for TENSORWISE and
ROWWISE), multiples of 128 for BLOCKWISE (the contraction dims of all three passes), multiples of
32 for MX/FP4 (K=160 is padded to 256 by the quantizer). Grouped: empty groups, unaligned group
lengths, an over-allocated tail, both layouts of b.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    DequantizeFp8Args,
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
)
from turbo_core.low_precision import (
    Float4QuantConfig,
    Float8QuantConfig,
    ScalingGranularity,
    ScalingRecipe,
    float4_e2m1_dtype,
)
from turbo_core.ops import quantization as q
from turbo_core.ops.gemm_fp8 import gemm_fp4, gemm_fp8
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp4, grouped_gemm_fp8
from turbo_core.reference import quantization as qref
from turbo_core.testing.case import Case, host_copy
from turbo_core.testing.numerics import assert_close_fp8_gemm, assert_snr

G = ScalingGranularity
F64 = torch.float64


# -- the documented recipe, replayed --------------------------------------------------------------------

class _Recipe:
    """Quantize-then-dequantize (float64) a tensor the way the op does for one role: the public
    quantize op on ``device`` (the backend under test), the reference dequantization on the CPU."""

    def __init__(self, gran: str, fmt: str, block_size: int | None, device: torch.device | str):
        self.device = torch.device(device)
        self.fp4 = gran == "FP4"
        self.gran = G.MX_BLOCKWISE if self.fp4 else G(gran)
        self.fmt = fmt
        self.bs = 32 if self.gran == G.MX_BLOCKWISE else block_size
        if self.fp4:
            self.fwd = self.bwd = float4_e2m1_dtype()
        else:
            cfg = Float8QuantConfig(format=fmt, granularity=self.gran, block_size=block_size)
            self.fwd, self.bwd = cfg.dtype(device, True), cfg.dtype(device, False)

    @property
    def snr_fmt(self) -> str:
        return "FP4" if self.fp4 else self.fmt

    def config(self):
        if self.fp4:
            return Float4QuantConfig()
        return Float8QuantConfig(format=self.fmt, granularity=self.gran, block_size=self.bs
                                 if self.gran == G.BLOCKWISE else None)

    def deq(self, x: torch.Tensor, dim: int | None, role: str) -> torch.Tensor:
        """float64 values (CPU) of CPU tensor ``x`` after quantization for a GEMM contracting along
        its last-two dim ``dim`` (0 or 1) in ``role`` (``input``/``weight``/``grad``)."""
        dtype = self.bwd if role == "grad" else self.fwd
        weight = role == "weight"
        xd = x.to(self.device)
        if self.gran == G.TENSORWISE or (self.gran == G.BLOCKWISE and weight):
            recipe = ScalingRecipe(use_2d_block=self.gran == G.BLOCKWISE)
            data, s = map(host_copy, q.quantize_fp8(xd, dtype, self.gran, block_size=self.bs, scaling_recipe=recipe))
            return qref.dequantize_fp8(DequantizeFp8Args(data, s, F64, self.gran, None, self.bs, recipe))
        axis = dim - 2
        recipe = ScalingRecipe(use_2d_block=weight and self.gran == G.MX_BLOCKWISE)
        if self.fp4:
            data, s = map(host_copy, q.quantize_fp4(xd, dtype, self.gran, axis=axis, scaling_recipe=recipe))
            out = qref.dequantize_fp4(DequantizeFp4Args(data, s, F64, axis))
        else:
            data, s = map(host_copy, q.quantize_fp8(xd, dtype, self.gran, axis=axis, block_size=self.bs,
                                                    scaling_recipe=recipe))
            out = qref.dequantize_fp8(DequantizeFp8Args(data, s, F64, self.gran, axis, self.bs, recipe))
        return out[..., :x.shape[-2], :x.shape[-1]]  # MX: drop the padding


def _deq_cols(rec: _Recipe, x: torch.Tensor, lens: torch.Tensor, role: str) -> torch.Tensor:
    """float64 values (CPU) of token-packed CPU tensor ``x`` ``[M, D]`` quantized along each group's
    rows (the variable-K wgrad operand): plain along M for TENSORWISE/ROWWISE, the per-group padded
    col-wise layouts of the grouped quantizers for BLOCKWISE/MX/FP4 (padding removed). ``lens``: CPU."""
    if rec.gran in (G.TENSORWISE, G.ROWWISE):
        return rec.deq(x, 0, role)
    dtype = rec.bwd if role == "grad" else rec.fwd
    offs = torch.zeros(lens.shape[0] + 1, dtype=torch.int64, device=lens.device)
    offs[1:] = torch.cumsum(lens, 0)
    m = x.shape[0]
    xd, lens_d, offs_d = x.to(rec.device), lens.to(rec.device), offs.to(rec.device)
    if rec.fp4:
        data, s, _, offs_pad = q.grouped_quantize_fp4(xd, dtype, rec.gran, lens_d, offs_d, axis=0)
        return qref.grouped_dequantize_fp4(GroupedDequantizeFp4Args(host_copy(data), host_copy(s), F64, 0, 32, offs,
                                                                    host_copy(offs_pad), m))
    data, s, _, offs_pad = q.grouped_quantize_fp8(xd, dtype, rec.gran, lens_d, offs_d, axis=0, block_size=rec.bs)
    out = qref.grouped_dequantize_fp8(GroupedDequantizeFp8Args(host_copy(data), host_copy(s), F64, rec.gran, offs,
                                                               host_copy(offs_pad), m, 0, rec.bs))
    return out[:, :x.shape[1]]


def _t(x: torch.Tensor, flag: bool) -> torch.Tensor:
    return x.transpose(-1, -2) if flag else x


def _check(actual: torch.Tensor, exact: torch.Tensor, ideal: torch.Tensor, rec: _Recipe, what: str) -> None:
    """``actual`` (any device) against the CPU float64 ``exact`` and ``ideal`` results."""
    assert actual.shape == exact.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(exact.shape)}"
    assert_close_fp8_gemm(actual, exact, what=f"{what} (vs float64 math on the dequantized operands)")
    assert_snr(ideal, actual.cpu(), rec.snr_fmt, what=f"{what} (vs the unquantized product)")


# -- dense ----------------------------------------------------------------------------------------------

def _run_dense(gran, fmt, bs, m, n, k, ta, tb, dtype, fused, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    gen = torch.Generator().manual_seed(m * 7919 + n * 31 + k + 3 * ta + 5 * tb)
    # Results of size ~1 in every pass (forward ~N(0, 1); dgrad/wgrad variances sqrt(n/m), sqrt(m/n)): the
    # gates' absolute tolerance then bounds the error relative to the results' size, which is how FP8
    # hardware errors scale (Hopper's tensor cores add FP8 products at reduced precision).
    a = (torch.randn(*((k, m) if ta else (m, k)), generator=gen) * k ** -0.25).to(dtype)
    b = (torch.randn(*((n, k) if tb else (k, n)), generator=gen) * k ** -0.25).to(dtype)
    grad = (torch.randn(m, n, generator=gen) * (k / (m * n)) ** 0.25).to(dtype)
    rec = _Recipe(gran, fmt, bs, device)
    a_k, b_k = (0 if ta else 1), (1 if tb else 0)  # the stored dims the forward contracts along

    # Ideal: unquantized float64.
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    c64 = _t(a64, ta) @ _t(b64, tb)
    c64.backward(grad.double())
    # Exact: float64 math on the operands each pass multiplies.
    c_exact = _t(rec.deq(a, a_k, "input"), ta) @ _t(rec.deq(b, b_k, "weight"), tb)
    da_exact = _t(rec.deq(grad, 1, "grad") @ _t(rec.deq(b, 1 - b_k, "weight"), tb).t(), ta)
    db_exact = _t(_t(rec.deq(a, 1 - a_k, "input"), ta).t() @ rec.deq(grad, 0, "grad"), tb)

    a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
    if fused:
        b.main_grad = torch.ones(b.shape, dtype=torch.float32, device=device)
    fn = gemm_fp4 if rec.fp4 else gemm_fp8
    c = fn(a, b, ta, tb, config=rec.config(), fuse_bgrad_accum_pattern="megatron" if fused else None)
    assert c.dtype == dtype, f"out: dtype {c.dtype}, expected {dtype}"
    _check(c, c_exact, c64, rec, "out")
    c.backward(grad.to(device))
    assert a.grad.dtype == dtype, f"grad_a: dtype {a.grad.dtype}"
    _check(a.grad, da_exact, a64.grad, rec, "grad_a")
    if fused:
        assert b.grad_added_to_main_grad is True
        assert_close_fp8_gemm(b.main_grad, db_exact + 1.0, dtype=torch.float32, what="main_grad")
    else:
        assert b.grad.dtype == dtype, f"grad_b: dtype {b.grad.dtype}"
        _check(b.grad, db_exact, b64.grad, rec, "grad_b")


def _dense_prims(gran: str) -> tuple[str, ...]:
    if gran == "FP4":
        return ("quantize_fp4", "quantize_fp4_with_trans", "gemm_fp4")
    return ("quantize_fp8", "quantize_fp8_with_trans", "gemm_fp8")


LAYOUTS = [(False, False), (False, True), (True, False)]  # NN, NT, TN
_ODD = [(67, 45, 96), (1, 33, 17), (29, 1, 64)]
#: granularity -> (block_size, shapes)
DENSE = {
    "TENSORWISE": (None, _ODD),
    "ROWWISE": (None, _ODD),
    "BLOCKWISE": (128, [(128, 256, 384)]),
    "MX_BLOCKWISE": (None, [(64, 96, 160)]),
    "FP4": (None, [(64, 96, 160)]),
}


def _dense_id(gran, fmt, m, n, k, ta, tb, dtype, fused=False):
    kind = "gemm_fp4" if gran == "FP4" else f"gemm_fp8-{gran}-{fmt}"
    fused_s = "-fused-wgrad" if fused else ""
    return f"{kind}{fused_s}-{m}x{n}x{k}-{'T' if ta else 'N'}{'T' if tb else 'N'}-{str(dtype)[6:]}"


def _dense_cases() -> list[Case]:
    cases = []
    for gran, (bs, shapes) in DENSE.items():
        fmts = ("E2M1",) if gran == "FP4" else ("E4M3", "E5M2", "HYBRID")
        for idx, (m, n, k) in enumerate(shapes):
            for fmt, (ta, tb) in itertools.product(fmts, LAYOUTS):
                if idx and fmt != "E4M3":  # the edge shapes: E4M3 only
                    continue
                cases.append(Case(_dense_id(gran, fmt, m, n, k, ta, tb, torch.float32), _dense_prims(gran),
                                  functools.partial(_run_dense, gran, fmt, bs, m, n, k, ta, tb, torch.float32, False)))
        m, n, k = shapes[0]
        fmt = fmts[0]
        cases.append(Case(_dense_id(gran, fmt, m, n, k, False, True, torch.bfloat16), _dense_prims(gran),
                          functools.partial(_run_dense, gran, fmt, bs, m, n, k, False, True, torch.bfloat16, False)))
        cases.append(Case(_dense_id(gran, fmt, m, n, k, False, True, torch.bfloat16, True), _dense_prims(gran),
                          functools.partial(_run_dense, gran, fmt, bs, m, n, k, False, True, torch.bfloat16, True)))
    return cases


# -- grouped --------------------------------------------------------------------------------------------

def _per_group(fn, lens, *tensors):
    """Concatenate ``fn(g, *slices)`` over the groups (rows of each tensor sliced by group)."""
    out, start = [], 0
    for g, length in enumerate(lens):
        out.append(fn(g, *(t[start:start + length] for t in tensors)))
        start += length
    return out


def _run_grouped(gran, fmt, bs, lens, k, n, tb, dtype, tail, fused, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    groups = len(lens)
    m = sum(lens) + tail
    gen = torch.Generator().manual_seed(1000 * groups + 10 * k + n + tail + tb)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(*((groups, n, k) if tb else (groups, k, n)), generator=gen).to(dtype)
    grad = torch.randn(m, n, generator=gen).to(dtype)
    group_lens = torch.tensor(lens, dtype=torch.int64)
    rec = _Recipe(gran, fmt, bs, device)
    b_k = 1 if tb else 0
    used = sum(lens)

    def pad(rows):  # the zero tail rows of a forward / dgrad result
        return rows + [rows[0].new_zeros((tail, rows[0].shape[1]))]

    # Ideal (unquantized float64), per group on its own slice.
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    c64 = torch.cat(pad(_per_group(lambda g, x: x @ _t(b64[g], tb), lens, a64)))
    c64.backward(grad.double())
    # Exact: float64 math on the dequantized operands of each pass.
    aq, bq = rec.deq(a, 1, "input"), rec.deq(b, b_k, "weight")
    gq, bq_n = rec.deq(grad, 1, "grad"), rec.deq(b, 1 - b_k, "weight")
    aq_m, gq_m = _deq_cols(rec, a, group_lens, "input"), _deq_cols(rec, grad, group_lens, "grad")
    c_exact = torch.cat(pad(_per_group(lambda g, x: x @ _t(bq[g], tb), lens, aq)))
    da_exact = torch.cat(pad(_per_group(lambda g, x: x @ _t(bq_n[g], tb).t(), lens, gq)))
    db_exact = torch.stack(_per_group(lambda g, x, y: _t(x.t() @ y, tb), lens, aq_m[:used], gq_m[:used]))

    a, b = a.to(device).requires_grad_(), b.to(device).requires_grad_()
    if fused:
        b.main_grad = torch.ones(b.shape, dtype=torch.float32, device=device)
    fn = grouped_gemm_fp4 if rec.fp4 else grouped_gemm_fp8
    c = fn(a, b, group_lens.to(device), trans_b=tb, config=rec.config(),
           fuse_bgrad_accum_pattern="megatron" if fused else None)
    assert c.dtype == dtype and c.shape == (m, n), f"out: {c.dtype} {tuple(c.shape)}"
    _check(c, c_exact, c64, rec, "out")
    if tail:
        assert torch.count_nonzero(c.cpu()[used:]) == 0, "out: the rows past sum(group_lens) must be zero"
    c.backward(grad.to(device))
    _check(a.grad, da_exact, a64.grad, rec, "grad_a")
    if tail:
        assert torch.count_nonzero(a.grad.cpu()[used:]) == 0, "grad_a: the rows past sum(group_lens) must be zero"
    if fused:
        assert b.grad_added_to_main_grad is True
        assert_close_fp8_gemm(b.main_grad, db_exact + 1.0, dtype=torch.float32, what="main_grad")
    else:
        assert b.grad.dtype == dtype and b.grad.shape == b.shape, f"grad_b: {b.grad.dtype} {tuple(b.grad.shape)}"
        _check(b.grad, db_exact, b64.grad, rec, "grad_b")
        grad_b = b.grad.cpu()
        for g, length in enumerate(lens):
            if length == 0:
                assert torch.count_nonzero(grad_b[g]) == 0, f"grad_b: empty group {g} must get a zero gradient"


def _grouped_prims(gran: str) -> tuple[str, ...]:
    if gran == "FP4":
        return ("quantize_fp4", "quantize_fp4_with_trans", "grouped_quantize_fp4", "grouped_gemm_fp4",
                "grouped_gemm_fp4_variable_k")
    return ("quantize_fp8", "quantize_fp8_with_trans", "grouped_quantize_fp8", "grouped_quantize_fp8_with_trans",
            "grouped_gemm_fp8", "grouped_gemm_fp8_variable_k")


#: granularity -> (block_size, group lengths, K, N). Empty groups first/middle; unaligned lengths.
GROUPED = {
    "TENSORWISE": (None, (5, 0, 17), 45, 33),
    "ROWWISE": (None, (0, 5, 17), 45, 33),
    "BLOCKWISE": (128, (40, 0, 77, 33), 256, 128),
    "MX_BLOCKWISE": (None, (40, 0, 77, 33), 96, 64),
    "FP4": (None, (40, 0, 77, 33), 96, 64),
}


def _grouped_id(gran, fmt, lens, k, n, tb, dtype, tail, fused):
    kind = "grouped_gemm_fp4" if gran == "FP4" else f"grouped_gemm_fp8-{gran}-{fmt}"
    extra = ("-fused-wgrad" if fused else "") + (f"-tail{tail}" if tail else "")
    return f"{kind}{extra}-G{len(lens)}-K{k}-N{n}-{'NT' if tb else 'NN'}-{str(dtype)[6:]}"


def _grouped_cases() -> list[Case]:
    cases = []
    for gran, (bs, lens, k, n) in GROUPED.items():
        fmts = ("E2M1",) if gran == "FP4" else ("E4M3", "HYBRID")
        runs = [(fmt, tb, torch.float32, 7, False) for fmt, tb in itertools.product(fmts, (True, False))]
        runs += [(fmts[0], True, torch.bfloat16, 0, False), (fmts[0], True, torch.bfloat16, 0, True)]
        for fmt, tb, dt, tail, fused in runs:
            cases.append(Case(_grouped_id(gran, fmt, lens, k, n, tb, dt, tail, fused), _grouped_prims(gran),
                              functools.partial(_run_grouped, gran, fmt, bs, lens, k, n, tb, dt, tail, fused)))
    return cases


CASES = _dense_cases() + _grouped_cases()
