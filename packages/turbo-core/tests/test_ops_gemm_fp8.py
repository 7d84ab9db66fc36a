"""``gemm_fp8`` / ``gemm_fp4``: the dense conformance cases on TORCH, the primitives' reference against
hand-rolled float64 dequantization (every scale layout, E8M0 NaN bytes, packed FP4), validation
messages of the primitives and the public ops, pre-quantized operands, fused wgrad, edge cases,
opcheck and fullgraph compile."""

import itertools

import pytest
import torch

from turbo_core import Float4QuantConfig, Float8QuantConfig, QuantizedTensorPair, ScalingRecipe
from turbo_core.dispatch.dispatcher import stats
from turbo_core.dispatch.launch import gemm_fp8 as launch
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.gemm_fp8 import blockwise_layout
from turbo_core.ops.gemm_fp8 import gemm_fp4, gemm_fp8
from turbo_core.ops.quantization import quantize_fp4, quantize_fp8
from turbo_core.quantized_tensor import QuantizedTensor, create_quantized_weight
from turbo_core.testing.cases.gemm_fp8 import CASES
from turbo_core.testing.numerics import snr_db

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
E8M0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
DENSE = [c for c in CASES if c.id.startswith(("gemm_fp8", "gemm_fp4"))]
LOWP = {E4M3, E5M2, FP4, E8M0, torch.uint8, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz}


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


# -- conformance -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", DENSE, ids=[c.id for c in DENSE])
def test_conformance_torch(case):
    with use_backend("TORCH"):
        case.run()


@pytest.mark.parametrize("nth, what", [(0, "out"), (1, "grad_a"), (2, "grad_b")])
@pytest.mark.parametrize("case_id", ["gemm_fp8-ROWWISE-E4M3-67x45x96-NT-float32", "gemm_fp4-64x96x160-TN-float32"])
def test_conformance_cases_can_fail(monkeypatch, nth, what, case_id):
    """A GEMM off by 0.5 in one element of one pass must fail the case, naming that pass."""
    real = launch.call
    calls = []

    def corrupt(name, args):
        out = real(name, args)
        if name in ("gemm_fp8", "gemm_fp4"):
            calls.append(name)
            if len(calls) == nth + 1:
                out = out.clone()
                out.view(-1)[-1] += 0.5
        return out

    monkeypatch.setattr(launch, "call", corrupt)
    case = next(c for c in DENSE if c.id == case_id)
    with pytest.raises(AssertionError, match=what):
        case.run()


# -- the primitives' reference against hand-rolled dequantization ----------------------------------


def _rand_fp8(shape, dtype, gen):
    return (torch.randn(shape, generator=gen) * 8).to(dtype)


def _deq_loop(q, scale_of):
    """float64 dequantization of a 2-D tensor with ``scale_of(i, j)``, element by element."""
    out = torch.empty(q.shape, dtype=torch.float64)
    v = q.double()
    for i, j in itertools.product(range(q.shape[0]), range(q.shape[1])):
        out[i, j] = v[i, j] * scale_of(i, j)
    return out


def _scale_fn(gran, scale, contraction, bs):
    s = scale.double()
    if gran == "TENSORWISE":
        return lambda i, j: s.reshape(()).item()
    if gran == "ROWWISE":
        return lambda i, j: s[0 if s.shape[0] == 1 else i, 0 if s.shape[1] == 1 else j].item()
    if gran == "2d":
        return lambda i, j: s[i // bs, j // bs].item()
    if contraction == 1:
        return lambda i, j: s[i, j // bs].item()
    return lambda i, j: s[i // bs, j].item()


def _scales(kind, shape, contraction, bs, gen):
    r, c = shape
    if kind == "TENSORWISE":
        want = ()
    elif kind == "ROWWISE":
        want = (r, 1) if contraction == 1 else (1, c)
    elif kind == "2d":
        want = (-(-r // bs), -(-c // bs))
    else:
        want = (r, -(-c // bs)) if contraction == 1 else (-(-r // bs), c)
    return torch.rand(want, generator=gen) + 0.25


@pytest.mark.parametrize("ta, tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("kind_a, kind_b", [("TENSORWISE", "TENSORWISE"), ("ROWWISE", "ROWWISE"),
                                            ("1d", "2d"), ("2d", "1d"), ("1d", "1d"), ("2d", "2d")])
def test_reference_every_scale_layout(ta, tb, kind_a, kind_b):
    gen = torch.Generator().manual_seed(hash((ta, tb, kind_a, kind_b)) % 1000)
    m, n, k, bs = 5, 6, 11, 4
    a = _rand_fp8((k, m) if ta else (m, k), E4M3, gen)
    b = _rand_fp8((n, k) if tb else (k, n), E5M2, gen)  # a hybrid pair
    ca, cb = (0 if ta else 1), (1 if tb else 0)
    sa, sb = _scales(kind_a, a.shape, ca, bs, gen), _scales(kind_b, b.shape, cb, bs, gen)
    gran = kind_a if kind_a in ("TENSORWISE", "ROWWISE") else "BLOCKWISE"
    block = bs if gran == "BLOCKWISE" else None
    if gran == "BLOCKWISE":
        assert blockwise_layout(tuple(a.shape), tuple(sa.shape), ca - 2, bs) == kind_a
    da = _deq_loop(a, _scale_fn(kind_a if gran == "BLOCKWISE" else gran, sa, ca, bs))
    db = _deq_loop(b, _scale_fn(kind_b if gran == "BLOCKWISE" else gran, sb, cb, bs))
    want = (da.t() if ta else da) @ (db.t() if tb else db)
    got = launch.gemm_fp8(a, sa, b, sb, trans_a=ta, trans_b=tb, out_dtype=torch.float32, granularity=gran,
                          block_size=block)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-5)
    got_t = launch.gemm_fp8(a, sa, b, sb, trans_a=ta, trans_b=tb, out_dtype=torch.bfloat16, granularity=gran,
                            block_size=block, trans_c=True)
    assert got_t.shape == (n, m) and got_t.dtype == torch.bfloat16 and got_t.is_contiguous()
    assert torch.equal(got_t, want.t().to(torch.bfloat16))  # rounded once, from float64
    out = torch.full((m, n), 0.5, dtype=torch.bfloat16)
    assert launch.gemm_fp8(a, sa, b, sb, trans_a=ta, trans_b=tb, granularity=gran, block_size=block, out=out) is out
    assert torch.equal(out, (want + 0.5).to(torch.bfloat16))


def _e8m0(byte):
    return byte.to(torch.uint8).view(E8M0)


def test_reference_mx_blocks_and_nan_scale():
    gen = torch.Generator().manual_seed(3)
    m, n, k = 3, 4, 64
    a, b = _rand_fp8((m, k), E4M3, gen), _rand_fp8((n, k), E5M2, gen)
    ba = torch.randint(118, 136, (m, k // 32), generator=gen)
    bb = torch.randint(118, 136, (n, k // 32), generator=gen)
    ba[1, 1] = 0  # 2**-127
    da = _deq_loop(a, lambda i, j: 2.0 ** (int(ba[i, j // 32]) - 127))
    db = _deq_loop(b, lambda i, j: 2.0 ** (int(bb[i, j // 32]) - 127))
    got = launch.gemm_fp8(a, _e8m0(ba), b, _e8m0(bb), trans_b=True, out_dtype=torch.float32,
                          granularity="MX_BLOCKWISE")
    torch.testing.assert_close(got.double(), da @ db.t(), rtol=1e-6, atol=1e-30)
    # uint8 scales are the same bytes
    got8 = launch.gemm_fp8(a, ba.to(torch.uint8), b, bb.to(torch.uint8), trans_b=True, out_dtype=torch.float32,
                           granularity="MX_BLOCKWISE", block_size=32)
    assert torch.equal(got8, got)
    ba[2, 0] = 255  # the E8M0 NaN: row 2 of the result is NaN, the others are not
    got = launch.gemm_fp8(a, _e8m0(ba), b, _e8m0(bb), trans_b=True, out_dtype=torch.float32,
                          granularity="MX_BLOCKWISE")
    assert torch.isnan(got[2]).all() and torch.isfinite(got[:2]).all()


@pytest.mark.skipif(FP4 is None, reason="torch has no float4_e2m1fn_x2")
def test_reference_fp4_nibbles():
    values = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    gen = torch.Generator().manual_seed(4)
    m, n, k = 2, 3, 32
    ca = torch.randint(0, 16, (m, k), generator=gen)
    cb = torch.randint(0, 16, (n, k), generator=gen)

    def pack(c):  # even element in the low nibble
        return (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8).view(FP4)

    def decode(c):
        return torch.tensor([[(-1.0 if v & 8 else 1.0) * values[v & 7] for v in row] for row in c.tolist()],
                            dtype=torch.float64)

    sa, sb = torch.tensor([[127], [129]]), torch.tensor([[126], [127], [130]])
    want = (decode(ca) * 2.0 ** (sa - 127)) @ (decode(cb) * 2.0 ** (sb - 127)).t()
    got = launch.gemm_fp4(pack(ca), _e8m0(sa), pack(cb), _e8m0(sb), out_dtype=torch.float32)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=0)
    out = torch.ones(n, m)
    launch.gemm_fp4(pack(ca), _e8m0(sa), pack(cb), _e8m0(sb), trans_c=True, out=out)
    torch.testing.assert_close(out.double(), want.t() + 1, rtol=0, atol=1e-6)


# -- primitive validation --------------------------------------------------------------------------


def _fp8_args():
    a = torch.randn(3, 8).to(E4M3)
    b = torch.randn(8, 5).to(E4M3)
    return a, torch.tensor(1.0), b, torch.tensor(1.0)


def _prim(a, sa, b, sb, **kw):
    kw.setdefault("out_dtype", torch.float32)
    return launch.gemm_fp8(a, sa, b, sb, **kw)


@pytest.mark.parametrize("change, exc, match", [
    (lambda a, sa, b, sb: ((a.float(), sa, b, sb), {}), TypeError, r"^a: expected an FP8 dtype"),
    (lambda a, sa, b, sb: ((a, sa, b.to(torch.float8_e5m2fnuz), sb), {}), TypeError,
     r"^b: expected the FP8 flavour of a \(float8_e4m3fn: OCP\)"),
    (lambda a, sa, b, sb: ((a[None], sa, b, sb), {}), ValueError, r"^a: expected a 2-D tensor"),
    (lambda a, sa, b, sb: ((a, sa.half(), b, sb), {}), TypeError, r"^a_scale_inv: expected dtype in \(float32\)"),
    (lambda a, sa, b, sb: ((a, torch.ones(3), b, sb), {}), ValueError, r"^a_scale_inv: TENSORWISE expects a 0-dim"),
    (lambda a, sa, b, sb: ((a, sa, b[:5], sb), {}), ValueError, r"^b: inner dimension mismatch: op\(a\) is \[3, 8\]"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"out_dtype": None}), TypeError, r"^out_dtype: required"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"out_dtype": torch.int32}), TypeError, r"^out_dtype: expected one of"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"trans_a": 1}), TypeError, r"^trans_a: expected a bool"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"granularity": "PERCHANNEL"}), ValueError, r"^granularity: expected one of"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"block_size": 128}), ValueError,
     r"^block_size: TENSORWISE has no blocks"),
    (lambda a, sa, b, sb: ((a, torch.ones(3, 1), b, torch.ones(5, 1)), {"granularity": "ROWWISE"}), ValueError,
     r"^b_scale_inv: expected shape \(1, 5\) \(ROWWISE"),
    (lambda a, sa, b, sb: ((a, torch.ones(1, 3), b, torch.ones(1, 5)), {"granularity": "ROWWISE"}), ValueError,
     r"^a_scale_inv: expected shape \(3, 1\) \(ROWWISE"),
    (lambda a, sa, b, sb: ((a, torch.ones(3, 2), b, torch.ones(2, 5)), {"granularity": "BLOCKWISE"}), ValueError,
     r"^block_size: BLOCKWISE needs a positive int"),
    (lambda a, sa, b, sb: ((a, torch.ones(3, 8), b, torch.ones(2, 5)), {"granularity": "BLOCKWISE", "block_size": 4}),
     ValueError, r"^a_scale_inv: BLOCKWISE expects 1x4 blocks along K \(shape \(3, 2\)\) or 4x4 tiles \(shape \(1, 2\)\)"),
    (lambda a, sa, b, sb: ((a, torch.ones(3, 2), b, torch.ones(8, 2)), {"granularity": "BLOCKWISE", "block_size": 4}),
     ValueError, r"^b_scale_inv: BLOCKWISE expects"),
    (lambda a, sa, b, sb: ((a, sa, b, sb.to("meta")), {}), ValueError, r"^b_scale_inv: expected a tensor on cpu"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"out": torch.zeros(5, 3)}), ValueError,
     r"^out: expected shape \(3, 5\) \(trans_c=False\)"),
    (lambda a, sa, b, sb: ((a, sa, b, sb), {"out": torch.zeros(3, 5, dtype=torch.int32)}), TypeError,
     r"^out: expected dtype in"),
])
def test_primitive_validation(change, exc, match):
    args, kw = change(*_fp8_args())
    with pytest.raises(exc, match=match):
        _prim(*args, **kw)
    assert stats() == {}


def test_primitive_validation_mx_and_fp4():
    a, b = torch.randn(3, 64).to(E4M3), torch.randn(5, 64).to(E4M3)
    sa, sb = torch.zeros(3, 2, dtype=torch.uint8), torch.zeros(5, 2, dtype=torch.uint8)
    mx = {"granularity": "MX_BLOCKWISE", "out_dtype": torch.float32}
    with pytest.raises(ValueError, match=r"^trans_a: MX_BLOCKWISE GEMM is NT only"):
        launch.gemm_fp8(a, sa, b.t().contiguous(), sb, **mx)
    with pytest.raises(TypeError, match=r"^a: expected an OCP FP8 dtype \(MX_BLOCKWISE\)"):
        launch.gemm_fp8(a.to(torch.float8_e4m3fnuz), sa, b, sb, trans_b=True, **mx)
    with pytest.raises(TypeError, match=r"^a_scale_inv: expected dtype in"):
        launch.gemm_fp8(a, sa.float(), b, sb, trans_b=True, **mx)
    with pytest.raises(ValueError, match=r"^a_scale_inv: expected shape \(3, 2\) \(E8M0"):
        launch.gemm_fp8(a, sa[:, :1], b, sb, trans_b=True, **mx)
    with pytest.raises(ValueError, match=r"^a: MX data holds a multiple of 32 values along its last dim .*, got 48"):
        launch.gemm_fp8(a[:, :48], sa, b[:, :48], sb, trans_b=True, **mx)
    with pytest.raises(ValueError, match=r"^block_size: MX_BLOCKWISE uses blocks of 32"):
        launch.gemm_fp8(a, sa, b, sb, trans_b=True, block_size=16, **mx)
    if FP4 is None:
        return
    a4, b4 = torch.zeros(3, 32, dtype=torch.uint8).view(FP4), torch.zeros(5, 32, dtype=torch.uint8).view(FP4)
    with pytest.raises(TypeError, match=r"^a: expected dtype in \(float4_e2m1fn_x2\)"):
        launch.gemm_fp4(a, sa, b4, sb, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^trans_a: MXFP4 GEMM is NT only"):
        launch.gemm_fp4(a4, sa, b4, sb, trans_b=False, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^b: inner dimension mismatch"):
        launch.gemm_fp4(a4, sa, b4[:, :16], sb, out_dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^b_scale_inv: expected shape \(5, 2\)"):
        launch.gemm_fp4(a4, sa, b4, sb[:, :1], out_dtype=torch.float32)
    with pytest.raises(TypeError, match=r"^out_dtype: required"):
        launch.gemm_fp4(a4, sa, b4, sb)
    assert stats() == {}


# -- public op validation --------------------------------------------------------------------------


def _hp():
    return torch.randn(4, 8), torch.randn(6, 8)


@pytest.mark.parametrize("call, exc, match", [
    (lambda a, b: gemm_fp8(a, b, trans_b=True, config="TENSORWISE"), TypeError, r"^config: expected a Float8QuantConfig"),
    (lambda a, b: gemm_fp8(a[None], b, trans_b=True), ValueError, r"^a: expected a 2-D tensor"),
    (lambda a, b: gemm_fp8(a.long(), b, trans_b=True), TypeError, r"^a: expected a float16/bfloat16/float32 tensor"),
    (lambda a, b: gemm_fp8(a, b.to(E4M3), trans_b=True), TypeError, r"^b: expected a float16/bfloat16/float32"),
    (lambda a, b: gemm_fp8(a, b), ValueError, r"^b: inner dimension mismatch: op\(a\) is \[4, 8\] but op\(b\) is \[6, 8\]"),
    (lambda a, b: gemm_fp8(a, b, trans_b=1), TypeError, r"^trans_b: expected a bool"),
    (lambda a, b: gemm_fp8(a, b, trans_b=True, out_dtype=torch.float8_e4m3fn), TypeError, r"^out_dtype: expected one of"),
    (lambda a, b: gemm_fp8(a, b.to("meta"), trans_b=True), ValueError, r"^b: expected a tensor on cpu \(like a\)"),
    (lambda a, b: gemm_fp8(a, [[1.0]], trans_b=True), TypeError, r"^b: expected a torch.Tensor, QuantizedTensor"),
    (lambda a, b: gemm_fp8(a, b, trans_b=True, fuse_bgrad_accum_pattern="te"), ValueError,
     r"^fuse_bgrad_accum_pattern: expected None or 'megatron'"),
    (lambda a, b: gemm_fp8(a, b, trans_b=True, fuse_bgrad_accum_pattern="megatron"), ValueError,
     r"b must carry a main_grad"),
    (lambda a, b: gemm_fp4(a, b, trans_b=True, config=Float8QuantConfig()), TypeError,
     r"^config: expected a Float4QuantConfig"),
    (lambda a, b: gemm_fp4(a, b, trans_b=True, config=Float4QuantConfig(use_preshuffle=True)), ValueError,
     r"^config.use_preshuffle: pre-shuffled"),
])
def test_op_validation(call, exc, match):
    with pytest.raises(exc, match=match):
        call(*_hp())
    assert stats() == {}  # rejected before any kernel was selected or run


def test_op_rejects_mismatched_pre_quantized_operands():
    a, b = _hp()
    row = Float8QuantConfig(granularity="ROWWISE")
    qw_rows = QuantizedTensor.quantize(b, E4M3, "ROWWISE", axis=-1)
    with pytest.raises(ValueError, match=r"^b: pre-quantized with ROWWISE, but the config asks for TENSORWISE"):
        gemm_fp8(a, qw_rows, trans_b=True)
    qw_cols = QuantizedTensor.quantize(b, E4M3, "ROWWISE", axis=0)
    with pytest.raises(ValueError, match=r"^b: a pre-quantized b must be quantized along its dim -1"):
        gemm_fp8(a, qw_cols, trans_b=True, config=row)
    blk = Float8QuantConfig(granularity="BLOCKWISE", block_size=4)
    qw_blk = QuantizedTensor.quantize(b, E4M3, "BLOCKWISE", axis=-1, block_size=2)
    with pytest.raises(ValueError, match=r"^b: pre-quantized with block_size=2, but the config has block_size=4"):
        gemm_fp8(a, qw_blk, trans_b=True, config=blk)
    bad_t = QuantizedTensor.quantize(b.t().contiguous(), E4M3, "ROWWISE", axis=0)  # quantized along K again
    with pytest.raises(ValueError, match=r"^b: data_t must be quantized along its last dim"):
        gemm_fp8(a, QuantizedTensorPair(qw_rows, bad_t), trans_b=True, config=row)
    assert stats().get(("gemm_fp8", "TORCH", "default")) is None


# -- pre-quantized operands --------------------------------------------------------------------------


def test_pre_quantized_tensorwise_weight_matches_the_high_precision_path():
    torch.manual_seed(5)
    x = torch.randn(9, 16, requires_grad=True)
    w = torch.randn(7, 16)
    x2 = x.detach().clone().requires_grad_()
    qw, qw_t = create_quantized_weight(w, None, Float8QuantConfig(), need_weight_transpose_cache=True)
    for operand in (qw, QuantizedTensorPair(qw, qw_t)):
        y = gemm_fp8(x, operand, trans_b=True)
        y_ref = gemm_fp8(x2, w, trans_b=True)
        assert torch.equal(y, y_ref)  # TENSORWISE: the same quantization, the same GEMM
        g = torch.randn(9, 7)
        y.backward(g)
        y_ref.backward(g)
        assert torch.equal(x.grad, x2.grad)
        x.grad = x2.grad = None


@pytest.mark.parametrize("gran", ["ROWWISE", "MX_BLOCKWISE"])
def test_pre_quantized_weight_and_cached_transpose(gran):
    torch.manual_seed(6)
    cfg = Float8QuantConfig(granularity=gran)
    x = torch.randn(5, 64, requires_grad=True)
    x_plain = x.detach().clone().requires_grad_()
    w = torch.randn(6, 64)
    qw, qw_t = create_quantized_weight(w, None, cfg, need_weight_transpose_cache=True)
    y_plain = gemm_fp8(x_plain, qw, trans_b=True, config=cfg)  # requantizes qw along N itself
    y_pair = gemm_fp8(x, QuantizedTensorPair(qw, qw_t), trans_b=True, config=cfg)
    assert torch.equal(y_plain, y_pair)
    # The forward multiplies qw's values; the dgrad qw_t's (dC quantized per row of the result).
    g = torch.randn(5, 6)
    y_pair.backward(g)
    y_plain.backward(g)
    torch.testing.assert_close(x_plain.grad, x.grad, rtol=1e-6, atol=1e-6)  # the same values as qw.t()
    xq = QuantizedTensor.quantize(x.detach(), E4M3, gran, axis=-1)
    torch.testing.assert_close(y_pair.double(), xq.dequantize(torch.float32).double() @ qw.dequantize(torch.float32).double().t(),
                               rtol=1e-5, atol=1e-5)
    gq = QuantizedTensor.quantize(g, E5M2 if cfg.format == "HYBRID" else E4M3, gran, axis=-1)
    want_dx = gq.dequantize(torch.float32).double() @ qw_t.dequantize(torch.float32).double().t()
    torch.testing.assert_close(x.grad.double(), want_dx, rtol=1e-5, atol=1e-5)
    if gran == "MX_BLOCKWISE":  # 32x32 tiles: the requantized transpose holds the forward's values
        assert snr_db(qw.dequantize(torch.float32).double().t(), qw_t.dequantize(torch.float32).double()) > 60


def test_pre_quantized_weight_with_grad_gets_a_gradient():
    torch.manual_seed(7)
    x = torch.randn(4, 8)
    w = torch.randn(3, 8, requires_grad=True)
    qw = QuantizedTensor.quantize(w, E4M3, "TENSORWISE")
    assert qw.requires_grad
    gemm_fp8(x, qw, trans_b=True).sum().backward()
    assert qw.grad is not None and qw.grad.shape == (3, 8)
    xq = QuantizedTensor.quantize(x, E4M3, "TENSORWISE").dequantize(torch.float32).double()
    gq = QuantizedTensor.quantize(torch.ones(4, 3), E4M3, "TENSORWISE").dequantize(torch.float32).double()
    torch.testing.assert_close(qw.grad.double(), gq.t() @ xq, rtol=1e-5, atol=1e-5)


# -- semantics and edge cases ------------------------------------------------------------------------


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_fused_wgrad_returns_dummy_and_accumulates_twice(gran):
    torch.manual_seed(8)
    x = torch.randn(9, 64, requires_grad=True)
    w = torch.randn(32, 64, requires_grad=True)
    w.main_grad = torch.zeros(32, 64)
    if gran == "FP4":
        def fn(pattern):
            return gemm_fp4(x, w, trans_b=True, fuse_bgrad_accum_pattern=pattern)
    else:
        cfg = Float8QuantConfig(granularity=gran, block_size=32 if gran == "BLOCKWISE" else None)

        def fn(pattern):
            return gemm_fp8(x, w, trans_b=True, config=cfg, fuse_bgrad_accum_pattern=pattern)
    for _ in range(2):
        fn("megatron").sum().backward()
    assert w.grad_added_to_main_grad is True
    assert torch.count_nonzero(w.grad) == 0  # the dummy gradient, never the real one
    w.grad = None
    fn(None).sum().backward()  # the unfused wgrad of the same call
    real = w.grad
    torch.testing.assert_close(w.main_grad, 2 * real, rtol=1e-5, atol=1e-5)


def test_out_dtype_defaults_and_mixed_inputs():
    a = torch.randn(4, 8, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(8, 3, requires_grad=True)
    c = gemm_fp8(a, b)
    assert c.dtype == torch.float32  # promote_types(bf16, fp32)
    c.sum().backward()
    assert a.grad.dtype == torch.bfloat16 and b.grad.dtype == torch.float32
    assert gemm_fp8(a, b, out_dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
def test_zero_rows_and_non_contiguous(gran):
    cfg = Float8QuantConfig(granularity=gran)
    a = torch.zeros(0, 8, requires_grad=True)
    b = torch.randn(5, 8, requires_grad=True)
    out = gemm_fp8(a, b, trans_b=True, config=cfg)
    assert out.shape == (0, 5)
    out.sum().backward()
    assert a.grad.shape == (0, 8) and torch.count_nonzero(b.grad) == 0
    torch.manual_seed(9)
    a_nc = torch.randn(8, 6).t()  # [6, 8], strides (1, 6)
    b_nc = torch.randn(5, 16)[:, ::2]  # [5, 8], strides (16, 2)
    assert not a_nc.is_contiguous() and not b_nc.is_contiguous()
    got = gemm_fp8(a_nc, b_nc, trans_b=True, config=cfg)
    assert torch.equal(got, gemm_fp8(a_nc.contiguous(), b_nc.contiguous(), trans_b=True, config=cfg))


def test_no_grad_forward_quantizes_each_operand_once():
    a, b = torch.randn(4, 64, requires_grad=True), torch.randn(6, 64, requires_grad=True)
    cfg = Float8QuantConfig(granularity="ROWWISE")
    with torch.no_grad():
        gemm_fp8(a, b, trans_b=True, config=cfg)
    calls = {k[0]: v for k, v in stats().items()}
    assert calls == {"quantize_fp8": 2, "gemm_fp8": 1}
    # with gradients: the col-wise copies of a (wgrad) and b (dgrad) are made in the forward
    gemm_fp8(a, b, trans_b=True, config=cfg)
    calls = {k[0]: v for k, v in stats().items()}
    assert calls == {"quantize_fp8": 6, "gemm_fp8": 2}


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_forward_without_gradients_makes_no_node_and_the_same_bits(gran):
    """Inputs that need no gradient take the forward alone (no autograd node): the same output,
    bit for bit, as the recording path, whose backward still works."""
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(48, 64, generator=gen), torch.randn(32, 64, generator=gen)
    op = gemm_fp4 if gran == "FP4" else gemm_fp8
    cfg = Float4QuantConfig() if gran == "FP4" else Float8QuantConfig(
        granularity=gran, block_size=32 if gran == "BLOCKWISE" else None)
    plain = op(a, b, trans_b=True, config=cfg)
    assert plain.grad_fn is None
    a_g = a.clone().requires_grad_(True)
    recorded = op(a_g, b, trans_b=True, config=cfg)
    assert recorded.grad_fn is not None
    assert torch.equal(plain, recorded.detach())
    recorded.sum().backward()
    assert a_g.grad is not None and a_g.grad.shape == a.shape


def test_config_changed_after_a_call_is_read_again():
    """The op's scheme follows the config's current fields: E5M2 after ``config.format = E5M2``
    gives E5M2's result, not the one of the first call's E4M3."""
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(16, 64, generator=gen), torch.randn(8, 64, generator=gen)
    cfg = Float8QuantConfig()
    e4m3 = gemm_fp8(a, b, trans_b=True, config=cfg)
    cfg.format = "E5M2"
    e5m2 = gemm_fp8(a, b, trans_b=True, config=cfg)
    assert torch.equal(e5m2, gemm_fp8(a, b, trans_b=True, config=Float8QuantConfig(format="E5M2")))
    assert not torch.equal(e4m3, e5m2)


# -- torch.compile and opcheck ---------------------------------------------------------------------


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "FP4"])
def test_compile_fullgraph_forward_backward(gran):
    torch.manual_seed(10)
    a = torch.randn(7, 64, requires_grad=True)
    b = torch.randn(64, 40, requires_grad=True)
    if gran == "FP4":
        def fn(x, y):
            return gemm_fp4(x, y)
    else:
        cfg = Float8QuantConfig(format="HYBRID", granularity=gran, block_size=32 if gran == "BLOCKWISE" else None)

        def fn(x, y):
            return gemm_fp8(x, y, config=cfg)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(a, b)
    out.square().sum().backward()
    ref = fn(a2, b2)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(a.grad, a2.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(b.grad, b2.grad, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "MX_BLOCKWISE"])
@pytest.mark.parametrize("pair", [False, True])
def test_compile_fullgraph_pre_quantized_weight(gran, pair):
    torch.manual_seed(12)
    cfg = Float8QuantConfig(granularity=gran)
    qw, qw_t = create_quantized_weight(torch.randn(16, 64), None, cfg, need_weight_transpose_cache=True)
    x = torch.randn(4, 64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()

    def fn(x_, w_, w_t):
        return gemm_fp8(x_, QuantizedTensorPair(w_, w_t) if pair else w_, trans_b=True, config=cfg)
    # dynamic=False: a recompile of this (shared) code with automatic dynamic shapes trips a torch
    # guard-building bug on tensor-subclass inputs (IndexError in produce_guards), unrelated to turbo.
    out = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=False)(x, qw, qw_t)
    out.square().sum().backward()
    want = fn(x2, qw, qw_t)
    want.square().sum().backward()
    assert torch.equal(out, want)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-6, atol=1e-6)


def test_compile_fullgraph_fused_wgrad():
    torch.manual_seed(11)
    x = torch.randn(5, 32, requires_grad=True)
    w = torch.randn(16, 32, requires_grad=True)
    w.main_grad = torch.zeros(16, 32)
    fn = torch.compile(lambda x_, w_: gemm_fp8(x_, w_, trans_b=True, fuse_bgrad_accum_pattern="megatron"),
                       fullgraph=True, backend="aot_eager")
    fn(x, w).sum().backward()
    want = w.main_grad.clone()
    w.main_grad.zero_()
    gemm_fp8(x.detach(), w, trans_b=True, fuse_bgrad_accum_pattern="megatron").sum().backward()
    torch.testing.assert_close(want, w.main_grad, rtol=1e-6, atol=1e-6)
    assert torch.count_nonzero(want) > 0


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
    x, w = torch.randn(5, 64), torch.randn(7, 64)
    qa, sa = quantize_fp8(x, E4M3, "TENSORWISE")
    qb, sb = quantize_fp8(w, E5M2, "TENSORWISE")
    _opcheck(ops.gemm_fp8.default, (qa, sa, qb, sb, False, True, torch.bfloat16, "TENSORWISE", None, False))
    _opcheck(ops.gemm_fp8.default, (qb, sb, qa, sa, False, True, torch.float32, "TENSORWISE", None, True))
    ra, rsa = quantize_fp8(x, E4M3, "ROWWISE", axis=-1)
    rb, rsb = quantize_fp8(w, E4M3, "ROWWISE", axis=-1)
    _opcheck(ops.gemm_fp8.default, (ra, rsa, rb, rsb, False, True, torch.float16, "ROWWISE", None, False))
    ba, bsa = quantize_fp8(x, E4M3, "BLOCKWISE", axis=-1, block_size=32)
    bb, bsb = quantize_fp8(w, E4M3, "BLOCKWISE", block_size=32, scaling_recipe=ScalingRecipe(use_2d_block=True))
    _opcheck(ops.gemm_fp8.default, (ba, bsa, bb, bsb, False, True, torch.float32, "BLOCKWISE", 32, False))
    ma, msa = quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=-1)
    mb, msb = quantize_fp8(w, E4M3, "MX_BLOCKWISE", axis=-1)
    _opcheck(ops.gemm_fp8.default, (ma, msa, mb, msb, False, True, torch.bfloat16, "MX_BLOCKWISE", 32, False))
    _opcheck(ops.gemm_fp8_accum.default, (qa, sa, qb, sb, False, True, "TENSORWISE", None, True, torch.zeros(7, 5)))
    _opcheck(ops.gemm_fp8_accum.default, (ma, msa, mb, msb, False, True, "MX_BLOCKWISE", 32, False,
                                          torch.zeros(5, 7, dtype=torch.bfloat16)))
    if FP4 is None:
        return
    fa, fsa = quantize_fp4(x, FP4, "MX_BLOCKWISE", axis=-1)
    fb, fsb = quantize_fp4(w, FP4, "MX_BLOCKWISE", axis=-1)
    _opcheck(ops.gemm_fp4.default, (fa, fsa, fb, fsb, False, True, torch.bfloat16, False))
    _opcheck(ops.gemm_fp4_accum.default, (fa, fsa, fb, fsb, False, True, True, torch.zeros(7, 5)))


@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (False, False), (True, False)])
def test_rowwise_backward_gemms_get_k_major_operands(monkeypatch, trans_a, trans_b):
    """ROWWISE: every GEMM of the forward and backward gets both operands contiguous along its
    contraction dim (the column copies are quantized from the transposed view), and the result and
    gradients are bit-identical to quantizing the column copies in the stored layout."""
    import importlib

    op = importlib.import_module("turbo_core.ops.gemm_fp8")
    seen = []
    real_launch, real_quantize = launch.gemm_fp8, op.quantize

    def spy(a, sa, b, sb, *, trans_a, trans_b, **kw):
        k_dim_a = a.stride(0) if trans_a else a.stride(1)  # op(a) [M, K]: unit stride along K
        k_dim_b = b.stride(1) if trans_b else b.stride(0)  # op(b) [K, N]: unit stride along K
        seen.append((k_dim_a == 1, k_dim_b == 1))
        return real_launch(a, sa, b, sb, trans_a=trans_a, trans_b=trans_b, **kw)

    def run():
        g = torch.Generator().manual_seed(11)
        a = torch.randn(*((48, 40) if trans_a else (40, 48)), generator=g).bfloat16().requires_grad_()
        b = torch.randn(*((24, 48) if trans_b else (48, 24)), generator=g).bfloat16().requires_grad_()
        cfg = Float8QuantConfig(granularity="ROWWISE")
        out = gemm_fp8(a, b, trans_a=trans_a, trans_b=trans_b, config=cfg)
        out.backward(torch.randn(out.shape, generator=g).bfloat16())
        return out, a.grad, b.grad

    monkeypatch.setattr(op.launch, "gemm_fp8", spy)
    with use_backend("TORCH"):
        got = run()
        assert seen == [(True, True)] * 3, seen  # forward, dgrad, wgrad
        monkeypatch.setattr(op, "quantize", lambda *a, **kw: real_quantize(*a, **{**kw, "k_major": False}))
        want = run()
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
