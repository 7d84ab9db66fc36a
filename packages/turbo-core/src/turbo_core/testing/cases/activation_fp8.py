"""Conformance cases for ``swiglu_fwd_fp8`` / ``geglu_fwd_fp8`` and the ``swiglu_with_probs_fp8`` /
``geglu_with_probs_fp8`` ops.

The primitive's contract is the bits of ``<kind>_fwd`` followed by ``quantize_fp8`` along the last
dim, on the same backend. Each case checks, on the backend under test: ``y`` against float64 math of
the GLU formula (as the activation cases do) and bit for bit the backend's own ``<kind>_fwd``; ``q``
and ``scale_inv`` against the independent float64 quantization oracle of the quantization cases
applied to that ``y`` (scale values, element rounding, MX exponents and elements exactly) and bit
for bit the backend's own ``quantize_fp8`` of ``y``; the same ``q`` / ``scale_inv`` without
``store_y``. The op cases add the column copy (``with_trans``: ``quantize_fp8(y.t(), axis=-1)`` bit
for bit) and the backward: the gradient given to the quantized output reaches x and probs as
float64 autograd of the formula says.

Half-widths 33, 127, 1000 (odd, under a power of two, several MX/BLOCKWISE blocks with a partial
one) at 1 to 64 tokens; each granularity (ROWWISE, BLOCKWISE 32 and 128, MX) in E4M3, E5M2 where
the format matters; bf16, fp16 and fp32 inputs; a ``row_mask`` whose inactive rows hold NaN (zero
rows out: zero data and the all-zero block's scale); zero tokens; GeGLU.
"""

from __future__ import annotations

import functools

import torch

from turbo_core.dispatch.launch.activation import glu_fwd
from turbo_core.dispatch.launch.activation_fp8 import glu_fwd_fp8
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops import geglu_with_probs_fp8, quantize_fp8, swiglu_with_probs_fp8
from turbo_core.testing.case import Case, host_copy
from turbo_core.testing.cases.activation import _expected
from turbo_core.testing.cases.quantization import _bits, _check_fp32_scaled, _check_mx
from turbo_core.testing.numerics import assert_close_to_reference, assert_snr

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMT = {E4M3: "E4M3", E5M2: "E5M2"}
GRANS = {"rowwise": ("ROWWISE", None), "block32": ("BLOCKWISE", 32), "block128": ("BLOCKWISE", 128),
         "mx": ("MX_BLOCKWISE", 32)}
OPS = {"swiglu": swiglu_with_probs_fp8, "geglu": geglu_with_probs_fp8}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _inputs(kind, t, h, dtype, masked):
    """x ``[t, 2h]``, probs, row_mask (or None), the active rows, grad ``[t, h]``; inactive rows NaN."""
    gen = torch.Generator().manual_seed(t * 131 + h + (kind == "geglu"))
    x = (1.5 * torch.randn(t, 2 * h, generator=gen)).to(dtype)
    probs = torch.rand(t, generator=gen, dtype=torch.float32)
    grad = torch.randn(t, h, generator=gen).to(dtype)
    active = torch.ones(t, dtype=torch.bool)
    row_mask = None
    if masked:
        row_mask = (torch.rand(t, generator=gen) < 0.5).to(torch.int64)
        row_mask[: min(t, 2)] = torch.tensor([1, 0])[: min(t, 2)]  # at least one of each
        active = row_mask != 0
        x[~active] = float("nan")
        probs[~active] = float("nan")
    return x, probs, row_mask, active, grad


def _check_quantized(y, q, s, fp8, gran, bs):
    """``q`` / ``scale_inv`` of ``y`` along its last dim against the float64 quantization oracle;
    returns the float64 dequantization."""
    if gran == "MX_BLOCKWISE":
        return _check_mx(y, q, s, fp8, -1)
    return _check_fp32_scaled(y, q, s, fp8, gran, -1, bs)


def _same_bits(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype} {tuple(got.shape)}"
    assert torch.equal(_bits(got), _bits(want)), f"{what}: differs from the backend's own two-call result"


def _primitive(kind, shape, dtype, gran_id, fp8, *, masked=False, device="cpu"):
    """The primitive on ``device`` (inputs drawn and the oracle run on the CPU)."""
    t, h = shape
    gran, bs = GRANS[gran_id]
    x, probs, row_mask, active, grad = _inputs(kind, t, h, dtype, masked)
    out64 = _expected(kind, x, probs, grad, active)[0]
    dev = [v.to(device) if v is not None else None for v in (x, probs, row_mask)]
    kw = dict(out_dtype=fp8, granularity=gran, block_size=bs)
    q, s, y = glu_fwd_fp8(kind, *dev, store_y=True, **kw)
    q_only, s_only, y_none = glu_fwd_fp8(kind, *dev, store_y=False, **kw)
    assert y_none is None, "y: returned without store_y"
    assert y.dtype == dtype and y.shape == (t, h), f"y: {y.dtype} {tuple(y.shape)}"
    y_h = y.cpu()
    if masked:
        assert torch.equal(y_h[~active], torch.zeros_like(y_h[~active])), "y: inactive rows are not zero"
    assert_close_to_reference(y_h, out64, dtype=dtype, what="y")
    _same_bits(y_h, glu_fwd(kind, *dev).cpu(), f"y against {kind}_fwd")
    q_h, s_h = host_copy(q), host_copy(s)
    if t:
        _check_quantized(y_h, q_h, s_h, fp8, gran, bs)
    wq, ws = quantize_fp8(y, fp8, gran, block_size=bs, axis=-1)
    _same_bits(q_h, host_copy(wq), "q")
    _same_bits(s_h, host_copy(ws), "scale_inv")
    _same_bits(host_copy(q_only), q_h, "q without store_y")
    _same_bits(host_copy(s_only), s_h, "scale_inv without store_y")


def _op(kind, shape, dtype, gran_id, fp8, *, device="cpu"):
    """``<kind>_with_probs_fp8`` with the column copy and its backward, on ``device``."""
    t, h = shape
    gran, bs = GRANS[gran_id]
    x, probs, _, active, grad = _inputs(kind, t, h, dtype, False)
    out64, gx64, gp64 = _expected(kind, x, probs, grad, active)
    xt = x.to(device).requires_grad_()
    pt = probs.to(device).requires_grad_()
    cfg = Float8QuantConfig(format=FMT[fp8], granularity=gran, block_size=bs if gran == "BLOCKWISE" else None)
    data, data_t = OPS[kind](xt, pt, config=cfg, with_trans=True)
    assert data.shape == (t, h) and data.dtype == dtype and data_t.shape == (h, t), "shapes"
    assert data.requires_grad and not data_t.requires_grad, "only the row copy carries the activation's gradient"
    y_dev = glu_fwd_fp8(kind, xt.detach(), pt.detach(), out_dtype=fp8, granularity=gran, block_size=bs,
                        store_y=True)[2]
    deq = _check_quantized(y_dev.cpu(), host_copy(data.qdata), host_copy(data.scale_inv), fp8, gran, bs)
    assert_snr(out64, deq, FMT[fp8], what="dequantized output")
    wq, ws = quantize_fp8(y_dev.t(), fp8, gran, block_size=bs, axis=-1)
    _same_bits(host_copy(data_t.qdata), host_copy(wq), "data_t")
    _same_bits(host_copy(data_t.scale_inv), host_copy(ws), "data_t scale_inv")
    data.backward(grad.to(device))
    assert xt.grad.dtype == dtype and pt.grad.dtype == torch.float32
    assert_close_to_reference(xt.grad.cpu(), gx64, dtype=dtype, what="grad_x")
    assert_close_to_reference(pt.grad.cpu(), gp64, dtype=dtype, what="grad_probs")


def _case(kind, label, shape, dtype, gran_id, fp8=E4M3, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"{kind}_fp8-{label}-{gran_id}-{FMT[fp8]}-{dims}-{_name(dtype)}",
                (f"{kind}_fwd_fp8", f"{kind}_fwd", "quantize_fp8"),
                functools.partial(_primitive, kind, shape, dtype, gran_id, fp8, **kw))


def _op_case(kind, shape, dtype, gran_id, fp8=E4M3):
    dims = "x".join(str(d) for d in shape)
    return Case(f"{kind}_fp8-op-{gran_id}-{FMT[fp8]}-{dims}-{_name(dtype)}",
                (f"{kind}_fwd_fp8", "quantize_fp8", f"{kind}_bwd"),
                functools.partial(_op, kind, shape, dtype, gran_id, fp8))


S = "swiglu"
CASES = (
    [_case(S, "probs", (5, 127), torch.bfloat16, g) for g in GRANS]
    + [_case(S, "probs", (1, 33), torch.bfloat16, "rowwise"), _case(S, "probs", (16, 1000), torch.bfloat16, "block128"),
       _case(S, "probs", (5, 127), torch.float16, "rowwise"), _case(S, "probs", (5, 127), torch.float32, "mx"),
       _case(S, "probs", (5, 127), torch.bfloat16, "block32", E5M2)]
    + [_case(S, "row_mask", (16, 127), torch.bfloat16, g, masked=True) for g in ("rowwise", "mx")]
    + [_case(S, "zero_tokens", (0, 33), torch.bfloat16, g) for g in ("rowwise", "mx")]
    + [_case("geglu", "probs", (5, 127), torch.bfloat16, g) for g in ("rowwise", "block32")]
    + [_op_case(S, (37, 127), torch.bfloat16, g) for g in GRANS]
    + [_op_case("geglu", (5, 96), torch.float32, "rowwise", E5M2)]
)
