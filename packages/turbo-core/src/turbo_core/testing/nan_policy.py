"""The NaN/Inf policy of every op family (``docs/numerics.md``), as tests any backend runs::

    from turbo_core.testing.nan_policy import nan_policy_suite
    TestNanPolicy = nan_policy_suite("FLYDSL")      # $TURBO_CONFORMANCE_DEVICE or the CPU

Each case calls one primitive pinned to the backend with NaN / Inf placed in chosen elements and
checks where non-finite values come out (exactly where the policy says, no more, no less) and that
every other element is float64 math's. A case is skipped, with the reason, when the backend has no
kernel for the primitive or declines the call.

The policy in one line: NaN and Inf propagate as IEEE arithmetic of the spec's formula says, to the
results that read them and to no other, and are never silently replaced; quantizers saturate finite
values and mark blocks with NaN/Inf by a NaN scale; GEMM results past the output dtype's range
overflow to ±Inf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from turbo_core.backend import normalize_backend_name
from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args
from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFp8FwdArgs, AttentionFwdArgs
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.dispatch.specs.grouped_gemm_fp8 import GroupedGemmFp8Args
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.dispatch.specs.moe import (
    MoeCombineArgs,
    MoeDispatchArgs,
    MoePermuteArgs,
    MoeRoutingFwdArgs,
    MoeUnpermuteArgs,
)
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args
from turbo_core.dispatch.specs.quantization import DequantizeFp8Args, QuantizeFp4Args, QuantizeFp8Args
from turbo_core.dispatch.specs.sparse_mla import SparseMlaFwdArgs
from turbo_core.low_precision import E8M0_DTYPE, FLOAT4_E2M1FN_X2, ScalingRecipe
from turbo_core.testing.conformance import _device_unavailable, _served, conformance_device
from turbo_core.testing.properties.harness import Declined, Target, f64
from turbo_core.testing.properties.lowp import e2m1_values, e8m0_values

__all__ = ["NAN_CASES", "NanCase", "nan_policy_suite"]

NAN, INF = float("nan"), float("inf")
F64 = torch.float64


@dataclass(frozen=True)
class NanCase:
    id: str
    primitive: str
    run: Callable[[Target], None]


def _pattern(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` (any device) has NaN, +Inf and -Inf exactly where the float64 ``want`` has them, and
    its finite elements are within 1e-2 (relative) of want's."""
    g = f64(got)
    if tuple(g.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: shape {tuple(g.shape)} != expected {tuple(want.shape)}")
    for name, fn in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf)):
        if not torch.equal(fn(g), fn(want)):
            diff = (fn(g) != fn(want)).nonzero().tolist()[:6]
            raise AssertionError(f"{what}: {name} at the wrong places (first differing indices {diff}); got "
                                 f"{g.tolist() if g.numel() <= 64 else '...'}")
    fin = want.isfinite()
    torch.testing.assert_close(g[fin], want[fin], rtol=1e-2, atol=1e-2, msg=lambda m: f"{what}: finite part: {m}")


def _nan_rows(t: torch.Tensor, dim: int, rows) -> torch.Tensor:
    """float64 mask helper: ``t`` with NaN on ``rows`` along ``dim``."""
    out = t.clone()
    out.index_fill_(dim, torch.tensor(rows, dtype=torch.long), NAN)
    return out


# -- GEMM -------------------------------------------------------------------------------------------

def _gemm_nan_inf(dtype):
    def run(t: Target) -> None:
        a = torch.ones(3, 5, dtype=torch.float32)
        b = torch.tensor([[1.0, 2, 3, 4], [2, -1, 0, 3], [1, 1, 1, 1], [0.5, 0.5, 0.5, 0.5], [1, 2, 1, 2]])
        a[1, 2] = NAN
        a[0, 1] = INF  # meets b[1] = [2, -1, 0, 3]: +Inf, -Inf, NaN (Inf * 0), +Inf
        a, b = a.to(dtype), b.to(dtype)
        want = a.double() @ b.double()
        _pattern("gemm", t.call(GemmArgs(t.put(a), t.put(b))), want)
    return run


def _gemm_overflow(t: Target) -> None:
    a = torch.full((2, 2), 256.0)
    b = torch.full((2, 2), 256.0)
    b[:, 1] = 1.0
    got = t.call(GemmArgs(t.put(a), t.put(b), out_dtype=torch.float16))  # 131072 > fp16's 65504
    _pattern("gemm (fp16 out)", got, torch.tensor([[INF, 512.0], [INF, 512.0]], dtype=F64))


def _gemm_gap_and_out(t: Target) -> None:
    buf = torch.full((4, 7), NAN)
    buf[:, :3] = torch.arange(12.0).reshape(4, 3) / 7  # a = buf[:, :3]: NaN beyond the view
    b = torch.ones(3, 2)
    out = torch.zeros(4, 2)
    out[2, 1] = NAN
    res = t.call(GemmArgs(t.put(buf)[:, :3], t.put(b), out=t.put(out)))
    want = buf[:, :3].double() @ b.double()
    want[2, 1] = NAN
    _pattern("gemm (strided a, accumulate)", res, want)


def _fp8_bytes(values, dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8).view(dtype)


def _gemm_fp8_nan(dtype, nan_byte, inf_byte):
    def run(t: Target) -> None:
        one = int(torch.tensor(1.0).to(dtype).view(torch.uint8))
        a = torch.full((4, 4), one, dtype=torch.uint8)
        a[0, 0] = nan_byte
        if inf_byte is not None:
            a[1, 1] = inf_byte
        a = a.view(dtype)
        b = torch.ones(4, 3).to(dtype)
        sa = torch.tensor([[1.0], [1.0], [NAN], [1.0]])  # row 2's scale is NaN
        sb = torch.tensor([[1.0, INF, 1.0]])  # column 1's scale is +Inf
        got = t.call(GemmFp8Args(t.put(a), t.put(sa), t.put(b), t.put(sb), out_dtype=torch.float32,
                                 granularity="ROWWISE"))
        want = (f64(a) * sa.double()) @ (f64(b) * sb.double())
        _pattern("gemm_fp8", got, want)
    return run


def _gemm_fp8_mx_nan_scale(t: Target) -> None:
    a = torch.ones(2, 64).to(torch.float8_e4m3fn)
    b = torch.ones(3, 64).to(torch.float8_e4m3fn)
    sa = torch.full((2, 2), 127, dtype=torch.uint8)
    sa[1, 0] = 255  # the E8M0 NaN
    sb = torch.full((3, 2), 127, dtype=torch.uint8)
    if E8M0_DTYPE is not None:
        sa, sb = sa.view(E8M0_DTYPE), sb.view(E8M0_DTYPE)
    got = t.call(GemmFp8Args(t.put(a), t.put(sa), t.put(b), t.put(sb), trans_b=True, out_dtype=torch.bfloat16,
                             granularity="MX_BLOCKWISE", block_size=32))
    _pattern("gemm_fp8 (MX)", got, torch.tensor([[64.0] * 3, [NAN] * 3], dtype=F64))


def _grouped_untouched(t: Target) -> None:
    """NaN in rows past the last group and in the weights of an empty group reach nothing; NaN in a
    group's row reaches that output row only."""
    a = torch.ones(6, 2)
    a[5] = NAN  # past the groups
    a[1, 0] = NAN  # group 0, row 1
    b = torch.ones(3, 2, 2)
    b[1] = NAN  # group 1 is empty
    lens, offs = torch.tensor([2, 0, 3]), torch.tensor([0, 2, 2, 5])
    got = t.call(GroupedGemmArgs(t.put(a), t.put(b), t.put(lens), t.put(offs)))
    want = torch.full((6, 2), 2.0, dtype=F64)
    want[1] = NAN
    want[5] = 0.0
    _pattern("grouped_gemm", got, want)


def _grouped_wgrad_untouched(t: Target) -> None:
    a = torch.ones(6, 2)
    b = torch.ones(6, 3)
    a[5] = NAN  # past the groups: not read
    b[3, 1] = NAN  # group 1 (rows 2-4): C[1][:, 1] is NaN
    lens, offs = torch.tensor([2, 3]), torch.tensor([0, 2, 5])
    got = t.call(GroupedGemmVariableKArgs(t.put(a), t.put(b), t.put(lens), t.put(offs)))
    want = torch.stack([torch.full((2, 3), 2.0, dtype=F64), torch.full((2, 3), 3.0, dtype=F64)])
    want[1, :, 1] = NAN
    _pattern("grouped_gemm_variable_k", got, want)


def _grouped_fp8(dtype):
    def run(t: Target) -> None:
        a = torch.ones(5, 4)
        a[4] = NAN  # past the groups: not read
        a[1, 2] = NAN  # group 0: its output row is NaN
        a = a.to(dtype)
        b = torch.ones(2, 3, 4).to(dtype)
        lens, offs = torch.tensor([2, 2]), torch.tensor([0, 2, 4])
        got = t.call(GroupedGemmFp8Args(t.put(a), t.put(torch.tensor(1.0)), t.put(b), t.put(torch.tensor(1.0)),
                                        t.put(lens), t.put(offs), trans_b=True, out_dtype=torch.bfloat16))
        want = torch.full((5, 3), 4.0, dtype=F64)
        want[1] = NAN
        want[4] = 0.0
        _pattern("grouped_gemm_fp8", got, want)
    return run


# -- quantization -----------------------------------------------------------------------------------

def _quant_input() -> torch.Tensor:
    """Rows: NaN at column 1; +Inf at column 40; all zeros; finite (one element 480 for MX saturation)."""
    x = torch.linspace(-3, 3, 4 * 64).reshape(4, 64)
    x[0, 1] = NAN
    x[1, 40] = INF
    x[2] = 0.0
    return x


def _quantize_fp8(gran: str, dtype, axis, bs, two_d: bool):
    """Blocks with NaN or Inf dequantize to NaN, whole and alone; the rest stay finite and within
    the format's range; an all-zero block quantizes to zeros with a finite scale."""
    def run(t: Target) -> None:
        x = _quant_input()
        q, s = t.call(QuantizeFp8Args(t.put(x), dtype, gran, axis, bs, ScalingRecipe(use_2d_block=two_d)))
        fmax = float(torch.finfo(dtype).max)
        qv = f64(q)
        if gran == "MX_BLOCKWISE":
            byte = s.cpu().view(torch.uint8).to(torch.int64)
            if not (byte[0, 0] == 255 and byte[1, 1] == 255 and byte[0, 1] != 255 and byte[1, 0] != 255
                    and bool((byte[2:] != 255).all()) and bool((byte[2] == 0).all())):
                raise AssertionError(f"MX: 0xFF exactly on the blocks with NaN/Inf, 0 on all-zero blocks; got "
                                     f"{byte.tolist()}")
            if not (bool(qv[0, 1].isnan()) and float(qv[1, 40]) == fmax):
                raise AssertionError(f"MX: a NaN element stays NaN and +Inf saturates to {fmax}, got "
                                     f"{float(qv[0, 1])}, {float(qv[1, 40])}")
            deq = (qv * e8m0_values(s).repeat_interleave(32, dim=1))[:, :x.shape[1]]
            want_nan = torch.zeros(x.shape, dtype=torch.bool)
            want_nan[0, :32] = want_nan[1, 32:64] = True
        else:
            s64 = f64(s)
            deq = qv * (s64 if s64.dim() == 0 else _expand(s64, x.shape, gran, axis, bs, two_d))
            want_nan = _blocks(gran, axis, bs, two_d, x.shape, (0, 1)) | _blocks(gran, axis, bs, two_d, x.shape, (1, 40))
        deq, qv = deq[:, :x.shape[1]], qv[:, :x.shape[1]]  # MX data carries its padding to 128
        if not torch.equal(deq.isnan(), want_nan):
            raise AssertionError(f"{gran}: the blocks with NaN or Inf, and only they, must dequantize to NaN; NaN at "
                                 f"{deq.isnan().nonzero().tolist()[:8]}...")
        clean = ~want_nan
        if not bool(qv[clean].abs().le(fmax).all()):
            raise AssertionError(f"{gran}: finite inputs quantize within ±{fmax}")
        if not bool((qv[2][clean[2]] == 0).all()):
            raise AssertionError(f"{gran}: an all-zero block quantizes to zeros")
    return run


def _blocks(gran, axis, bs, two_d, shape, elem) -> torch.Tensor:
    """bool ``shape``: the elements that share a scale with ``elem``."""
    r, c = elem
    rows, cols = torch.arange(shape[0])[:, None], torch.arange(shape[1])[None, :]
    if gran == "TENSORWISE":
        return torch.ones(shape, dtype=torch.bool)
    if gran == "ROWWISE":
        return (rows == r).expand(shape) if axis in (-1, 1) else (cols == c).expand(shape)
    if two_d:
        return (rows // bs == r // bs) & (cols // bs == c // bs)
    if axis in (-1, 1):
        return (rows == r) & (cols // bs == c // bs)
    return (cols == c) & (rows // bs == r // bs)


def _expand(s, shape, gran, axis, bs, two_d):
    if gran == "ROWWISE":
        return s.expand(shape)
    if two_d:
        return s.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:shape[0], :shape[1]]
    ax = axis % 2
    return s.repeat_interleave(bs, ax).narrow(ax, 0, shape[ax])


def _mx_saturates(dtype, big):
    def run(t: Target) -> None:
        x = torch.ones(1, 32)
        x[0, 0] = big  # floor(log2(big)) = emax: the block is not scaled, and big > max saturates
        q, s = t.call(QuantizeFp8Args(t.put(x), dtype, "MX_BLOCKWISE", -1, 32))
        fmax = float(torch.finfo(dtype).max)
        if int(s.cpu().view(torch.uint8)[0, 0]) != 127 or float(f64(q)[0, 0]) != fmax:
            raise AssertionError(f"MX {dtype}: {big} must saturate to {fmax} (X = 0), got {float(f64(q)[0, 0])} "
                                 f"with scale byte {int(s.cpu().view(torch.uint8)[0, 0])}")
    return run


def _dequantize_fp8(t: Target) -> None:
    x = torch.tensor([[1.0, 2.0], [0.0, 1.0], [3.0, 0.5]]).to(torch.float8_e4m3fn)
    x = x.view(torch.uint8).clone()
    x[0, 0] = 0x7F  # the E4M3 NaN
    x = x.view(torch.float8_e4m3fn)
    s = torch.tensor([[1.0], [INF], [2.0]])  # row 1: Inf * 0 is NaN, Inf * 1 is Inf
    got = t.call(DequantizeFp8Args(t.put(x), t.put(s), torch.float32, "ROWWISE", -1))
    _pattern("dequantize_fp8", got, torch.tensor([[NAN, 2.0], [NAN, INF], [6.0, 1.0]], dtype=F64))


def _quantize_fp4(t: Target) -> None:
    x = _quant_input()
    q, s = t.call(QuantizeFp4Args(t.put(x), FLOAT4_E2M1FN_X2, -1))
    vals, byte = e2m1_values(q), s.cpu().view(torch.uint8).to(torch.int64)
    if not (byte[0, 0] == 255 and byte[1, 1] == 255 and bool((byte[2] == 0).all())):
        raise AssertionError(f"MXFP4: NaN/Inf blocks get the NaN scale 0xFF, zero blocks 0; got {byte.tolist()}")
    if not (vals[0, 1] == 0 and vals[1, 40] == 6.0 and bool((vals[2] == 0).all())):
        raise AssertionError("MXFP4: a NaN element is stored as +0 (E2M1 has no NaN), +Inf saturates to 6")


# -- normalization and activations ------------------------------------------------------------------

def _rmsnorm(t: Target) -> None:
    x = torch.ones(3, 4)
    x[0, 1] = NAN
    x[1, 2] = INF  # mean(s^2) = Inf: rstd 0, finite elements 0, the Inf one Inf * 0 = NaN
    y, rstd, _ = t.call(RmsNormFwdArgs(t.put(x), t.put(torch.ones(4)), 1e-6))
    _pattern("rmsnorm_fwd: rstd", rstd, torch.tensor([NAN, 0.0, (1 + 1e-6) ** -0.5], dtype=F64))
    want = torch.full((3, 4), (1 + 1e-6) ** -0.5, dtype=F64)
    want[0] = NAN
    want[1] = torch.tensor([0.0, 0.0, NAN, 0.0])
    _pattern("rmsnorm_fwd: y", y, want)


def _rmsnorm_bwd(t: Target) -> None:
    x = torch.ones(3, 4)
    dy = torch.ones(3, 4)
    dy[1, 3] = NAN  # row 1's dx and every dgamma (a sum over rows)
    dx, dg = t.call(RmsNormBwdArgs(t.put(dy), t.put(x), t.put(torch.ones(4)), t.put(torch.ones(3))))
    want = torch.zeros(3, 4, dtype=F64)
    want[1] = NAN
    _pattern("rmsnorm_bwd: dx", dx, want)
    _pattern("rmsnorm_bwd: dgamma", dg, torch.tensor([3.0, 3.0, 3.0, NAN], dtype=F64))


def _glu(kind: str, backward: bool):
    def run(t: Target) -> None:
        x = torch.tensor([[INF, -INF, NAN, 1.0, 1.0, 1.0, 1.0, 1.0],
                          [1.0, 1.0, 1.0, 1.0, INF, -INF, NAN, 0.0],
                          [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN]])
        probs = torch.tensor([1.0, 2.0, NAN])
        mask = torch.tensor([1, 1, 0])  # row 2 is inactive: never read, zeros out
        a, b = x.double()[:, :4], x.double()[:, 4:]
        if kind == "swiglu":
            sig = torch.sigmoid(a)
            act, dact = a * sig, sig * (1 + a * (1 - sig))
        else:
            cdf = 0.5 * (1 + torch.erf(a / 2**0.5))
            act, dact = a * cdf, cdf + a * torch.exp(-0.5 * a * a) / (2 * torch.pi) ** 0.5
        p = probs.double()[:, None]
        if not backward:
            want = act * b * p
            want[2] = 0.0
            _pattern(f"{kind}_fwd", t.call(GluFwdArgs(t.put(x), t.put(probs), t.put(mask))), want)
            return
        g = torch.ones(3, 4)
        gx, gp = t.call(GluBwdArgs(t.put(g), t.put(x), t.put(probs), t.put(mask)))
        want_x = torch.cat([b * p * dact, act * p], dim=1)
        want_x[2] = 0.0
        want_p = (act * b).sum(-1)
        want_p[2] = 0.0
        _pattern(f"{kind}_bwd: grad_x", gx, want_x)
        _pattern(f"{kind}_bwd: grad_probs", gp, want_p)
    return run


def _fused_fp8(primitive: str, gran: str):
    """The FP8-output forwards: a NaN in y (one element for a GLU, the whole row for RMSNorm, whose
    rstd is NaN) comes out NaN in every element of its blocks (their scale is NaN), other rows stay
    finite, an inactive GLU row is zeros with a finite scale."""
    def run(t: Target) -> None:
        bs = {"ROWWISE": None, "BLOCKWISE": 16, "MX_BLOCKWISE": 32}[gran]
        if primitive == "rmsnorm_fwd_fp8":
            x = torch.linspace(-2, 2, 3 * 32).reshape(3, 32)
            x[0, 3] = NAN
            args = RmsNormFwdFp8Args(t.put(x), None, torch.float8_e4m3fn, gran, bs)
        else:
            x = torch.linspace(-2, 2, 3 * 64).reshape(3, 64)
            x[0, 3] = NAN  # gate of row 0, element 3
            x[2] = NAN  # inactive
            args = GluFwdFp8Args(t.put(x), t.put(torch.ones(3)), torch.float8_e4m3fn, gran, bs,
                                 t.put(torch.tensor([1, 1, 0])))
        q, s = t.call(args)[:2]
        qv = f64(q)[:, :32]
        if gran == "MX_BLOCKWISE":
            sv = e8m0_values(s).repeat_interleave(32, dim=1)[:, :32]
        else:
            sv = f64(s).repeat_interleave(bs, dim=1)[:, :32] if bs else f64(s).expand(3, 32)
        deq = qv * sv
        block = torch.zeros(3, 32, dtype=torch.bool)
        block[0, : 32 if bs is None or primitive == "rmsnorm_fwd_fp8" else bs] = True  # a NaN x: the whole row's y
        if not torch.equal(deq.isnan(), block):
            raise AssertionError(f"{primitive} {gran}: NaN must fill row 0's block with the NaN and nothing else, got "
                                 f"NaN at {deq.isnan().nonzero().tolist()[:6]}...")
        if primitive != "rmsnorm_fwd_fp8" and not (bool((qv[2] == 0).all()) and bool(sv[2].isfinite().all())):
            raise AssertionError(f"{primitive}: an inactive row is zeros with a finite scale")
    return run


# -- attention --------------------------------------------------------------------------------------

def _attn_inputs(varlen: bool):
    g = torch.Generator().manual_seed(3)
    shape = (9, 2, 8) if varlen else (2, 5, 2, 8)  # THD: sequences [0, 3), [3, 7), rows 7-8 past the last
    return tuple(torch.randn(shape, generator=g) for _ in range(4))  # q, k, v, dout


def _attention(varlen: bool, where: str):
    """NaN placed in one sequence / batch / head (or in rows past the last sequence) reaches the
    rows that read it and no other: forward and backward."""
    def run(t: Target) -> None:
        q, k, v, dout = _attn_inputs(varlen)
        if varlen:
            cu = torch.tensor([0, 3, 7], dtype=torch.int32)
            extra = {"cu_seqlens_q": t.put(cu), "cu_seqlens_k": t.put(cu), "max_seqlen_q": 4, "max_seqlen_k": 4}
            clean_q, clean_k = slice(3, 7), slice(3, 7)  # sequence 1
            if where == "tail":
                k[7:], v[7:], q[7:], dout[7:] = NAN, NAN, NAN, NAN
                clean_q, clean_k = slice(0, 7), slice(0, 7)
            else:
                getattr_t = {"q": q, "k": k, "v": v, "dout": dout}[where]
                getattr_t[1, 0, 2] = NAN  # sequence 0, head 0
        else:
            extra = {}
            clean_q = clean_k = (1,)  # batch 1
            {"q": q, "k": k, "v": v, "dout": dout}[where][0, 2, 0, 1] = NAN  # batch 0, head 0
        put = t.put
        fwd = AttentionFwdArgs(put(q), put(k), put(v), **extra)
        out, lse = Target(t.backend, t.device, "attention_fwd").call(fwd)
        o = f64(out)
        sel_q = clean_q if varlen else (1,)
        if bool(o[sel_q].isnan().any()) or bool(f64(lse)[..., sel_q].isnan().any() if varlen else
                                                  f64(lse)[1].isnan().any()):
            raise AssertionError(f"attention_fwd: NaN in {where} reached another sequence / batch")
        if where in ("q", "k", "v") and not bool(o.isnan().any()):
            raise AssertionError(f"attention_fwd: NaN in {where} vanished")
        if varlen and where == "tail" and not (bool((o[7:] == 0).all()) and bool(f64(lse)[:, 7:].isneginf().all())):
            raise AssertionError("attention_fwd: rows past the last sequence: out 0, lse -inf")
        if t.primitive != "attention_bwd":
            return
        dq, dk, dv, _ = t.call(AttentionBwdArgs(put(dout), fwd.q, fwd.k, fwd.v, out, lse, **extra))
        for name, grad, rows in (("dq", dq, clean_q), ("dk", dk, clean_k), ("dv", dv, clean_k)):
            gr = f64(grad)
            if bool(gr[rows].isnan().any()):
                raise AssertionError(f"attention_bwd: {name}: NaN in {where} reached another sequence / batch")
        if varlen and where == "tail" and not all(bool((f64(d)[7:] == 0).all()) for d in (dq, dk, dv)):
            raise AssertionError("attention_bwd: rows past the last sequence get no gradient")
    return run


def _attention_sink(t: Target) -> None:
    q, k, v, _ = _attn_inputs(False)
    sink = torch.tensor([NAN, 0.5])
    out, lse = t.call(AttentionFwdArgs(t.put(q), t.put(k), t.put(v), sink=t.put(sink)))
    o = f64(out)
    if not (bool(o[:, :, 0].isnan().all()) and not bool(o[:, :, 1].isnan().any())):
        raise AssertionError("attention_fwd: a NaN sink makes its head NaN, and only its head")


def _attention_fp8(where: str):
    """FP8 attention quantizes per (batch, head, 64-row block): a NaN in q, k or v makes its block's
    scale NaN, so the rows of that (batch, head) that read the block are NaN; other batches and heads
    stay finite."""
    def run(t: Target) -> None:
        q, k, v, _ = _attn_inputs(False)
        {"q": q, "k": k, "v": v}[where][0, 2, 0, 1] = NAN  # batch 0, head 0
        out, lse = t.call(AttentionFp8FwdArgs(t.put(q), t.put(k), t.put(v)))
        o, ls = f64(out), f64(lse)
        if not bool(o[0, :, 0].isnan().all()):
            raise AssertionError(f"attention_fp8_fwd: NaN in {where}: every row of batch 0, head 0 reads its block")
        if bool(o[1].isnan().any()) or bool(o[0, :, 1].isnan().any()) or bool(ls[1].isnan().any()):
            raise AssertionError(f"attention_fp8_fwd: NaN in {where} reached another batch or head")
        if where == "v" and bool(ls.isnan().any()):
            raise AssertionError("attention_fp8_fwd: lse does not read v")
    return run


def _sparse_mla(where: str):
    """A NaN in a token's query makes that token's rows NaN; a NaN in a kv row reaches exactly the
    tokens that select it (in any channel: it is a key), and a kv row no token selects changes
    nothing."""
    def run(t: Target) -> None:
        g = torch.Generator().manual_seed(5)
        q, kv = torch.randn(4, 2, 12, generator=g), torch.randn(6, 12, generator=g)
        idx = torch.tensor([[0, 1], [2, -1], [1, 3], [4, 4]], dtype=torch.int32)
        if where == "q":
            q[1, 0, 3] = NAN
            hit = [False, True, False, False]
        elif where == "kv":
            kv[1, 10] = NAN  # a rope channel: part of the key, not of the value
            hit = [True, False, True, False]
        else:  # row 5: selected by no token
            kv[5, 0] = NAN
            hit = [False] * 4
        out, lse = t.call(SparseMlaFwdArgs(t.put(q), t.put(kv), t.put(idx), None, 8))
        o, ls = f64(out), f64(lse)
        for tok, want in enumerate(hit):
            rows_nan = bool(o[tok].isnan().any()) or bool(ls[tok].isnan().any())
            if rows_nan != want:
                raise AssertionError(f"sparse_mla_fwd: NaN in {where}: token {tok} "
                                     f"{'lost the NaN' if want else 'got a NaN it never reads'}")
        if where == "q" and bool(o[1, 1].isnan().any()):
            raise AssertionError("sparse_mla_fwd: a NaN in head 0's query reached head 1")
    return run


# -- cross entropy ----------------------------------------------------------------------------------

def _ce_lse(x: torch.Tensor) -> torch.Tensor:
    """float64 ``lse`` in the spec's convention: NaN for a row with a NaN or +Inf."""
    return torch.where(x.isnan().any(1) | x.isposinf().any(1), NAN, torch.logsumexp(x, 1))


def _cross_entropy(eps: float):
    def run(t: Target) -> None:
        x = torch.arange(35.0).reshape(7, 5) / 9
        x[0, 3] = NAN  # a NaN: lse and loss NaN
        x[1, 0] = INF  # +Inf: lse NaN (exp(Inf - Inf)), loss NaN
        x[2, 4] = -INF  # a masked class: finite; with smoothing its -Inf mean makes the loss +Inf
        x[3, 2] = -INF  # the target's own logit: loss +Inf, lse finite
        x[4] = NAN  # an ignored row: never read, zeros
        x[5] = -INF  # only -Inf: lse -Inf, loss -Inf - -Inf = NaN
        target = torch.tensor([1, 2, 0, 2, -100, 1, 3])
        loss, lse = t.call(CrossEntropyFwdArgs(t.put(x), t.put(target), -100, eps))
        x64 = x.double()
        x64[4] = 0.0
        want_lse = _ce_lse(x64)
        want = torch.zeros(7, dtype=F64)
        want += (1 - eps) * (want_lse - x64.gather(1, target.clamp(min=0)[:, None])[:, 0])
        if eps:
            want += eps * (want_lse - x64.mean(1))
        want[4], want_lse[4] = 0.0, 0.0
        _pattern(f"cross_entropy_fwd (label_smoothing={eps}): lse", lse, want_lse)
        _pattern(f"cross_entropy_fwd (label_smoothing={eps}): loss", loss, want)
    return run


def _cross_entropy_bwd(t: Target) -> None:
    eps = 0.1
    x = torch.arange(20.0).reshape(4, 5) / 7
    x[1, 3] = -INF  # a masked class: dlogits there is dloss * (0 - eps / V)
    x[2] = NAN  # an ignored row: logits, dloss and lse never read, zeros
    target = torch.tensor([0, 1, -100, 4])
    lse = _ce_lse(x.double()).float()
    lse[2] = NAN
    lse[3] = NAN  # a NaN lse: the row's dlogits are NaN
    dloss = torch.tensor([NAN, 2.0, NAN, 1.0])  # a NaN dloss: the row's dlogits are NaN
    got = t.call(CrossEntropyBwdArgs(t.put(dloss), t.put(x), t.put(target), t.put(lse), -100, eps))
    want = torch.exp(x.double() - lse.double()[:, None]) - eps / 5
    want[torch.arange(4), target.clamp(min=0)] -= 1 - eps
    want = want * dloss.double()[:, None]
    want[2] = 0.0
    _pattern("cross_entropy_bwd: dlogits", got, want)


# -- MoE --------------------------------------------------------------------------------------------

def _dispatch_combine(t: Target) -> None:
    """One process: dispatch copies each token's row bit for bit (NaN and Inf included), combine sums
    the rows returned for a token in IEEE (a NaN row makes its token NaN)."""
    x = torch.tensor([[NAN, 1.0], [INF, 2.0], [3.0, -INF]])
    idx = torch.tensor([[0, 1], [1, -1], [0, 0]])
    probs = torch.full((3, 2), 0.5)
    dispatch = Target(t.backend, t.device, "moe_dispatch")
    recv_x, _s, _i, _p, _tpe, handle = dispatch.call(MoeDispatchArgs(t.put(x), None, t.put(idx), t.put(probs), 2))
    _pattern("moe_dispatch", recv_x, x.double())
    if t.primitive != "moe_combine":
        return
    y = recv_x * 2.0
    combined, _ = t.call(MoeCombineArgs(y, handle))
    _pattern("moe_combine", combined, 2.0 * x.double())


def _permute(t: Target) -> None:
    tokens = torch.tensor([[NAN, 1.0], [INF, 2.0], [3.0, 4.0]])
    row_map = torch.tensor([[1, -1, 0, -1, 1], [0, 2, 0, 1, 2], [-1, -1, -1, -1, 0]], dtype=torch.int32)
    out, _, _ = t.call(MoePermuteArgs(t.put(tokens), t.put(row_map), 4))
    want = torch.tensor([[INF, 2.0], [NAN, 1.0], [INF, 2.0], [0.0, 0.0]], dtype=F64)  # row 3: padding
    _pattern("moe_permute", out, want)


def _unpermute(t: Target) -> None:
    permuted = torch.tensor([[1.0, 2.0], [NAN, 1.0], [3.0, 4.0], [NAN, NAN]])  # row 3: padding, never read
    row_map = torch.tensor([[0, 1, 0, 1, 2], [2, -1, 1, -1, 1]], dtype=torch.int32)
    out, _ = t.call(MoeUnpermuteArgs(t.put(permuted), t.put(row_map)))
    _pattern("moe_unpermute", out, torch.tensor([[NAN, 3.0], [3.0, 4.0]], dtype=F64))


def _routing(t: Target) -> None:
    logits = torch.tensor([[0.1, NAN, 0.3, 0.2], [0.1, 0.2, 0.3, 0.4]])
    scores, probs, rmap = t.call(MoeRoutingFwdArgs(t.put(logits), 2))
    s, p, m = f64(scores), f64(probs), rmap.cpu()
    if not (bool(s[0].isnan().all()) and bool(s[1].isfinite().all()) and bool(p[1].isfinite().all())):
        raise AssertionError("moe_routing_fwd: a NaN logit makes its row's scores NaN, and only its row's")
    if m.sum(-1).tolist() != [2, 2] or not bool(m[0, 1]) or not bool(p[0, 1].isnan()):
        raise AssertionError("moe_routing_fwd: a NaN logit ranks first (torch.topk's order) and its prob is NaN; "
                             f"exactly topk experts per row, got {m.tolist()}")


# -- the case table ---------------------------------------------------------------------------------

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NAN_CASES: list[NanCase] = [
    NanCase("gemm-nan-inf-fp32", "gemm", _gemm_nan_inf(torch.float32)),
    NanCase("gemm-nan-inf-bf16", "gemm", _gemm_nan_inf(torch.bfloat16)),
    NanCase("gemm-overflow-fp16", "gemm", _gemm_overflow),
    NanCase("gemm-gap-accumulate", "gemm", _gemm_gap_and_out),
    NanCase("gemm_fp8-e4m3", "gemm_fp8", _gemm_fp8_nan(E4M3, 0x7F, None)),
    NanCase("gemm_fp8-e5m2", "gemm_fp8", _gemm_fp8_nan(E5M2, 0x7F, 0x7C)),
    NanCase("gemm_fp8-mx-nan-scale", "gemm_fp8", _gemm_fp8_mx_nan_scale),
    NanCase("grouped_gemm-untouched", "grouped_gemm", _grouped_untouched),
    NanCase("grouped_gemm_variable_k-untouched", "grouped_gemm_variable_k", _grouped_wgrad_untouched),
    NanCase("grouped_gemm_fp8-e4m3", "grouped_gemm_fp8", _grouped_fp8(torch.float8_e4m3fn)),
    NanCase("grouped_gemm_fp8-e5m2", "grouped_gemm_fp8", _grouped_fp8(torch.float8_e5m2)),
    *[NanCase(f"quantize_fp8-{cid}-{str(dt)[-5:]}", "quantize_fp8", _quantize_fp8(gran, dt, axis, bs, two_d))
      for cid, gran, axis, bs, two_d in (("tensorwise", "TENSORWISE", None, None, False),
                                         ("rowwise", "ROWWISE", -1, None, False),
                                         ("colwise", "ROWWISE", 0, None, False),
                                         ("block16-row", "BLOCKWISE", -1, 16, False),
                                         ("block16-col", "BLOCKWISE", 0, 16, False),
                                         ("block16-2d", "BLOCKWISE", None, 16, True),
                                         ("mx", "MX_BLOCKWISE", -1, 32, False))
      for dt in (E4M3, E5M2)],
    NanCase("quantize_fp8-mx-saturates-e4m3", "quantize_fp8", _mx_saturates(E4M3, 480.0)),
    NanCase("quantize_fp8-mx-saturates-e5m2", "quantize_fp8", _mx_saturates(E5M2, 61440.0)),
    NanCase("dequantize_fp8", "dequantize_fp8", _dequantize_fp8),
    NanCase("rmsnorm_fwd", "rmsnorm_fwd", _rmsnorm),
    NanCase("rmsnorm_bwd", "rmsnorm_bwd", _rmsnorm_bwd),
    *[NanCase(f"{prim}-{gran.lower()}", prim, _fused_fp8(prim, gran))
      for prim in ("rmsnorm_fwd_fp8", "swiglu_fwd_fp8", "geglu_fwd_fp8")
      for gran in ("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")],
    *[NanCase(f"{kind}_{'bwd' if bwd else 'fwd'}", f"{kind}_{'bwd' if bwd else 'fwd'}", _glu(kind, bwd))
      for kind in ("swiglu", "geglu") for bwd in (False, True)],
    *[NanCase(f"{prim}-{'varlen' if varlen else 'dense'}-{where}", prim, _attention(varlen, where))
      for prim in ("attention_fwd", "attention_bwd") for varlen in (False, True)
      for where in (("q", "k", "v", "tail") if varlen else ("q", "k", "v")) + (("dout",) if prim == "attention_bwd"
                                                                                 else ())],
    NanCase("attention_fwd-sink", "attention_fwd", _attention_sink),
    *[NanCase(f"attention_fp8_fwd-{where}", "attention_fp8_fwd", _attention_fp8(where)) for where in ("q", "k", "v")],
    *[NanCase(f"sparse_mla_fwd-{where}", "sparse_mla_fwd", _sparse_mla(where)) for where in ("q", "kv", "unselected")],
    NanCase("moe_dispatch", "moe_dispatch", _dispatch_combine),
    NanCase("moe_combine", "moe_combine", _dispatch_combine),
    NanCase("moe_permute", "moe_permute", _permute),
    NanCase("moe_unpermute", "moe_unpermute", _unpermute),
    NanCase("moe_routing_fwd", "moe_routing_fwd", _routing),
    NanCase("cross_entropy_fwd", "cross_entropy_fwd", _cross_entropy(0.0)),
    NanCase("cross_entropy_fwd-label_smoothing", "cross_entropy_fwd", _cross_entropy(0.1)),
    NanCase("cross_entropy_bwd", "cross_entropy_bwd", _cross_entropy_bwd),
]
if FLOAT4_E2M1FN_X2 is not None:
    NAN_CASES.append(NanCase("quantize_fp4", "quantize_fp4", _quantize_fp4))


def nan_policy_suite(backend: str, device: torch.device | str | None = None) -> type:
    """A pytest class running every NaN/Inf policy case against ``backend`` on ``device``."""
    name = normalize_backend_name(backend)
    dev = conformance_device(device)

    @pytest.mark.parametrize("case", NAN_CASES, ids=[c.id for c in NAN_CASES])
    def test_case(self, case: NanCase) -> None:
        missing = _device_unavailable(dev)
        if missing is not None:
            pytest.skip(missing)
        _, reason = _served(name, (case.primitive,))
        if reason is not None:
            pytest.skip(reason)
        try:
            case.run(Target(name, dev, case.primitive))
        except Declined as exc:
            pytest.skip(f"declined: {exc}")

    return type(f"TestNanPolicy{name.title().replace('_', '')}", (), {"backend": name, "device": dev,
                                                                       "test_case": test_case})



