"""Conformance cases for ``rmsnorm_fwd_fp8`` and the ``rmsnorm_fp8`` op.

The primitive's contract is the bits of ``rmsnorm_fwd`` followed by ``quantize_fp8`` along the last
dim. Each case checks, on the backend under test: ``y``, ``rstd`` and ``x_plus_r`` against float64
math of the RMSNorm formula (as the ``rmsnorm`` cases do); ``q`` and ``scale_inv`` against the
independent float64 quantization oracle of the quantization cases applied to that ``y`` (scale
values, element rounding, MX exponents and elements exactly); the same bits as the backend's own
``quantize_fp8`` of ``y``; the same ``q`` / ``scale_inv`` without ``store_y``. The op cases add the
column copy (``with_trans``: ``quantize_fp8(y.t(), axis=-1)`` bit for bit) and the backward: the
gradient given to the quantized output reaches x and gamma as float64 autograd of the formula says.

Hidden sizes 33, 127, 1000 (odd, under a power of two, several MX/BLOCKWISE blocks with a partial
one) at 1, 5 and 64 tokens; each granularity (ROWWISE, BLOCKWISE 32 and 128, MX) in E4M3, E5M2
where the format matters; bf16, fp16 and fp32 inputs; the fused residual, zero-centred gamma, no
affine, and zero tokens.
"""

from __future__ import annotations

import functools

import torch

from turbo_core.dispatch.launch.normalization_fp8 import rmsnorm_fwd_fp8
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops import quantize_fp8, rmsnorm_fp8
from turbo_core.testing.case import Case, host_copy
from turbo_core.testing.cases.normalization import _expected
from turbo_core.testing.cases.quantization import _bits, _check_fp32_scaled, _check_mx
from turbo_core.testing.numerics import assert_close_to_reference, assert_snr

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMT = {E4M3: "E4M3", E5M2: "E5M2"}
EPS = 1e-5
GRANS = {"rowwise": ("ROWWISE", None), "block32": ("BLOCKWISE", 32), "block128": ("BLOCKWISE", 128),
         "mx": ("MX_BLOCKWISE", 32)}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _inputs(shape, dtype, affine, residual):
    t, h = shape
    gen = torch.Generator().manual_seed(t * 131 + h)
    x = (torch.randn(shape, generator=gen) * 2).to(dtype)
    r = torch.randn(shape, generator=gen).to(dtype) if residual else None
    gamma = None
    if affine != "none":
        base = 0.0 if affine == "zero_centered" else 1.0
        gamma = (base + 0.5 * torch.randn(h, generator=gen)).to(dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    return x, r, gamma, dy


def _check_quantized(y, q, s, fp8, gran, bs):
    """``q`` / ``scale_inv`` of ``y`` along its last dim against the float64 quantization oracle;
    returns the float64 dequantization."""
    if gran == "MX_BLOCKWISE":
        return _check_mx(y, q, s, fp8, -1)
    return _check_fp32_scaled(y, q, s, fp8, gran, -1, bs)


def _same_bits(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype} {tuple(got.shape)}"
    assert torch.equal(_bits(got), _bits(want)), f"{what}: differs from the backend's quantize_fp8 of y"


def _primitive(shape, dtype, gran_id, fp8, *, affine="gamma", residual=False, device="cpu"):
    """The primitive on ``device`` (inputs drawn and the oracle run on the CPU)."""
    gran, bs = GRANS[gran_id]
    x, r, gamma, _ = _inputs(shape, dtype, affine, residual)
    zc = affine == "zero_centered"
    y64, s64, _ = _expected(x, r, gamma, zc, EPS, torch.zeros(shape), None)
    dev = {k: (v.to(device) if v is not None else None) for k, v in (("x", x), ("r", r), ("g", gamma))}
    kw = dict(out_dtype=fp8, granularity=gran, block_size=bs, eps=EPS, zero_centered=zc, residual=dev["r"])
    q, s, y, rstd, x_plus_r = rmsnorm_fwd_fp8(dev["x"], dev["g"], store_y=True, **kw)
    q_only, s_only, y_none, _, _ = rmsnorm_fwd_fp8(dev["x"], dev["g"], store_y=False, **kw)
    assert y_none is None, "y: returned without store_y"
    assert y.dtype == dtype and y.shape == x.shape, f"y: {y.dtype} {tuple(y.shape)}"
    assert_close_to_reference(y.cpu(), y64, dtype=dtype, what="y")
    want_rstd = 1.0 / torch.sqrt((s64 * s64).mean(dim=1) + EPS)
    assert rstd.dtype == torch.float32 and rstd.shape == (shape[0],), f"rstd: {rstd.dtype} {tuple(rstd.shape)}"
    torch.testing.assert_close(rstd.cpu().double(), want_rstd.double(), rtol=1e-5, atol=1e-6)
    if residual:
        assert x_plus_r is not None and x_plus_r.dtype == dtype, "x_plus_r: missing or wrong dtype"
        assert_close_to_reference(x_plus_r.cpu(), s64, dtype=dtype, what="x_plus_r")
    else:
        assert x_plus_r is None, "x_plus_r: returned without a residual"
    q_h, s_h, y_h = host_copy(q), host_copy(s), y.cpu()
    if shape[0]:
        _check_quantized(y_h, q_h, s_h, fp8, gran, bs)
    wq, ws = quantize_fp8(y, fp8, gran, block_size=bs, axis=-1)
    _same_bits(q_h, host_copy(wq), "q")
    _same_bits(s_h, host_copy(ws), "scale_inv")
    _same_bits(host_copy(q_only), q_h, "q without store_y")
    _same_bits(host_copy(s_only), s_h, "scale_inv without store_y")


def _op(shape, dtype, gran_id, fp8, *, affine="gamma", device="cpu"):
    """``rmsnorm_fp8`` with the column copy and its backward, on ``device``."""
    gran, bs = GRANS[gran_id]
    x, _, gamma, dy = _inputs(shape, dtype, affine, False)
    zc = affine == "zero_centered"
    y64, _, grads = _expected(x, None, gamma, zc, EPS, dy, None)
    xt = x.to(device).requires_grad_()
    gt = gamma.to(device).requires_grad_() if gamma is not None else None
    cfg = Float8QuantConfig(format=FMT[fp8], granularity=gran, block_size=bs if gran == "BLOCKWISE" else None)
    pair = rmsnorm_fp8(xt, gt, EPS, zc, config=cfg, with_trans=True)
    data, data_t = pair
    assert data.shape == x.shape and data.dtype == dtype and data_t.shape == (shape[1], shape[0]), "shapes"
    assert data.requires_grad and not data_t.requires_grad, "only the row copy carries the norm's gradient"
    y_dev = rmsnorm_fwd_fp8(xt.detach(), None if gt is None else gt.detach(), out_dtype=fp8, granularity=gran,
                            block_size=bs, eps=EPS, zero_centered=zc, store_y=True)[2]
    deq = _check_quantized(y_dev.cpu(), host_copy(data.qdata), host_copy(data.scale_inv), fp8, gran, bs)
    assert_snr(y64, deq, FMT[fp8], what="dequantized output")
    wq, ws = quantize_fp8(y_dev.t(), fp8, gran, block_size=bs, axis=-1)
    _same_bits(host_copy(data_t.qdata), host_copy(wq), "data_t")
    _same_bits(host_copy(data_t.scale_inv), host_copy(ws), "data_t scale_inv")
    data.backward(dy.to(device))
    assert xt.grad.dtype == dtype
    assert_close_to_reference(xt.grad.cpu(), grads["x"], dtype=dtype, what="grad_x")
    if gamma is not None:
        assert_close_to_reference(gt.grad.cpu(), grads["gamma"], dtype=dtype, what="grad_gamma")


_PRIMS = ("rmsnorm_fwd_fp8", "quantize_fp8")
_OP_PRIMS = ("rmsnorm_fwd_fp8", "quantize_fp8", "rmsnorm_bwd")


def _case(label, shape, dtype, gran_id, fp8=E4M3, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"rmsnorm_fp8-{label}-{gran_id}-{FMT[fp8]}-{dims}-{_name(dtype)}", _PRIMS,
                functools.partial(_primitive, shape, dtype, gran_id, fp8, **kw))


def _op_case(shape, dtype, gran_id, fp8=E4M3, **kw):
    dims = "x".join(str(d) for d in shape)
    return Case(f"rmsnorm_fp8-op-{gran_id}-{FMT[fp8]}-{dims}-{_name(dtype)}", _OP_PRIMS,
                functools.partial(_op, shape, dtype, gran_id, fp8, **kw))


CASES = (
    [_case("gamma", (t, h), torch.bfloat16, g) for g in GRANS for t, h in ((1, 33), (5, 127), (64, 1000))]
    + [_case("gamma", (5, 127), dt, g) for g in ("rowwise", "mx") for dt in (torch.float16, torch.float32)]
    + [_case("gamma", (5, 1000), torch.bfloat16, g, E5M2) for g in GRANS]
    + [_case("residual", (5, 127), torch.bfloat16, g, residual=True) for g in GRANS]
    + [_case("zero_centered", (5, 127), torch.float16, "block32", affine="zero_centered"),
       _case("no_affine", (5, 127), torch.bfloat16, "rowwise", affine="none"),
       _case("residual-no_affine", (64, 33), torch.float32, "mx", residual=True, affine="none"),
       _case("zero_tokens", (0, 33), torch.bfloat16, "rowwise"), _case("zero_tokens", (0, 33), torch.bfloat16, "mx")]
    + [_op_case((37, 127), torch.bfloat16, g) for g in GRANS]
    + [_op_case((5, 96), torch.float32, "rowwise", E5M2, affine="zero_centered")]
)
