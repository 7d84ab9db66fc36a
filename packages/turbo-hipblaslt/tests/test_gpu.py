"""The compiled path on a GPU (``gpu`` marker: skipped without one, and skipped with the backend's
reason where the extension cannot be loaded; on the GPU machine run with ``TURBO_HIPBLASLT_JIT=1``
unless the wheel was built with a toolkit). Every result is compared with float64 math on the CPU
(FP8: turbo's reference ``gemm_fp8``, float64 on the CPU, on the same quantized operands), at the
tolerances of ``turbo_core.testing.numerics`` for the result dtype; FP8 failures carry the SNR and the
largest errors in their message, so a mapping bug (errors of the result's size) and the library's
accumulation precision (errors of a few 1e-4 of it) are told apart from the log alone.

Grids: odd sizes (tile edges), every layout including transposed and strided views (the BLAS
mapping), every dtype pair the kernels serve, beta = 1 accumulation, each FP8 granularity the library
supports with every operand layout (the Hopper "TN" copies), grouped calls with empty groups and a
tail, and the epilogues.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference_gemm_fp8
from turbo_core.testing.numerics import assert_close_to_reference, error_stats
from turbo_hipblaslt.matmul_args import Side

pytestmark = pytest.mark.gpu
F64 = torch.float64


@pytest.fixture(scope="module")
def ext():
    from turbo_hipblaslt._ext import EXTENSION
    from turbo_hipblaslt.probe import probe

    reason = probe()
    if reason:
        pytest.skip(f"HIPBLASLT unavailable: {reason}")
    return EXTENSION.load()


def view(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values stored contiguous, column-major, or as a slice of a wider buffer."""
    if how == "col":
        return t.t().contiguous().t()
    if how == "padded":
        buf = torch.zeros(t.shape[0], t.shape[1] + 5, dtype=t.dtype, device=t.device)
        buf[:, 2:2 + t.shape[1]] = t
        return buf[:, 2:2 + t.shape[1]]
    return t.contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(67, 45, 93), (1, 33, 17), (128, 96, 80)])
def test_gemm_every_layout(ext, dtype, m, n, k):
    from turbo_hipblaslt import gemm as kernel

    g = torch.Generator().manual_seed(m + n + k)
    for ta, tb, tc in itertools.product([False, True], repeat=3):
        for how in ("row", "col", "padded"):
            a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(dtype)
            b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(dtype)
            want = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
            args = GemmArgs(view(a.cuda(), how), view(b.cuda(), how), ta, tb, None, tc)
            reason = kernel.can_handle(args)
            if how != "row" and reason is not None and "heuristic" in reason:
                continue  # a layout the library has no kernel for (odd leading dims): declined, not wrong
            assert reason is None, reason
            c = kernel.gemm(args)
            assert c.dtype == dtype and c.is_contiguous()
            assert_close_to_reference(c.cpu(), want.t() if tc else want, dtype=dtype, what=f"{ta}{tb}{tc} {how}")


@pytest.mark.parametrize("dtype,out_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                             (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16)])
@pytest.mark.parametrize("trans_c", [False, True])
def test_gemm_accumulates_into_out(ext, dtype, out_dtype, trans_c):
    from turbo_hipblaslt import gemm as kernel

    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(37, 53, generator=g).to(dtype), torch.randn(53, 21, generator=g).to(dtype)
    start = torch.randn(*((21, 37) if trans_c else (37, 21)), generator=g).to(out_dtype)
    out = view(start.cuda(), "col")  # accumulate into a column-major out, too
    want = a.double() @ b.double()
    args = GemmArgs(a.cuda(), b.cuda(), False, False, None, trans_c, out)
    assert kernel.can_handle(args) is None
    got = kernel.gemm(args)
    assert got is out
    assert_close_to_reference(out.cpu(), start.double() + (want.t() if trans_c else want), dtype=out_dtype)
    assert_close_to_reference(kernel.gemm(GemmArgs(a.cuda(), b.cuda(), out_dtype=out_dtype)).cpu(), want,
                              dtype=out_dtype)


@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_epilogues(ext, activation, with_bias):
    from turbo_hipblaslt.api import gemm, linear

    if activation is None and not with_bias:
        pytest.skip("no epilogue")
    g = torch.Generator().manual_seed(11)
    x, w = torch.randn(64, 96, generator=g).bfloat16(), torch.randn(80, 96, generator=g).bfloat16()
    bias = torch.randn(80, generator=g).bfloat16() if with_bias else None
    want = x.double() @ w.double().t() + (bias.double() if with_bias else 0.0)
    if activation == "gelu":
        want = torch.nn.functional.gelu(want, approximate="tanh")
    got = gemm(x.cuda(), w.cuda(), trans_b=True, bias=None if bias is None else bias.cuda(), activation=activation)
    assert_close_to_reference(got.cpu(), want, dtype=torch.bfloat16)
    y = linear(x.cuda().reshape(4, 16, 96), w.cuda(), None if bias is None else bias.cuda(), activation=activation)
    assert y.shape == (4, 16, 80)
    assert_close_to_reference(y.reshape(64, 80).cpu(), want, dtype=torch.bfloat16)


def _fp8_operands(gran, ta, tb, m, n, k, da, db, a2d=False, b2d=False, bs=128, seed=0):
    """FP8 data ~N(0, 1) and random scales around ``K**-0.25`` (each block its own): results of
    standard deviation ~1, so bf16's tolerance (1e-2 absolute near zero) measures the mapping, not the
    size of the result. A scale applied to the wrong block is off by up to 3x: never within tolerance."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(da)
    b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(db)

    def scale(*shape):
        return (torch.rand(*shape, generator=g) + 0.5) * k ** -0.25

    if gran == "TENSORWISE":
        sa, sb = scale(()), scale(())
    elif gran == "ROWWISE":
        sa, sb = scale(*((1, m) if ta else (m, 1))), scale(*((n, 1) if tb else (1, n)))
    else:
        sa = scale(-(-a.shape[0] // bs), -(-a.shape[1] // bs)) if a2d else scale(*((k // bs, m) if ta else (m, k // bs)))
        sb = scale(-(-b.shape[0] // bs), -(-b.shape[1] // bs)) if b2d else scale(*((n, k // bs) if tb else (k // bs, n)))
    return a, sa, b, sb


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """``assert_close_to_reference`` at ``dtype``'s tolerance, the error statistics in the message."""
    got = got.cpu()
    st = error_stats(want, got)
    assert_close_to_reference(got, want, dtype=dtype, what=f"{what} [SNR {st['snr_db']:.1f} dB, max abs "
                                                           f"{st['max_abs']:.3g}, max abs / max |ref| {st['max_rel']:.3g}]")


E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
FP32_OPT_IN = "TURBO_HIPBLASLT_FP8_FP32_OUT"
# Aligned sizes (the heuristic serves them) for every pair and granularity, an odd one (may be declined by
# the heuristic: skipped with its reason), a long K (many MMA/promotion steps); BLOCKWISE with each 1x128 /
# 128x128 combination the library has.
FP8_CASES = [
    ("TENSORWISE", E4, E4, False, False, (64, 48, 96)),
    ("TENSORWISE", E4, E4, False, False, (67, 45, 96)),
    ("TENSORWISE", E4, E4, False, False, (128, 96, 1024)),
    ("TENSORWISE", E4, E5, False, False, (64, 48, 96)),
    ("TENSORWISE", E5, E4, False, False, (64, 48, 96)),
    ("ROWWISE", E4, E4, False, False, (64, 48, 96)),
    ("ROWWISE", E4, E5, False, False, (64, 48, 96)),
    ("BLOCKWISE", E4, E4, False, True, (128, 256, 384)),
    ("BLOCKWISE", E4, E4, False, False, (128, 256, 384)),
    ("BLOCKWISE", E4, E4, True, False, (256, 128, 384)),
]


@pytest.mark.parametrize("gran,da,db,a2d,b2d,mnk", FP8_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("ta,tb,tc", [(False, True, False), (False, False, False), (True, False, False),
                                      (True, True, False), (False, True, True), (True, False, True)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_gemm_fp8(ext, monkeypatch, gran, da, db, a2d, b2d, mnk, ta, tb, tc, out_dtype):
    """Each call twice: into a fresh result of ``out_dtype``, and accumulating into an ``out`` of that
    dtype (beta = 1). Where the library's FP8 accumulation is imprecise (cuBLASLt on sm89/sm90) an fp32
    result must be declined with the reason; with the opt-in it is served and checked at the accuracy
    the opt-in promises (bf16's tolerance), the error statistics in the message either way."""
    from turbo_hipblaslt import gemm_fp8 as kernel
    from turbo_hipblaslt import runtime

    monkeypatch.delenv(FP32_OPT_IN, raising=False)
    m, n, k = mnk
    a, sa, b, sb = _fp8_operands(gran, ta, tb, m, n, k, da, db, a2d, b2d)
    bs = 128 if gran == "BLOCKWISE" else None
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, F64, gran, bs, tc))  # float64 on the CPU
    start = torch.randn(want.shape, generator=torch.Generator().manual_seed(2)).to(out_dtype)
    reduced = runtime.fp8_reduced_accumulation(torch.cuda.current_device())
    for how in ("out_dtype", "out"):
        monkeypatch.delenv(FP32_OPT_IN, raising=False)
        kw = dict(out_dtype=out_dtype) if how == "out_dtype" else dict(out=start.clone().cuda())
        args = GemmFp8Args(a.cuda(), sa.cuda(), b.cuda(), sb.cuda(), ta, tb, granularity=gran, block_size=bs,
                           trans_c=tc, **kw)
        reason, gate = kernel.can_handle(args), out_dtype
        if out_dtype == torch.float32 and reduced:
            assert reason is not None and "no fp32 result" in reason and FP32_OPT_IN in reason, reason
            monkeypatch.setenv(FP32_OPT_IN, "1")
            reason, gate = kernel.can_handle(args), torch.bfloat16
        if reason is not None and ("scale mode" in reason or "no algorithm" in reason):
            pytest.skip(reason)  # the loaded library lacks this mode / has no kernel for this shape
        assert reason is None, reason
        got = kernel.gemm_fp8(args)
        assert got.dtype == out_dtype and (how == "out_dtype" or got is args.out)
        expect = want if how == "out_dtype" else start.double() + want
        close(got, expect, gate, f"{how} {str(out_dtype)[6:]}{' (opt-in)' if gate != out_dtype else ''}")


@pytest.mark.parametrize("gran,da,db,a2d,b2d,mnk", [c for c in FP8_CASES if c[5] != (67, 45, 96)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False)])
def test_gemm_fp8_repeated_calls_take_the_launch_template(ext, gran, da, db, a2d, b2d, mnk, ta, tb):
    """Three calls of one metadata on new operands and scales each (the second and third from the
    launch template: this call's pointers, copies and scale layouts), each against float64."""
    from turbo_hipblaslt import gemm_fp8 as kernel

    m, n, k = mnk
    bs = 128 if gran == "BLOCKWISE" else None
    kernel._templates.clear()
    for rep in range(3):
        a, sa, b, sb = _fp8_operands(gran, ta, tb, m, n, k, da, db, a2d, b2d, seed=rep)
        want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, ta, tb, F64, gran, bs))
        args = GemmFp8Args(a.cuda(), sa.cuda(), b.cuda(), sb.cuda(), ta, tb, torch.bfloat16, gran, bs)
        reason = kernel.can_handle(args)
        if reason is not None and ("scale mode" in reason or "no algorithm" in reason):
            pytest.skip(reason)
        assert reason is None, reason
        close(kernel.gemm_fp8(args), want, torch.bfloat16, f"call {rep}")
    assert len(kernel._templates) == 1


@pytest.mark.parametrize("how", ["col", "padded_col", "padded"])
@pytest.mark.parametrize("shape", [(1, 5), (37, 53), (4096, 1536)])
def test_relayout_copies_bytes_exactly_through_the_library(ext, how, shape):
    """The FP8 operand copies (cuBLASLt's int8 matrix transform): every byte pattern (NaN, -0) kept, in
    every source layout; on CUDA the library makes them (no fallback to torch)."""
    from turbo_hipblaslt import relayout

    r, c = shape
    bits = torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(r + c)).cuda()
    if how == "col":
        v = bits.t().contiguous().t()
    else:
        if how == "padded":  # row-major rows 7 bytes apart
            v = torch.zeros(r + 7, c + 7, dtype=torch.uint8, device="cuda")[3:3 + r, 2:2 + c]
        else:  # column-major columns 7 bytes apart
            v = torch.zeros(c + 7, r + 7, dtype=torch.uint8, device="cuda").t()[2:2 + r, 3:3 + c]
        v.copy_(bits)
    got = relayout.contiguous(v.view(torch.float8_e4m3fn))
    assert got.is_contiguous() and torch.equal(got.view(torch.uint8), bits)
    if ext.PLATFORM == "cuda":
        assert relayout.fallback_reasons() == {}, relayout.fallback_reasons()


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped(ext, trans_b, dtype):
    from turbo_hipblaslt import grouped_gemm as kernel

    g = torch.Generator().manual_seed(9)
    lens = [5, 0, 17, 64]
    m, k, n = sum(lens) + 7, 45, 33
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(len(lens), *((n, k) if trans_b else (k, n)), generator=g).to(dtype)
    grad = torch.randn(m, n, generator=g).to(dtype)
    lens_t = torch.tensor(lens)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens_t, 0)])
    args = GroupedGemmArgs(a.cuda(), b.cuda(), lens_t.cuda(), offs.cuda(), trans_b)
    assert kernel.can_handle(args) is None
    out = kernel.grouped_gemm(args).cpu()
    start = 0
    for i, length in enumerate(lens):
        w = b[i].double().t() if trans_b else b[i].double()
        assert_close_to_reference(out[start:start + length], a[start:start + length].double() @ w, dtype=dtype)
        start += length
    assert torch.count_nonzero(out[start:]) == 0
    vk = GroupedGemmVariableKArgs(a.cuda(), grad.cuda(), lens_t.cuda(), offs.cuda())
    assert kernel.can_handle_variable_k(vk) is None
    wgrad = kernel.grouped_gemm_variable_k(vk).cpu()
    main = torch.ones(len(lens), k, n, device="cuda")
    kernel.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a.cuda(), grad.cuda(), lens_t.cuda(), offs.cuda(),
                                                            out=main))
    start = 0
    for i, length in enumerate(lens):
        want = a[start:start + length].double().t() @ grad[start:start + length].double()
        assert_close_to_reference(wgrad[i], want, dtype=dtype)
        assert_close_to_reference(main[i].cpu(), want + 1.0, dtype=torch.float32)  # fp32 main_grad
        start += length


def test_side_stream_gets_its_own_workspace_and_right_results(ext):
    from turbo_hipblaslt import gemm as kernel
    from turbo_hipblaslt import runtime

    a, b = torch.randn(256, 512, device="cuda"), torch.randn(512, 128, device="cuda")
    want = a.double() @ b.double()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        c = kernel.gemm(GemmArgs(a, b))
    side.synchronize()
    keys = {key for key in runtime._workspaces if key[0] == a.device.index}
    assert (a.device.index, side.cuda_stream) in keys
    assert_close_to_reference(c.cpu(), want.cpu(), dtype=torch.float32)


def test_library_errors_carry_the_status_name(ext):
    from turbo_hipblaslt import blaslt
    from turbo_hipblaslt.layout import BlasPlan

    x = torch.empty(64, 64, device="cuda")
    p = BlasPlan(64, 64, 64, False, False, False, 64, 64, 64)
    args = blaslt.args_for(p, Side(x.data_ptr(), 99), Side(x.data_ptr(), 0), x)
    with pytest.raises(ext.BlasLtError) as info:
        blaslt.launch(args)
    assert info.value.status.endswith("STATUS_NOT_SUPPORTED") and info.value.stage == "setup"
    assert info.value.status in str(info.value)


def test_capabilities(ext):
    from turbo_hipblaslt.api import capabilities

    caps = capabilities()
    assert caps["platform"] == ("rocm" if torch.version.hip else "cuda")
    assert caps["library_version"] > 0 and caps["modes"]["fp8 TENSORWISE"] is None


# -- algorithm ranks (turbo_hipblaslt.algos): every rank the heuristic offers computes the product -------------

def test_every_offered_algo_rank_computes_the_product(ext):
    from turbo_core import tuning
    from turbo_core.tuning import get_space
    from turbo_hipblaslt import algos, blaslt
    from turbo_hipblaslt import gemm as kernel
    from turbo_hipblaslt.codes import DTYPE_CODES

    g = torch.Generator().manual_seed(21)
    a, b = torch.randn(256, 384, generator=g).bfloat16(), torch.randn(320, 384, generator=g).bfloat16()
    want = a.double() @ b.double().t()
    args = GemmArgs(a.cuda(), b.cuda(), False, True)
    algos.reset()
    count = blaslt.algo_count(kernel.call_for(args))
    assert 1 <= count <= algos.MAX_ALGOS
    for rank in range(count):
        with tuning.forcing("HIPBLASLT", "gemm", {"algo": rank}):
            assert_close_to_reference(kernel.gemm(args).cpu(), want, dtype=torch.bfloat16, what=f"algo={rank}")
    assert not algos._beyond  # every rank counted was launched as itself
    assert get_space("HIPBLASLT", "gemm").candidates(args) == [{"algo": r} for r in range(1, count)]
    if count < algos.MAX_ALGOS:  # a rank beyond the offer: refused at the heuristic stage; the launcher falls back
        d = torch.empty(256, 320, dtype=torch.bfloat16, device="cuda")
        p = blaslt.plan(args.a, False, args.b, True, d, False)
        code = DTYPE_CODES[torch.bfloat16]
        call = blaslt.args_for(p, Side(args.a.data_ptr(), code), Side(args.b.data_ptr(), code), d,
                               algo=count)
        with pytest.raises(ext.BlasLtError, match=rf"offers only {count} algorithm\(s\) .*algo={count} requested"):
            blaslt.launch(call)
        with tuning.forcing("HIPBLASLT", "gemm", {"algo": count}):
            assert_close_to_reference(kernel.gemm(args).cpu(), want, dtype=torch.bfloat16, what="fallback")
        assert [r for _, _, r in algos._beyond] == [count]


def test_fp8_algo_ranks(ext):
    from turbo_core import tuning
    from turbo_hipblaslt import blaslt
    from turbo_hipblaslt import gemm_fp8 as kernel

    a, sa, b, sb = _fp8_operands("TENSORWISE", False, True, 128, 256, 512, E4, E4)
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, F64))
    args = GemmFp8Args(a.cuda(), sa.cuda(), b.cuda(), sb.cuda(), False, True, torch.bfloat16)
    reason = kernel.can_handle(args)
    if reason is not None:
        pytest.skip(reason)
    count = blaslt.algo_count(kernel.call_for(args))
    assert count >= 1
    for rank in range(min(count, 4)):
        with tuning.forcing("HIPBLASLT", "gemm_fp8", {"algo": rank}):
            close(kernel.gemm_fp8(args), want, torch.bfloat16, f"algo={rank}")


def test_library_version_probe(ext):
    from turbo_hipblaslt import probe, runtime

    platform = "rocm" if torch.version.hip else "cuda"
    number = runtime.capabilities(torch.cuda.current_device())["library_version"]
    assert ext.library_version() == number  # a handle exists by now on ROCm too
    text = probe.library_version(platform)
    assert text == probe.format_version(number, platform) and text.count(".") == 2
    assert (probe.cublaslt_version(), probe.hipblaslt_version()) == ((text, None) if platform == "cuda" else
                                                                     (None, text))
