"""``grouped_gemm_fp8`` / ``grouped_gemm_fp4``: the grouped conformance cases on TORCH, the primitives'
reference against per-group float64 math (and its sync-free GPU path run on the CPU), validation
messages of the primitives and the public ops, zero-size groups, pre-quantized weights, fused
wgrad, opcheck and fullgraph compile."""

import pytest
import torch

from turbo_core import Float4QuantConfig, Float8QuantConfig, QuantizedTensorPair, ScalingRecipe
from turbo_core.dispatch.dispatcher import stats
from turbo_core.dispatch.launch import grouped_gemm_fp8 as launch
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GroupedGemmFp4Args,
    GroupedGemmFp4VariableKArgs,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
)
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp4, grouped_gemm_fp8
from turbo_core.ops.quantization import (
    grouped_quantize_fp4,
    grouped_quantize_fp8,
    grouped_quantize_fp8_with_trans,
    quantize_fp4,
    quantize_fp8,
)
from turbo_core.quantized_tensor import QuantizedTensor, create_quantized_weight
from turbo_core.reference import grouped_gemm_fp8 as ref
from turbo_core.testing.cases.gemm_fp8 import CASES

I64 = torch.int64
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
E8M0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
GROUPED = [c for c in CASES if c.id.startswith("grouped_gemm_fp")]
LOWP = {E4M3, E5M2, FP4, E8M0, torch.uint8}


@pytest.fixture(autouse=True)
def _fp8_kernels(monkeypatch):
    """Register the FP8/FP4 GEMM reference kernels with TORCH for these tests, until
    ``turbo_core.reference.plugin.FAMILIES`` lists them (then this does nothing)."""
    import turbo_core.dispatch.specs.gemm_fp8  # noqa: F401  (defines the primitives the kernels serve)
    import turbo_core.dispatch.specs.grouped_gemm_fp8  # noqa: F401
    from turbo_core.reference import plugin

    missing = tuple(f for f in ("gemm_fp8", "grouped_gemm_fp8") if f not in plugin.FAMILIES)
    if missing:
        monkeypatch.setattr(plugin, "FAMILIES", plugin.FAMILIES + missing)


def _lens(*values):
    return torch.tensor(values, dtype=I64)


def _offs(lens):
    out = [0]
    for v in lens:
        out.append(out[-1] + v)
    return torch.tensor(out, dtype=I64)


# -- conformance -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", GROUPED, ids=[c.id for c in GROUPED])
def test_conformance_torch(case):
    with use_backend("TORCH"):
        case.run()


@pytest.mark.parametrize("primitive, what", [("grouped_gemm_fp8", "out"), ("grouped_gemm_fp8_variable_k", "grad_b")])
def test_conformance_cases_can_fail(monkeypatch, primitive, what):
    """A kernel off by 0.5 in one element of one group must fail a case."""
    real = launch.call

    def corrupt(name, args):
        out = real(name, args)
        if name == primitive:
            out = out.clone()
            out[1].view(-1)[0] += 0.5
        return out

    monkeypatch.setattr(launch, "call", corrupt)
    case = next(c for c in GROUPED if c.id == "grouped_gemm_fp8-ROWWISE-E4M3-tail7-G3-K45-N33-NT-float32")
    with pytest.raises(AssertionError, match=what):
        case.run()


# -- the primitives' reference ----------------------------------------------------------------------


def _per_group_ref(a64, b64, lens, trans_b):
    out, start = torch.zeros(a64.shape[0], b64.shape[1] if trans_b else b64.shape[2], dtype=torch.float64), 0
    for g, length in enumerate(lens):
        w = b64[g].t() if trans_b else b64[g]
        out[start:start + length] = a64[start:start + length] @ w
        start += length
    return out


def _vk_ref(a64, b64, lens, trans_c=False):
    out, start = [], 0
    for length in lens:
        c = a64[start:start + length].t() @ b64[start:start + length]
        out.append(c.t() if trans_c else c)
        start += length
    return torch.stack(out)


@pytest.mark.parametrize("sync_free", [False, True])
@pytest.mark.parametrize("trans", [False, True])
def test_reference_rowwise_and_blockwise_against_per_group_math(monkeypatch, sync_free, trans):
    if sync_free:  # the path GPUs take (no host sync), run on the CPU
        monkeypatch.setattr(ref, "_on_host", lambda t: False)
    gen = torch.Generator().manual_seed(5)
    lens = (0, 5, 1, 9, 0)
    m, k, n, g, bs = sum(lens) + 3, 8, 6, len(lens), 4
    a = (torch.randn(m, k, generator=gen) * 4).to(E4M3)
    b = (torch.randn(*((g, n, k) if trans else (g, k, n)), generator=gen) * 4).to(E5M2)
    gl, go = _lens(*lens), _offs(lens)
    # ROWWISE: a per row, b per column of op(b[g])
    sa = torch.rand(m, 1, generator=gen) + 0.5
    sb = torch.rand(*((g, n, 1) if trans else (g, 1, n)), generator=gen) + 0.5
    got = launch.grouped_gemm_fp8(a, sa, b, sb, gl, go, trans_b=trans, out_dtype=torch.float32, granularity="ROWWISE")
    want = _per_group_ref(a.double() * sa.double(), b.double() * sb.double(), lens, trans)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    assert torch.count_nonzero(got[sum(lens):]) == 0
    # BLOCKWISE: a's 1 x bs scales stored transposed [K/bs, M]; b in bs x bs tiles
    sa_t = torch.rand(k // bs, m, generator=gen) + 0.5
    st = torch.rand(g, -(-b.shape[1] // bs), -(-b.shape[2] // bs), generator=gen) + 0.5
    got = launch.grouped_gemm_fp8(a, sa_t, b, st, gl, go, trans_b=trans, out_dtype=torch.float32,
                                  granularity="BLOCKWISE", block_size=bs)
    a_deq = a.double() * sa_t.double().t().repeat_interleave(bs, 1)
    b_deq = b.double() * st.double().repeat_interleave(bs, 1)[:, :b.shape[1]].repeat_interleave(bs, 2)[..., :b.shape[2]]
    torch.testing.assert_close(got.double(), _per_group_ref(a_deq, b_deq, lens, trans), rtol=1e-6, atol=1e-6)
    # variable K, BLOCKWISE: bs x 1 blocks along M
    grad = (torch.randn(m, n, generator=gen) * 4).to(E4M3)
    s1, s2 = torch.rand(-(-m // bs), k, generator=gen) + 0.5, torch.rand(-(-m // bs), n, generator=gen) + 0.5
    out = torch.full((g, n, k) if trans else (g, k, n), 0.25)
    launch.grouped_gemm_fp8_variable_k(a, s1, grad, s2, gl, go, granularity="BLOCKWISE", block_size=bs,
                                       trans_c=trans, out=out)
    a_deq = a.double() * s1.double().repeat_interleave(bs, 0)[:m]
    g_deq = grad.double() * s2.double().repeat_interleave(bs, 0)[:m]
    want = _vk_ref(a_deq, g_deq, lens, trans) + 0.25
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(out[0], torch.full_like(out[0], 0.25))  # an empty group leaves out[g] unchanged


@pytest.mark.parametrize("sync_free", [False, True])
def test_reference_mx_and_fp4_variable_k(monkeypatch, sync_free):
    if sync_free:
        monkeypatch.setattr(ref, "_on_host", lambda t: False)
    torch.manual_seed(6)
    lens = (3, 0, 40)
    gl, go = _lens(*lens), _offs(lens)
    x, grad = torch.randn(45, 24), torch.randn(45, 16)  # two tail rows
    for fp4 in (False, True) if FP4 is not None else (False,):
        gq = grouped_quantize_fp4 if fp4 else grouped_quantize_fp8
        dtype = FP4 if fp4 else E4M3
        qa, sa, lp, op = gq(x, dtype, "MX_BLOCKWISE", gl, go, axis=0)
        qg, sg, _, _ = gq(grad, dtype, "MX_BLOCKWISE", gl, go, axis=0)
        if fp4:
            c = launch.grouped_gemm_fp4_variable_k(qa, sa, qg, sg, lp, op, out_dtype=torch.float32)
            ca = ref.dequant_mx(qa, sa, torch.float64, packed=True).t()
            cg = ref.dequant_mx(qg, sg, torch.float64, packed=True).t()
        else:
            c = launch.grouped_gemm_fp8_variable_k(qa, sa, qg, sg, lp, op, out_dtype=torch.float32,
                                                   granularity="MX_BLOCKWISE")
            ca = ref.dequant_mx(qa, sa, torch.float64, packed=False).t()
            cg = ref.dequant_mx(qg, sg, torch.float64, packed=False).t()
        assert c.shape == (3, 24, 16)
        want = _vk_ref(ca, cg, tuple(lp.tolist()))
        torch.testing.assert_close(c.double(), want, rtol=1e-6, atol=1e-6)
        assert torch.count_nonzero(c[1]) == 0
        # the padded layout holds the same values as a plain per-group product of the tokens
        plain = _vk_ref(x.double(), grad.double(), lens)
        assert (c.double() - plain).norm() / plain.norm() < (0.3 if fp4 else 0.06)


# -- primitive validation --------------------------------------------------------------------------


def test_primitive_validation():
    a, b = torch.randn(5, 8).to(E4M3), torch.randn(2, 6, 8).to(E4M3)
    s = torch.tensor(1.0)
    gl, go = _lens(2, 3), _lens(0, 2, 5)
    f32 = {"out_dtype": torch.float32}
    call = launch.grouped_gemm_fp8
    with pytest.raises(TypeError, match=r"^a: expected an FP8 dtype"):
        call(a.float(), s, b, s, gl, go, **f32)
    with pytest.raises(ValueError, match=r"^b: expected a 3-D tensor"):
        call(a, s, b[0], s, gl, go, **f32)
    with pytest.raises(ValueError, match=r"^b: inner dimension mismatch: a is \[5, 8\] so b must be \[2, 8, N\]"):
        call(a, s, b, s, gl, go, trans_b=False, **f32)
    with pytest.raises(TypeError, match=r"^out_dtype: required"):
        call(a, s, b, s, gl, go)
    with pytest.raises(ValueError, match=r"^group_lens: expected 2 lengths"):
        call(a, s, b, s, gl[:1], go, **f32)
    with pytest.raises(ValueError, match=r"^group_offs: expected shape \(3,\)"):
        call(a, s, b, s, gl, go[:2], **f32)
    with pytest.raises(ValueError, match=r"^group_lens: the lengths sum to 7, past the 5 rows"):
        call(a, s, b, s, _lens(4, 3), _lens(0, 4, 7), **f32)
    with pytest.raises(ValueError, match=r"^num_cu: expected None or a positive int"):
        call(a, s, b, s, gl, go, num_cu=0, **f32)
    with pytest.raises(ValueError, match=r"^a_scale_inv: expected shape \(5, 1\) \(ROWWISE"):
        call(a, torch.ones(1, 5), b, torch.ones(2, 6, 1), gl, go, granularity="ROWWISE", **f32)
    with pytest.raises(ValueError, match=r"^b_scale_inv: expected shape \(2, 6, 1\) \(ROWWISE"):
        call(a, torch.ones(5, 1), b, torch.ones(2, 1, 6), gl, go, granularity="ROWWISE", **f32)
    with pytest.raises(ValueError, match=r"^a_scale_inv: expected shape \(2, 5\) \(BLOCKWISE: 1x4 blocks along K, "
                                         r"stored transposed"):
        call(a, torch.ones(5, 2), b, torch.ones(2, 2, 2), gl, go, granularity="BLOCKWISE", block_size=4, **f32)
    with pytest.raises(ValueError, match=r"^b_scale_inv: BLOCKWISE expects"):
        call(a, torch.ones(2, 5), b, torch.ones(2, 6, 8), gl, go, granularity="BLOCKWISE", block_size=4, **f32)
    with pytest.raises(ValueError, match=r"^trans_b: MX_BLOCKWISE grouped GEMM is NT only"):
        call(a, s.to(torch.uint8), b.transpose(1, 2), s.to(torch.uint8), gl, go, trans_b=False,
             granularity="MX_BLOCKWISE", **f32)
    vk = launch.grouped_gemm_fp8_variable_k
    g = torch.randn(5, 3).to(E4M3)
    with pytest.raises(ValueError, match=r"^b: expected 5 rows \(the M of a\)"):
        vk(a, s, g[:4], s, gl, go, **f32)
    with pytest.raises(ValueError, match=r"^a_scale_inv: expected shape \(1, 8\) \(ROWWISE"):
        vk(a, torch.ones(5, 1), g, torch.ones(1, 3), gl, go, granularity="ROWWISE", **f32)
    with pytest.raises(ValueError, match=r"^b_scale_inv: expected shape \(2, 3\) \(BLOCKWISE: 4x1 blocks along M\)"):
        vk(a, torch.ones(2, 8), g, torch.ones(5, 3), gl, go, granularity="BLOCKWISE", block_size=4, **f32)
    with pytest.raises(ValueError, match=r"^out: expected shape \(2, 3, 8\) \(trans_c=True\)"):
        vk(a, s, g, s, gl, go, trans_c=True, out=torch.zeros(2, 8, 3))
    with pytest.raises(ValueError, match=r"^b: expected 64 columns \(MX operands are \[K, M\] / \[N, M\]\)"):
        vk(torch.randn(8, 64).to(E4M3), torch.zeros(8, 2, dtype=torch.uint8), torch.randn(3, 32).to(E4M3),
           torch.zeros(3, 1, dtype=torch.uint8), gl, go, granularity="MX_BLOCKWISE", **f32)
    if FP4 is not None:
        a4, b4 = torch.zeros(5, 16, dtype=torch.uint8).view(FP4), torch.zeros(2, 6, 16, dtype=torch.uint8).view(FP4)
        s4a, s4b = torch.zeros(5, 1, dtype=torch.uint8), torch.zeros(2, 6, 1, dtype=torch.uint8)
        with pytest.raises(ValueError, match=r"^trans_b: MXFP4 grouped GEMM is NT only"):
            launch.grouped_gemm_fp4(a4, s4a, b4, s4b, gl, go, trans_b=False, **f32)
        with pytest.raises(ValueError, match=r"^b_scale_inv: expected shape \(2, 6, 1\)"):
            launch.grouped_gemm_fp4(a4, s4a, b4, s4b[:, :5], gl, go, **f32)
        with pytest.raises(TypeError, match=r"^b: expected dtype in \(float4_e2m1fn_x2\)"):
            launch.grouped_gemm_fp4_variable_k(a4, s4a, torch.zeros(5, 16), s4a, gl, go, **f32)
    assert stats() == {}


# -- public op validation --------------------------------------------------------------------------


def _good():
    return torch.randn(5, 8), torch.randn(3, 4, 8), _lens(2, 0, 3)


@pytest.mark.parametrize("change, exc, match", [
    (lambda a, b, gl: ((a[None], b, gl), {}), ValueError, r"^a: expected a 2-D tensor"),
    (lambda a, b, gl: ((a, b[0], gl), {}), ValueError, r"^b: expected a 3-D tensor"),
    (lambda a, b, gl: ((a.long(), b, gl), {}), TypeError, r"^a: expected a float16/bfloat16/float32 tensor"),
    (lambda a, b, gl: ((a, b, gl), {"trans_b": False}), ValueError,
     r"^b: inner dimension mismatch: a is \[5, 8\] so b must be \[3, 8, N\] \(trans_b=False\)"),
    (lambda a, b, gl: ((a, b, gl), {"trans_b": None}), TypeError, r"^trans_b: expected a bool"),
    (lambda a, b, gl: ((a, b, gl.int()), {}), TypeError, r"^group_lens: expected dtype in \(int64\)"),
    (lambda a, b, gl: ((a, b, gl[:2]), {}), ValueError, r"^group_lens: expected 3 lengths"),
    (lambda a, b, gl: ((a, b, gl), {"group_offs": _lens(0, 2)}), ValueError, r"^group_offs: expected shape \(4,\)"),
    (lambda a, b, gl: ((a, b, gl), {"group_offs": _lens(0, 2, 3, 5)}), ValueError,
     r"^group_offs: expected the exclusive prefix sum of group_lens \[0, 2, 2, 5\], got \[0, 2, 3, 5\]"),
    (lambda a, b, gl: ((a, b, _lens(3, -1, 3)), {}), ValueError, r"^group_lens: expected non-negative lengths"),
    (lambda a, b, gl: ((a, b, _lens(2, 1, 3)), {}), ValueError, r"^group_lens: the lengths sum to 6, past the 5 rows"),
    (lambda a, b, gl: ((a, b, gl), {"num_cu": 0}), ValueError, r"^num_cu: expected None or a positive int"),
    (lambda a, b, gl: ((a, b, gl), {"out_dtype": torch.int8}), TypeError, r"^out_dtype: expected one of"),
    (lambda a, b, gl: ((a, b, gl), {"config": Float4QuantConfig()}), TypeError, r"^config: expected a Float8QuantConfig"),
    (lambda a, b, gl: ((a, b.to("meta"), gl), {}), ValueError, r"^b: expected a tensor on cpu \(like a\)"),
    (lambda a, b, gl: ((a, b, gl), {"fuse_bgrad_accum_pattern": "megatron"}), ValueError, r"b must carry a main_grad"),
    (lambda a, b, gl: ((QuantizedTensor.quantize(a, E4M3, "BLOCKWISE", axis=-1, block_size=4), b, gl),
                       {"config": Float8QuantConfig(granularity="BLOCKWISE", block_size=4)}), ValueError,
     r"^a: a pre-quantized a is supported for TENSORWISE and ROWWISE only"),
    (lambda a, b, gl: ((a, QuantizedTensor.quantize(b, E4M3, "ROWWISE", axis=-2), gl),
                       {"config": Float8QuantConfig(granularity="ROWWISE")}), ValueError,
     r"^b: a pre-quantized b must be quantized along its dim -1"),
])
def test_op_validation(change, exc, match):
    args, kw = change(*_good())
    with pytest.raises(exc, match=match):
        grouped_gemm_fp8(*args, **kw)
    assert not any(k[0].startswith("grouped_gemm") for k in stats())  # rejected before any GEMM


def test_fp4_op_validation():
    a, b, gl = _good()
    with pytest.raises(TypeError, match=r"^config: expected a Float4QuantConfig"):
        grouped_gemm_fp4(a, b, gl, config=Float8QuantConfig())
    with pytest.raises(ValueError, match=r"^config.use_preshuffle"):
        grouped_gemm_fp4(a, b, gl, config=Float4QuantConfig(use_preshuffle=True))
    assert stats() == {}


# -- semantics ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_zero_size_groups(gran):
    def run(a, b, lens):
        if gran == "FP4":
            return grouped_gemm_fp4(a, b, lens)
        cfg = Float8QuantConfig(granularity=gran, block_size=4 if gran == "BLOCKWISE" else None)
        return grouped_gemm_fp8(a, b, lens, config=cfg)

    for m in (4, 0):  # every group empty, with and without (tail) tokens
        a = torch.randn(m, 32, requires_grad=True)
        b = torch.randn(2, 5, 32, requires_grad=True)
        out = run(a, b, _lens(0, 0))
        assert out.shape == (m, 5) and torch.count_nonzero(out) == 0
        out.sum().backward()
        assert torch.count_nonzero(a.grad) == 0 and torch.count_nonzero(b.grad) == 0


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_fused_wgrad_returns_dummy_and_accumulates_twice(gran):
    torch.manual_seed(7)
    lens = (4, 0, 5)
    x = torch.randn(10, 32, requires_grad=True)  # one tail row
    w = torch.randn(3, 16, 32, requires_grad=True)
    w.main_grad = torch.zeros(3, 16, 32)

    def run(pattern):
        if gran == "FP4":
            return grouped_gemm_fp4(x, w, _lens(*lens), fuse_bgrad_accum_pattern=pattern)
        cfg = Float8QuantConfig(granularity=gran, block_size=8 if gran == "BLOCKWISE" else None)
        return grouped_gemm_fp8(x, w, _lens(*lens), config=cfg, fuse_bgrad_accum_pattern=pattern)

    for _ in range(2):
        run("megatron").sum().backward()
    assert w.grad_added_to_main_grad is True and torch.count_nonzero(w.grad) == 0
    w.grad = None
    run(None).sum().backward()
    torch.testing.assert_close(w.main_grad, 2 * w.grad, rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(w.main_grad[1]) == 0


def test_hints_and_offsets_do_not_change_the_result():
    torch.manual_seed(8)
    a, b, gl = torch.randn(23, 16), torch.randn(3, 8, 16), _lens(5, 1, 17)
    cfg = Float8QuantConfig(granularity="ROWWISE")
    base = grouped_gemm_fp8(a, b, gl, config=cfg)
    for kw in ({"num_cu": 3}, {"group_offs": _lens(0, 5, 6, 23)}):
        assert torch.equal(grouped_gemm_fp8(a, b, gl, config=cfg, **kw), base)


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "MX_BLOCKWISE"])
def test_pre_quantized_weights(gran):
    torch.manual_seed(9)
    cfg = Float8QuantConfig(granularity=gran)
    x = torch.randn(12, 64, requires_grad=True)
    w = torch.randn(3, 16, 64)
    gl = _lens(5, 0, 7)
    qw, qw_t = create_quantized_weight(w, None, cfg, need_weight_transpose_cache=True)
    y = grouped_gemm_fp8(x, QuantizedTensorPair(qw, qw_t), gl, config=cfg)
    assert torch.equal(y, grouped_gemm_fp8(x.detach(), w, gl, config=cfg))  # the same quantization of w
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    grouped_gemm_fp8(x2, qw, gl, config=cfg).sum().backward()  # transpose from qw.t()
    assert torch.equal(x.grad, x2.grad)
    if gran != "MX_BLOCKWISE":
        xq = QuantizedTensor.quantize(x.detach(), E4M3, gran, axis=-1)
        y2 = grouped_gemm_fp8(QuantizedTensorPair(xq), qw, gl, config=cfg)  # a pre-quantized (no grad)
        assert torch.equal(y2, y.detach())


# -- torch.compile and opcheck ---------------------------------------------------------------------


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_compile_fullgraph_forward_backward(gran):
    torch.manual_seed(10)
    lens = (3, 0, 6)
    a = torch.randn(11, 32, requires_grad=True)
    b = torch.randn(3, 32, 24, requires_grad=True)
    if gran == "FP4":
        def fn(x, y, gl):
            return grouped_gemm_fp4(x, y, gl, trans_b=False)
    else:
        cfg = Float8QuantConfig(format="HYBRID", granularity=gran, block_size=8 if gran == "BLOCKWISE" else None)

        def fn(x, y, gl):
            return grouped_gemm_fp8(x, y, gl, trans_b=False, config=cfg)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(a, b, _lens(*lens))
    out.square().sum().backward()
    want = fn(a2, b2, _lens(*lens))
    want.square().sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(a.grad, a2.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(b.grad, b2.grad, rtol=1e-6, atol=1e-6)


def _opcheck(op, args):
    lowp = [a for a in args if isinstance(a, torch.Tensor) and a.dtype in LOWP]
    # torch's test_schema compares inputs with allclose, which FP8/FP4/E8M0 tensors do not support:
    # run the other checks and test "no input is mutated" on the raw bytes instead.
    before = [a.view(torch.uint8).clone() for a in lowp]
    torch.library.opcheck(op, args, test_utils=("test_autograd_registration", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))
    op(*args)
    assert all(torch.equal(b, a.view(torch.uint8)) for b, a in zip(before, lowp, strict=True))


def test_opcheck_custom_ops():
    ops = torch.ops.turbo
    lens = (3, 0, 5)
    gl, go = _lens(*lens), _offs(lens)
    x, w, g = torch.randn(9, 64), torch.randn(3, 16, 64), torch.randn(9, 16)
    qa, sa = quantize_fp8(x, E4M3, "TENSORWISE")
    qw, sw = quantize_fp8(w, E4M3, "TENSORWISE")
    qg, sg = quantize_fp8(g, E5M2, "TENSORWISE")
    _opcheck(ops.grouped_gemm_fp8.default, (qa, sa, qw, sw, gl, go, True, torch.bfloat16, "TENSORWISE", None, None))
    _opcheck(ops.grouped_gemm_fp8_variable_k.default, (qa, sa, qg, sg, gl, go, torch.float32, "TENSORWISE", None,
                                                       True, 4))
    _opcheck(ops.grouped_gemm_fp8_variable_k_accum.default, (qa, sa, qg, sg, gl, go, "TENSORWISE", None, False,
                                                             None, torch.zeros(3, 64, 16)))
    ra, rsa, rc, rsc, _, _, lp, op = grouped_quantize_fp8_with_trans(x, E4M3, "BLOCKWISE", gl, go, block_size=8)
    rg, rsg, gc, gsc, _, _, _, _ = grouped_quantize_fp8_with_trans(g, E4M3, "BLOCKWISE", gl, go, block_size=8)
    wb, swb = quantize_fp8(w, E4M3, "BLOCKWISE", block_size=8, scaling_recipe=ScalingRecipe(use_2d_block=True))
    _opcheck(ops.grouped_gemm_fp8.default, (ra, rsa, wb, swb, gl, go, True, torch.float32, "BLOCKWISE", 8, None))
    _opcheck(ops.grouped_gemm_fp8_variable_k.default, (rc, rsc, gc, gsc, lp, op, torch.float32, "BLOCKWISE", 8,
                                                       False, None))
    ma, msa = quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=-1)
    mw, msw = quantize_fp8(w, E4M3, "MX_BLOCKWISE", axis=-1)
    _opcheck(ops.grouped_gemm_fp8.default, (ma, msa, mw, msw, gl, go, True, torch.bfloat16, "MX_BLOCKWISE", 32, None))
    if FP4 is None:
        return
    fa, fsa = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    fw, fsw = quantize_fp4(w, FP4, "MX_BLOCKWISE", axis=-1)
    _opcheck(ops.grouped_gemm_fp4.default, (fa, fsa, fw, fsw, gl, go, True, torch.bfloat16, None))
    ca, csa, lp4, op4 = grouped_quantize_fp4(x, FP4, "MX_BLOCKWISE", gl, go, axis=0)
    cg, csg, _, _ = grouped_quantize_fp4(g, FP4, "MX_BLOCKWISE", gl, go, axis=0)
    _opcheck(ops.grouped_gemm_fp4_variable_k.default, (ca, csa, cg, csg, lp4, op4, torch.float32, True, None))
    _opcheck(ops.grouped_gemm_fp4_variable_k_accum.default, (ca, csa, cg, csg, lp4, op4, False, None,
                                                             torch.zeros(3, 64, 16)))


def test_args_dims_helpers():
    from turbo_core.dispatch.specs.grouped_gemm_fp8 import grouped_lowp_dims, variable_k_lowp_dims

    a, b = torch.empty(7, 64, dtype=E4M3), torch.empty(3, 16, 64, dtype=E4M3)
    gl, go = _lens(1, 2, 4), _offs((1, 2, 4))
    assert grouped_lowp_dims(GroupedGemmFp8Args(a, None, b, None, gl, go, True)) == (3, 7, 16, 64)
    assert variable_k_lowp_dims(GroupedGemmFp8VariableKArgs(a, None, a, None, gl, go)) == (3, 7, 64, 64)
    mx = GroupedGemmFp8VariableKArgs(torch.empty(24, 128, dtype=E4M3), None, torch.empty(16, 128, dtype=E4M3), None,
                                     gl, go, granularity="MX_BLOCKWISE")
    assert variable_k_lowp_dims(mx) == (3, 128, 24, 16)
    if FP4 is not None:
        a4 = torch.empty(7, 32, dtype=torch.uint8).view(FP4)
        b4 = torch.empty(3, 16, 32, dtype=torch.uint8).view(FP4)
        assert grouped_lowp_dims(GroupedGemmFp4Args(a4, None, b4, None, gl, go)) == (3, 7, 16, 64)
        v4 = GroupedGemmFp4VariableKArgs(torch.empty(24, 256, dtype=torch.uint8).view(FP4), None,
                                         torch.empty(16, 256, dtype=torch.uint8).view(FP4), None, gl, go)
        assert variable_k_lowp_dims(v4) == (3, 512, 24, 16)


def _rowwise_step(trans_b: bool, seed: int):
    """``(ops module, step)``: ``step()`` runs the op's ROWWISE forward and backward on fixed inputs
    (groups of 20, 0, 37, 7 rows) and returns ``(out, grad_x, grad_w)``."""
    import importlib

    gg = importlib.import_module("turbo_core.ops.grouped_gemm_fp8")  # the module, not the op it exports
    gen = torch.Generator().manual_seed(seed)
    lens = torch.tensor([20, 0, 37, 7], dtype=I64)
    x = torch.randn(64, 48, generator=gen, dtype=torch.bfloat16)
    w = torch.randn(*((4, 40, 48) if trans_b else (4, 48, 40)), generator=gen, dtype=torch.bfloat16)
    dy = torch.randn(64, 40, generator=gen, dtype=torch.bfloat16)
    cfg = Float8QuantConfig(granularity="ROWWISE")

    def step():
        xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = grouped_gemm_fp8(xi, wi, lens, trans_b=trans_b, config=cfg)
        return (out, *torch.autograd.grad(out, (xi, wi), dy))

    return gg, step


@pytest.mark.parametrize("trans_b", [True, False])
def test_k_major_weight_copies_give_identical_gradients(monkeypatch, trans_b):
    """ROWWISE weights quantized with ``k_major`` (the copy along b's dim -2 from the transposed view,
    stored ``[G, K, N]``, an alternative to the op's stored layout) give the op's results and gradients
    bit for bit: same values and scales, only the layout differs."""
    gg, step = _rowwise_step(trans_b, 11)
    plain = step()
    seen = []
    real = gg.quantize

    def k_major(scheme, t, dims, role, **kw):
        if t.dim() != 3:  # the tokens keep the layout the variable-K wgrad takes
            return real(scheme, t, dims, role, **kw)
        got = real(scheme, t, dims, role, k_major=True)
        seen.append({d: q.transposed for d, q in got.items()})
        return got

    monkeypatch.setattr(gg, "quantize", k_major)
    flipped = step()
    assert seen == [{0: True, 1: False}]  # the weight's copy along dim -2 is stored transposed
    for name, a, b in zip(("out", "grad_x", "grad_w"), plain, flipped, strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("trans_b", [True, False])
def test_fused_rowwise_quantization_gives_identical_gradients(monkeypatch, trans_b):
    """The op quantizes ROWWISE copies along both dims with one ``quantize_fp8_with_trans`` call
    (``fused_rowwise``: the tokens, the weight and the gradient), and gets the results and gradients
    of two ``quantize_fp8`` calls per tensor bit for bit."""
    gg, step = _rowwise_step(trans_b, 12)

    def calls():
        return {prim: n for (prim, _b, _h), n in stats().items() if prim.startswith("quantize_fp8")}

    before = calls()
    fused = step()
    got = calls()
    assert got.get("quantize_fp8_with_trans", 0) - before.get("quantize_fp8_with_trans", 0) == 3
    assert got.get("quantize_fp8", 0) == before.get("quantize_fp8", 0)
    real = gg.quantize
    monkeypatch.setattr(gg, "quantize", lambda *args, **kw: real(*args, **{**kw, "fused_rowwise": False}))
    before = calls()
    plain = step()
    got = calls()
    assert got.get("quantize_fp8_with_trans", 0) == before.get("quantize_fp8_with_trans", 0)
    assert got.get("quantize_fp8", 0) - before.get("quantize_fp8", 0) == 6
    for name, a, b in zip(("out", "grad_x", "grad_w"), plain, fused, strict=True):
        assert torch.equal(a, b), name


def test_a_pre_quantized_pair_feeds_the_wgrad_as_the_op_quantizes_itself():
    """ROWWISE tokens from ``rmsnorm_fp8(..., with_trans=True)``: the pair's K-major copy serves the
    variable-K wgrad (relaid M-major), with the same output and weight gradient bits as the op
    quantizing the norm's output itself, and a weight gradient near float64 math."""
    from turbo_core.ops import rmsnorm, rmsnorm_fp8

    cfg = Float8QuantConfig(granularity="ROWWISE")
    g = torch.Generator().manual_seed(11)
    x, gamma = torch.randn(12, 32, generator=g), torch.rand(32, generator=g) + 0.5
    w = torch.randn(2, 16, 32, generator=g).requires_grad_()
    lens = torch.tensor([5, 7])
    dy = torch.randn(12, 16, generator=g)
    y = grouped_gemm_fp8(rmsnorm_fp8(x, gamma, 1e-6, config=cfg, with_trans=True), w, lens, config=cfg)
    (gw,) = torch.autograd.grad(y, w, dy)
    y_ref = grouped_gemm_fp8(rmsnorm(x, gamma, 1e-6), w, lens, config=cfg)
    (gw_ref,) = torch.autograd.grad(y_ref, w, dy)
    assert torch.equal(y, y_ref) and torch.equal(gw, gw_ref)
    xd = x.double()
    xn = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.double()
    want = torch.stack([dy[:5].double().t() @ xn[:5], dy[5:].double().t() @ xn[5:]])
    assert (gw.double() - want).norm() / want.norm() < 0.1  # E4M3 operands: a few percent
