"""The package's Python side end to end on the CPU, over a simulated library (``fake_ext``: the
extension's interface computed in float64 on raw memory, with cuBLASLt's FP8 "TN" rule enforced):
the kernels called directly against float64 math / turbo's reference, and turbo-core's conformance
cases (public ops, forward and backward) with the kernels pinned as backend BLASLTSIM.

This checks every pointer, leading dim, transpose, copy, scale layout and grouped offset the Python
side hands over, under the semantics the package documents for the library; that the real library
agrees with those semantics is what the ``gpu`` tests check on the GPU machine.
"""

from __future__ import annotations

import contextvars
import importlib
import itertools

import pytest
import torch
from fake_ext import simulate

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.plugins.host import reset_host
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference_gemm_fp8
from turbo_core.testing.numerics import assert_close_to_reference
from turbo_hipblaslt import api, gemm, gemm_fp8, grouped_gemm, relayout

F64 = torch.float64


@pytest.fixture
def sim(monkeypatch):
    fake = simulate(monkeypatch)
    monkeypatch.setenv("TURBO_PLUGINS", "sim_plugin")
    reset_host()
    yield fake
    reset_host()


@pytest.fixture
def fp32_opt_in(monkeypatch):
    """Serve FP8 GEMMs with fp32 results on the simulated sm90 (declined there by default: Hopper's FP8
    accumulation is imprecise). The simulated library computes in float64, so an fp32 result checks the
    Python side's pointers and scales at fp32's tolerance."""
    monkeypatch.setenv("TURBO_HIPBLASLT_FP8_FP32_OUT", "1")


def view(t: torch.Tensor, how: str) -> torch.Tensor:
    if how == "col":
        return t.t().contiguous().t()
    if how == "padded":
        buf = torch.zeros(t.shape[0], t.shape[1] + 3, dtype=t.dtype)
        buf[:, 1:1 + t.shape[1]] = t
        return buf[:, 1:1 + t.shape[1]]
    return t.contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gemm_every_layout(sim, dtype):
    g = torch.Generator().manual_seed(1)
    m, n, k = 7, 5, 9
    for ta, tb, tc in itertools.product([False, True], repeat=3):
        for how in ("row", "col", "padded"):
            a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(dtype)
            b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(dtype)
            args = GemmArgs(view(a, how), view(b, how), ta, tb, None, tc)
            assert gemm.can_handle(args) is None
            c = gemm.gemm(args)
            want = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
            assert c.dtype == dtype and c.is_contiguous()
            assert_close_to_reference(c, want.t() if tc else want, dtype=dtype)
    assert len(sim.calls) == 24


def test_gemm_repeats_launch_from_the_template_with_this_calls_pointers(sim):
    """A second call of the same metadata takes the launch template: the same call tuple as a first
    call would build, but for the data pointers (this call's), and the same float64-checked results."""
    g = torch.Generator().manual_seed(3)
    m, n, k = 6, 5, 7
    for ta, tb, tc in itertools.product([False, True], repeat=3):
        for how in ("row", "col"):
            gemm._templates.clear()
            for rep in range(3):
                a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(torch.bfloat16)
                b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(torch.bfloat16)
                args = GemmArgs(view(a, how), view(b, how), ta, tb, torch.float16 if rep == 2 else None, tc)
                c = gemm.gemm(args)
                want = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
                assert c.dtype == (torch.float16 if rep == 2 else torch.bfloat16)
                assert_close_to_reference(c, want.t() if tc else want, dtype=c.dtype)
            assert len(gemm._templates) == 2  # bf16 and fp16 results: two templates
            first, second = sim.calls[-3], sim.calls[-2]  # fresh, then from the template
            assert second._replace(a=first.a, b=first.b, d=first.d) == first


@pytest.mark.parametrize("dtype,out_dtype,route", [(torch.bfloat16, torch.float32, "direct"),
                                                   (torch.float32, torch.bfloat16, "fp32 temporary"),
                                                   (torch.bfloat16, torch.float16, "fp32 temporary")])
def test_gemm_accumulate_and_result_dtypes(sim, dtype, out_dtype, route):
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(6, 8, generator=g).to(dtype), torch.randn(8, 5, generator=g).to(dtype)
    start = torch.randn(5, 6, generator=g).to(out_dtype)
    out = view(start.clone(), "col")
    want = a.double() @ b.double()
    assert gemm.gemm(GemmArgs(a, b, trans_c=True, out=out)) is out
    assert_close_to_reference(out, start.double() + want.t(), dtype=out_dtype)
    assert sim.calls[-1].d_type == 0  # the library writes fp32 in both routes here (out fp32, or the temporary)
    assert sim.calls[-1].beta == (1.0 if route == "direct" else 0.0)
    c = gemm.gemm(GemmArgs(a, b, out_dtype=out_dtype))
    assert c.dtype == out_dtype
    assert_close_to_reference(c, want, dtype=out_dtype)


def test_gemm_empty_sum_is_zero(sim):
    a, b = torch.ones(3, 0), torch.ones(0, 4)
    assert torch.equal(gemm.gemm(GemmArgs(a, b)), torch.zeros(3, 4))
    out = torch.full((3, 4), 2.0)
    assert gemm.gemm(GemmArgs(a, b, out=out)) is out and torch.all(out == 2.0)
    assert sim.calls == []


def _fp8(gran, ta, tb, m, n, k, a2d=False, b2d=False, seed=0, dtypes=(torch.float8_e4m3fn,) * 2):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(*((k, m) if ta else (m, k)), generator=g) * 3).to(dtypes[0])
    b = (torch.randn(*((n, k) if tb else (k, n)), generator=g) * 3).to(dtypes[1])

    def scale(*shape):
        return torch.rand(*shape, generator=g) + 0.25

    if gran == "TENSORWISE":
        return a, scale(()), b, scale(())
    if gran == "ROWWISE":
        return a, scale(*((1, m) if ta else (m, 1))), b, scale(*((n, 1) if tb else (1, n)))
    sa = scale(-(-a.shape[0] // 128), -(-a.shape[1] // 128)) if a2d else scale(*((k // 128, m) if ta else (m, k // 128)))
    sb = scale(-(-b.shape[0] // 128), -(-b.shape[1] // 128)) if b2d else scale(*((n, k // 128) if tb else (k // 128, n)))
    return a, sa, b, sb


@pytest.mark.parametrize("gran,a2d,b2d,mnk", [
    ("TENSORWISE", False, False, (5, 7, 32)), ("ROWWISE", False, False, (5, 7, 32)),
    ("BLOCKWISE", False, True, (128, 256, 640)), ("BLOCKWISE", True, False, (256, 128, 384)),
    ("BLOCKWISE", False, False, (64, 48, 384)),
])
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("trans_c", [False, True])
def test_gemm_fp8_every_layout_vs_reference(sim, fp32_opt_in, gran, a2d, b2d, mnk, ta, tb, trans_c):
    m, n, k = mnk
    a, sa, b, sb = _fp8(gran, ta, tb, m, n, k, a2d, b2d)
    bs = 128 if gran == "BLOCKWISE" else None
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, F64, gran, bs, trans_c))  # float64
    args = GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, bs, trans_c)
    assert gemm_fp8.can_handle(args) is None
    got = gemm_fp8.gemm_fp8(args)
    assert_close_to_reference(got, want, dtype=torch.float32)
    call = sim.calls[-1]
    assert call.transa and not call.transb  # the TN layout, by copies where needed
    assert (call.a_scale_mode, call.b_scale_mode) != (-1, -1)
    assert len(sim.relayouts) == int(ta) + int(not tb)  # each non-K-contiguous operand re-laid by the library
    assert all(r[3] == 1 for r in sim.relayouts)  # as a transpose
    start = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    acc = start.clone().bfloat16()
    gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, None, gran, bs, trans_c, acc))
    assert_close_to_reference(acc, start.bfloat16().double() + want, dtype=torch.bfloat16)


@pytest.mark.parametrize("gran,a2d,b2d,mnk", [
    ("TENSORWISE", False, False, (5, 7, 32)), ("ROWWISE", False, False, (5, 7, 32)),
    ("BLOCKWISE", False, True, (128, 256, 640)), ("BLOCKWISE", True, False, (256, 128, 384)),
])
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False)])
def test_gemm_fp8_repeats_launch_from_the_template_with_this_calls_pointers(sim, fp32_opt_in, gran, a2d, b2d, mnk,
                                                                           ta, tb):
    """A second call of the same metadata takes the launch template: the same call tuple as the first
    call's but for the data and scale pointers (this call's: its own copies and scale layouts), and
    results against float64 math on each call's own inputs."""
    m, n, k = mnk
    bs = 128 if gran == "BLOCKWISE" else None
    gemm_fp8._templates.clear()
    kept = []  # every call's inputs and result stay alive: no call's addresses are reused by the next
    for rep in range(3):
        a, sa, b, sb = _fp8(gran, ta, tb, m, n, k, a2d, b2d, seed=rep)
        want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, F64, gran, bs))
        got = gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, bs))
        kept.append((a, sa, b, sb, got))
        assert_close_to_reference(got, want, dtype=torch.float32)
    assert len(gemm_fp8._templates) == 1
    first, second = sim.calls[-3], sim.calls[-2]  # fresh, then from the template (each call's own pointers:
    # the results above, of each call's own inputs, depend on them)
    assert second._replace(a=first.a, b=first.b, d=first.d, a_scale=first.a_scale, b_scale=first.b_scale) == first
    assert len(sim.relayouts) == 3 * (int(ta) + int(not tb))  # every call copies its own operands


@pytest.mark.parametrize("how", ["col", "padded", "padded_col"])
def test_relayout_copies_every_byte_pattern(sim, how):
    bits = torch.randint(0, 256, (37, 53), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))
    x = bits.view(torch.float8_e4m3fn)  # NaN and negative-zero patterns included
    if how == "col":
        v = x.t().contiguous().t()
    else:
        buf = torch.zeros(60, 60, dtype=torch.uint8).view(torch.float8_e4m3fn)
        v = buf[2:39, 1:54] if how == "padded" else buf.t()[1:38, 2:55]
        v.view(torch.uint8).copy_(bits)
    got = relayout.contiguous(v)
    assert got.is_contiguous() and got.dtype == x.dtype
    assert torch.equal(got.view(torch.uint8), bits)
    assert sim.relayouts == [(53, 37, v.stride(1) if how != "padded" else v.stride(0), int(how != "padded"), 53)]


def test_relayout_falls_back_to_torch_where_the_library_cannot(sim, fp32_opt_in):
    sim.transform_status = "CUBLAS_STATUS_NOT_SUPPORTED"
    a, sa, b, sb = _fp8("TENSORWISE", True, False, 5, 7, 32)
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, True, False, F64))
    got = gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, True, False, torch.float32))
    assert_close_to_reference(got, want, dtype=torch.float32)
    assert sim.relayouts == [] and "NOT_SUPPORTED" in relayout.fallback_reasons()[0]
    sim.transform_status = "CUBLAS_STATUS_EXECUTION_FAILED"  # not asked again once it could not
    gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, True, False, torch.float32))


def test_relayout_raises_other_library_errors(sim):
    sim.transform_status = "CUBLAS_STATUS_EXECUTION_FAILED"
    x = torch.zeros(8, 16, dtype=torch.uint8).view(torch.float8_e4m3fn).t()
    with pytest.raises(sim.BlasLtError, match="EXECUTION_FAILED"):
        relayout.contiguous(x)


def test_gemm_fp8_hybrid_and_declined_pairs(sim, fp32_opt_in):
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    a, sa, b, sb = _fp8("TENSORWISE", False, True, 4, 6, 32, dtypes=(e5, e4))
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, F64))
    assert_close_to_reference(gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, torch.float32)), want,
                              dtype=torch.float32)
    a, sa, b, sb = _fp8("TENSORWISE", False, True, 4, 6, 32, dtypes=(e5, e5))
    assert "E5M2 x E5M2" in gemm_fp8.can_handle(GemmFp8Args(a, sa, b, sb, False, True, torch.float32))


@pytest.mark.parametrize("trans_b", [False, True])
def test_grouped_gemm_and_variable_k(sim, trans_b):
    g = torch.Generator().manual_seed(4)
    lens = [3, 0, 5, 1]
    m, k, n = sum(lens) + 2, 6, 4
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(len(lens), *((n, k) if trans_b else (k, n)), generator=g).bfloat16()
    dy = torch.randn(m, n, generator=g).bfloat16()
    lens_t = torch.tensor(lens)
    offs = torch.tensor([0, 3, 3, 8, 9])
    out = grouped_gemm.grouped_gemm(GroupedGemmArgs(a, b, lens_t, offs, trans_b))
    for i, (s, e) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)):
        w = b[i].double().t() if trans_b else b[i].double()
        assert_close_to_reference(out[s:e], a[s:e].double() @ w, dtype=torch.bfloat16)
    assert torch.count_nonzero(out[9:]) == 0
    for trans_c in (False, True):
        wg = grouped_gemm.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, dy, lens_t, offs, trans_c))
        main = torch.ones(len(lens), *((n, k) if trans_c else (k, n)))
        grouped_gemm.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, dy, lens_t, offs, trans_c, out=main))
        for i, (s, e) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)):
            c = a[s:e].double().t() @ dy[s:e].double()
            c = c.t() if trans_c else c
            assert_close_to_reference(wg[i], c, dtype=torch.bfloat16)
            assert_close_to_reference(main[i], c + 1.0, dtype=torch.float32)


@pytest.mark.parametrize("bias,activation", [(True, None), (False, "gelu"), (True, "gelu")])
def test_epilogue_api(sim, bias, activation):
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 3, 8, generator=g).bfloat16(), torch.randn(5, 8, generator=g).bfloat16()
    bvec = torch.randn(5, generator=g).bfloat16() if bias else None
    want = x.double().reshape(6, 8) @ w.double().t() + (bvec.double() if bias else 0.0)
    if activation:
        want = torch.nn.functional.gelu(want, approximate="tanh")
    y = api.linear(x, w, bvec, activation=activation)
    assert y.shape == (2, 3, 5)
    assert_close_to_reference(y.reshape(6, 5), want, dtype=torch.bfloat16)
    assert sim.calls[-1].epilogue == {(True, None): 1, (False, "gelu"): 2, (True, "gelu"): 3}[(bias, activation)]


def test_epilogue_api_rejects_bad_arguments(sim):
    x, w = torch.randn(4, 8).bfloat16(), torch.randn(5, 8).bfloat16()
    with pytest.raises(ValueError, match=r"bias: expected shape \(5,\)"):
        api.gemm(x, w, trans_b=True, bias=torch.zeros(4).bfloat16())
    with pytest.raises(TypeError, match="bias: expected the result dtype"):
        api.gemm(x, w, trans_b=True, bias=torch.zeros(5))
    with pytest.raises(ValueError, match="bias: not with trans_c"):
        api.gemm(x, w, trans_b=True, trans_c=True, bias=torch.zeros(5).bfloat16())
    with pytest.raises(ValueError, match="out: accumulating"):
        api.gemm(x, w, trans_b=True, out=torch.zeros(4, 5).bfloat16(), activation="gelu")
    with pytest.raises(ValueError, match="activation"):
        api.gemm(x, w, trans_b=True, activation="relu")


# -- turbo-core's conformance cases, the kernels pinned as BLASLTSIM ------------------------------------------

def _cases():
    out = []
    for fam in ("gemm", "gemm_fp8", "grouped_gemm"):
        out += [c for c in importlib.import_module(f"turbo_core.testing.cases.{fam}").CASES
                if {"gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_variable_k"} & set(c.primitives)]
    return out


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conformance_case(sim, fp32_opt_in, case):
    from turbo_core.dispatch.dispatcher import BackendError
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.testing.conformance import _served

    served, reason = _served("BLASLTSIM", case.primitives)
    assert reason is None, reason
    with use_backend("BLASLTSIM", primitives=served):
        try:
            case.run(device=torch.device("cpu"))
        except BackendError as exc:
            if "cannot run this call" not in str(exc):
                raise
            pytest.skip(f"declined: {exc}")
    assert sim.calls, "the simulated library was never called"


def test_fp8_fp32_result_is_declined_through_the_dispatcher_without_the_opt_in(sim, monkeypatch):
    # The sm90 default: a pinned HIPBLASLT (here BLASLTSIM) refuses an fp32 FP8 result with the reason,
    # and serves the same call with a bf16 result.
    from turbo_core.dispatch.dispatcher import BackendError, call
    from turbo_core.dispatch.manager import use_backend

    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    a, sa, b, sb = _fp8("TENSORWISE", False, True, 16, 32, 64)
    with use_backend("BLASLTSIM", primitives=("gemm_fp8",)):
        with pytest.raises(BackendError, match=r"no fp32 result \(out_dtype=float32 or an fp32 out\) on sm90"):
            call("gemm_fp8", GemmFp8Args(a, sa, b, sb, False, True, torch.float32))
        with pytest.raises(BackendError, match="TURBO_HIPBLASLT_FP8_FP32_OUT=1"):
            call("gemm_fp8", GemmFp8Args(a, sa, b, sb, False, True, None, out=torch.zeros(16, 32)))
        got = call("gemm_fp8", GemmFp8Args(a, sa, b, sb, False, True, torch.bfloat16))
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, F64))
    assert_close_to_reference(got, want, dtype=torch.bfloat16)


# -- the op's fused wgrad: FP8 accumulated into an fp32 main_grad ----------------------------------------------

FUSED_CASE = "gemm_fp8-BLOCKWISE-E4M3-fused-wgrad-128x256x384-NT-bfloat16"
FP32_DECLINE = r"no fp32 result \(out_dtype=float32 or an fp32 out\) on sm90"
FP32_NEEDLE_SIM = "no fp32 result (out_dtype=float32 or an fp32 out) on sm90"


def test_fused_wgrad_call_into_fp32_main_grad_is_declined(sim, monkeypatch):
    # The primitive call turbo_core.ops.gemm_fp8's fused wgrad makes for the NT 128x256x384 BLOCKWISE case:
    # dB = op(A).T @ dC (GEMM M=384, N=256, contracting over the op's M=128), a = A's 1x128-along-M copy
    # [128, 384] (trans_a), b = dC [128, 256], written transposed (trans_c) into b.main_grad [256, 384] fp32,
    # out_dtype=None: the fp32 target is only in `out`.
    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    a, sa, b, sb = _fp8("BLOCKWISE", True, False, 384, 256, 128)
    assert (tuple(a.shape), tuple(sa.shape), tuple(b.shape), tuple(sb.shape)) == ((128, 384), (1, 384), (128, 256),
                                                                                  (1, 256))
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, True, False, F64, "BLOCKWISE", 128, True))  # [256, 384]

    def fused(main_grad):
        return GemmFp8Args(a, sa, b, sb, True, False, None, "BLOCKWISE", 128, True, main_grad)

    main_grad = torch.ones(256, 384)
    reason = gemm_fp8.can_handle(fused(main_grad))
    assert isinstance(reason, str) and FP32_NEEDLE_SIM in reason and "TURBO_HIPBLASLT_FP8_FP32_OUT=1" in reason
    with pytest.raises(ValueError, match=FP32_DECLINE):  # called directly (no dispatcher): refused too
        gemm_fp8.gemm_fp8(fused(main_grad))
    assert sim.calls == [] and torch.all(main_grad == 1.0)
    main_bf16 = torch.ones(256, 384, dtype=torch.bfloat16)  # a bf16 accumulation target is served
    assert gemm_fp8.can_handle(fused(main_bf16)) is None
    assert gemm_fp8.gemm_fp8(fused(main_bf16)) is main_bf16
    assert_close_to_reference(main_bf16, want + 1.0, dtype=torch.bfloat16)
    assert (sim.calls[-1].d_type, sim.calls[-1].beta) == (2, 1.0)
    monkeypatch.setenv("TURBO_HIPBLASLT_FP8_FP32_OUT", "1")  # the opt-in serves it (exact in the simulator)
    assert gemm_fp8.can_handle(fused(main_grad)) is None
    gemm_fp8.gemm_fp8(fused(main_grad))
    assert_close_to_reference(main_grad, want + 1.0, dtype=torch.float32)
    assert (sim.calls[-1].d_type, sim.calls[-1].beta) == (0, 1.0)


def test_fused_wgrad_case_pinned_declines_the_fp32_main_grad(sim, monkeypatch):
    # The fused-wgrad conformance case through the public op with gemm_fp8 pinned: the forward and the
    # dgrad (bf16 results) are served, the wgrad into the fp32 main_grad is refused before a launch.
    from turbo_core.dispatch.dispatcher import BackendError
    from turbo_core.dispatch.manager import use_backend

    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    case = next(c for c in CASES if c.id == FUSED_CASE)
    with use_backend("BLASLTSIM", primitives=("gemm_fp8",)):
        with pytest.raises(BackendError, match=f"cannot run this call: HIPBLASLT gemm_fp8: {FP32_DECLINE}"):
            case.run(device=torch.device("cpu"))
    assert [c.d_type for c in sim.calls] == [2, 2]  # forward, dgrad: bf16


def test_a_backward_run_outside_the_pin_reaches_another_backend(sim, monkeypatch):
    # Why a pin needs the backward on the calling thread: autograd runs a CUDA backward on its device worker
    # thread, where use_backend's context variable is unset, so the dgrad and the wgrad go through the
    # default selection (cuda: HIPBLASLT, which declines the fp32 main_grad, then TRITON) and the wgrad runs
    # elsewhere. Reproduced here by running the backward in an empty context; turbo_core.testing.conformance
    # runs its cases with torch.autograd.set_multithreading_enabled(False) (the backward on the calling thread).
    from turbo_core.dispatch import dispatcher
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.ops.gemm_fp8 import gemm_fp8 as op

    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    g = torch.Generator().manual_seed(9)
    a = torch.randn(128, 128, generator=g).bfloat16().requires_grad_()
    b = torch.randn(128, 128, generator=g).bfloat16().requires_grad_()
    b.main_grad = torch.zeros(128, 128)
    dispatcher.clear_warnings()
    with use_backend("BLASLTSIM", primitives=("gemm_fp8",)):
        c = op(a, b, False, True, config=Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128),
               fuse_bgrad_accum_pattern="megatron")
        contextvars.Context().run(c.backward, torch.ones_like(c))
    assert len(sim.calls) == 1  # the forward only
    ran = {backend: n for (prim, backend, _), n in dispatcher.stats().items() if prim == "gemm_fp8"}
    assert ran.pop("BLASLTSIM") == 1 and sum(ran.values()) == 2, ran  # dgrad and wgrad: not the pinned backend
    assert torch.count_nonzero(b.main_grad) > 0
