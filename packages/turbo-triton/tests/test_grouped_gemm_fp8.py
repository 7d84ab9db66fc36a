"""The TRITON grouped FP8 GEMM kernels directly (CPU interpreter) against float64 math on the
dequantized operands: both kernel paths (the TMA kernels run here too, through the interpreter's
tensor descriptors), every granularity and scale layout of the spec (BLOCKWISE b as 1-D blocks and as
bs x bs tiles), both layouts of b, trans_c, accumulate into out, every out dtype, E4M3 / E5M2 / HYBRID
(native and upcast) / FNUZ, BLOCKWISE with deferred scaling, empty groups, the zeroed tail, poisoned
outputs, and what they decline.

Operands are random FP8 values with random positive fp32 scales (the GEMM's semantics hold for any
scales; quantization is tested in its own family), except one end-to-end test that takes the layouts
from the grouped quantizer. Group lengths (5, 0, 17) plus an unowned tail of NaN rows; K and N odd on
the pointer kernel, multiples of 16 on the TMA kernel (16-byte strides of FP8 rows). BLOCKWISE uses
block size 16 (K=40: two full blocks and a partial one; N=33: partial 2-D tiles), and 32 with a K step
of 16 (two steps per scale block). The variable-K BLOCKWISE groups start on multiples of the block, as
the grouped quantizer pads them, and one test does not (the kernels must not depend on it).
"""

import pytest
import torch

from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GROUPED_GEMM_FP8,
    GROUPED_GEMM_FP8_VARIABLE_K,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
)
from turbo_triton.grouped_gemm_fp8 import configs, launch
from turbo_triton.grouped_gemm_fp8.configs import Fp8GroupedConfig
from turbo_triton.grouped_gemm_fp8.launch import (
    can_handle,
    can_handle_variable_k,
    grouped_gemm_fp8,
    grouped_gemm_fp8_variable_k,
    kernel_path,
    variable_k_kernel_path,
)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
LENS = (5, 0, 17)
TAIL = 3
#: id -> (granularity, block size, b's BLOCKWISE scales as bs x bs tiles)
GRANS = {
    "tensorwise": ("TENSORWISE", None, False),
    "rowwise": ("ROWWISE", None, False),
    "blockwise-1d": ("BLOCKWISE", 16, False),
    "blockwise-2d": ("BLOCKWISE", 16, True),
}
SMALL = Fp8GroupedConfig(16, 16, 16, 2, 1, 1)  # several tiles per group, full and partial
SPLIT = Fp8GroupedConfig(16, 32, 16, 2, 1, 1, flatten=True, subtile=True)  # epilogue stored in halves
TALL = Fp8GroupedConfig(32, 16, 16, 2, 1, 1)  # wgrad: K=48 is not a multiple of 32: masked stores
# (path, K, N, config): odd sizes on the pointer kernel (K=40 for BLOCKWISE: a partial last block),
# aligned ones on the TMA kernel
FWD_PATHS = [("pointer", 45, 33, None), ("tma", 48, 32, SMALL), ("tma", 48, 32, SPLIT)]
VARK_PATHS = [("pointer", 45, 33, None), ("tma", 48, 32, SMALL), ("tma", 48, 32, TALL),
              ("tma+kmajor", 48, 32, SMALL), ("tma+kmajor", 48, 32, TALL)]


def _ids(paths):
    return [f"{p}-{'table' if c is None else 'split' if c.subtile else 'small' if c is SMALL else 'tall'}"
            for p, _, _, c in paths]


def _offs(lens) -> torch.Tensor:
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64)
    offs[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return offs


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _fp8(shape, dtype, gen) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 2).to(dtype)


def _scale(shape, gen) -> torch.Tensor:
    return torch.rand(shape, generator=gen) * 1.5 + 0.5


def _expand(s: torch.Tensor, dim: int, bs: int, size: int) -> torch.Tensor:
    return s.repeat_interleave(bs, dim=dim).narrow(dim, 0, size)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled tensors, so an output element the kernel misses shows."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", empty)


def _fwd(args, config=None, path=None, upcast=None):
    GROUPED_GEMM_FP8.check_args(args)  # the arguments the tests build are valid calls of the primitive
    return grouped_gemm_fp8(args, config, path, upcast)


def _vark(args, config=None, path=None, upcast=None):
    GROUPED_GEMM_FP8_VARIABLE_K.check_args(args)
    return grouped_gemm_fp8_variable_k(args, config, path, upcast)


def _close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


# -- forward ----------------------------------------------------------------------------------------


def _fwd_case(gran, bs, two_d, k, n, trans_b, a_dtype=E4M3, b_dtype=E4M3, lens=LENS, tail=TAIL, seed=0):
    """Random operands and scales in the spec's layouts, and their float64 dequantized values."""
    gen = torch.Generator().manual_seed(seed + 7 * k + n + 3 * trans_b)
    groups, m = len(lens), sum(lens) + tail
    a = _fp8((m, k), a_dtype, gen)
    if tail:
        a[m - tail:] = float("nan")  # rows outside every group are never read into a result
    b = _fp8((groups, n, k) if trans_b else (groups, k, n), b_dtype, gen)
    k_dim = 2 if trans_b else 1
    if gran == "TENSORWISE":
        sa, sb = _scale((), gen), _scale((), gen)
        a64, b64 = a.double() * sa.double(), b.double() * sb.double()
    elif gran == "ROWWISE":
        sa, sb = _scale((m, 1), gen), _scale((groups, n, 1) if trans_b else (groups, 1, n), gen)
        a64, b64 = a.double() * sa.double(), b.double() * sb.double()
    else:
        kb = _cdiv(k, bs)
        sa = _scale((kb, m), gen)  # 1 x bs blocks along K, stored transposed
        a64 = a.double() * _expand(sa.double().t(), 1, bs, k)
        if two_d:
            sb = _scale((groups, _cdiv(b.shape[1], bs), _cdiv(b.shape[2], bs)), gen)
            full = _expand(_expand(sb.double(), 1, bs, b.shape[1]), 2, bs, b.shape[2])
        else:
            sb = _scale((groups, n, kb) if trans_b else (groups, kb, n), gen)
            full = _expand(sb.double(), k_dim, bs, k)
        b64 = b.double() * full
    want = torch.zeros(m, n, dtype=torch.float64)
    start = 0
    for g, rows in enumerate(lens):
        w = b64[g].t() if trans_b else b64[g]
        want[start:start + rows] = a64[start:start + rows] @ w
        start += rows
    args = dict(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=torch.tensor(lens, dtype=torch.int64),
                group_offs=_offs(lens), trans_b=trans_b, granularity=gran, block_size=bs)
    return args, want


def _check_fwd(c, want, out_dtype, tail=TAIL):
    assert c.dtype == out_dtype and c.shape == want.shape
    _close(c, want, out_dtype)
    if tail:
        assert torch.count_nonzero(c[c.shape[0] - tail:]) == 0, "the rows past the last group must be zero"


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("path,k,n,cfg", FWD_PATHS, ids=_ids(FWD_PATHS))
@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
@pytest.mark.parametrize("gran_id", list(GRANS))
def test_forward_against_float64(gran_id, trans_b, path, k, n, cfg):
    gran, bs, two_d = GRANS[gran_id]
    if bs and path == "pointer":
        k = 40
    args, want = _fwd_case(gran, bs, two_d, k, n, trans_b)
    c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32), cfg, path)
    _check_fwd(c, want, torch.float32)


# E5M2, both HYBRID orders (native mixed dot and upcast to fp16), FNUZ; bf16/fp16 out
FORMATS = [(E5M2, E5M2, None), (E4M3, E5M2, None), (E5M2, E4M3, None), (E4M3, E5M2, True), (E4M3, E4M3, True),
           (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, None), (torch.float8_e5m2fnuz, torch.float8_e4m3fnuz, None)]


def _fmt_id(f):
    name = {E4M3: "e4m3", E5M2: "e5m2", torch.float8_e4m3fnuz: "e4m3fnuz", torch.float8_e5m2fnuz: "e5m2fnuz"}
    return f"{name[f[0]]}x{name[f[1]]}" + ("-upcast" if f[2] else "")


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("fmt", FORMATS, ids=[_fmt_id(f) for f in FORMATS])
@pytest.mark.parametrize("gran_id", ["rowwise", "blockwise-2d"])
def test_forward_formats(gran_id, fmt):
    gran, bs, two_d = GRANS[gran_id]
    a_dtype, b_dtype, upcast = fmt
    args, want = _fwd_case(gran, bs, two_d, 48, 32, True, a_dtype, b_dtype, seed=1)
    c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32), SMALL, "tma", upcast=upcast)
    _check_fwd(c, want, torch.float32)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("path", ["pointer", "tma"])
@pytest.mark.parametrize("gran_id", ["tensorwise", "blockwise-1d"])
def test_forward_out_dtypes(gran_id, path, out_dtype):
    gran, bs, two_d = GRANS[gran_id]
    args, want = _fwd_case(gran, bs, two_d, 48, 48, False, seed=2)
    c = _fwd(GroupedGemmFp8Args(**args, out_dtype=out_dtype), SMALL, path)
    _check_fwd(c, want, out_dtype)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("path", ["pointer", "tma"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
def test_forward_blockwise_k_step_below_block(trans_b, path):
    # block size 32 with a K step of 16: two K steps share each scale block
    for two_d in (False, True):
        args, want = _fwd_case("BLOCKWISE", 32, two_d, 80, 48, trans_b, seed=3)
        c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32), SMALL, path)
        _check_fwd(c, want, torch.float32)


def test_forward_group_patterns_and_num_cu():
    # every group empty but a tail; the first/last groups empty; one program for all tiles
    for lens, tail, num_cu in (((0, 0), 6, None), ((0, 1, 17, 5), 0, None), ((9, 14, 0), 2, 1)):
        args, want = _fwd_case("ROWWISE", None, False, 45, 33, True, lens=lens, tail=tail, seed=4)
        c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32, num_cu=num_cu), SMALL)
        _check_fwd(c, want, torch.float32, tail)


def test_forward_strided_operands_and_scales():
    # the pointer kernel takes any strides: a column-strided a, b as a transposed view, a's block
    # scales as a transposed view of [M, kb], b's 1-D block scales as a slice
    gen = torch.Generator().manual_seed(5)
    args, want = _fwd_case("BLOCKWISE", 16, False, 40, 33, True, seed=5)
    a_big = torch.zeros(args["a"].shape[0], 2 * args["a"].shape[1], dtype=E4M3)
    a_big[:, ::2] = args["a"]
    b_t = args["b"].transpose(1, 2).contiguous().transpose(1, 2)
    sa_t = args["a_scale_inv"].t().contiguous().t()
    sb_big = torch.cat([args["b_scale_inv"], _scale(args["b_scale_inv"].shape, gen)], dim=2)[:, :, :3]
    args.update(a=a_big[:, ::2], b=b_t, a_scale_inv=sa_t, b_scale_inv=sb_big)
    assert not args["a"].is_contiguous() and not args["b"].is_contiguous() and not sa_t.is_contiguous()
    c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32))
    _check_fwd(c, want, torch.float32)


# -- variable K (wgrad) ---------------------------------------------------------------------------


def _vark_case(gran, bs, k, n, trans_c, a_dtype=E4M3, b_dtype=E4M3, lens=LENS, tail=TAIL, seed=0):
    gen = torch.Generator().manual_seed(seed + 7 * k + n + 3 * trans_c)
    m = sum(lens) + tail
    a, b = _fp8((m, k), a_dtype, gen), _fp8((m, n), b_dtype, gen)
    if tail:
        a[m - tail:] = float("nan")
        b[m - tail:] = float("inf")
    if gran == "TENSORWISE":
        sa, sb = _scale((), gen), _scale((), gen)
        a64, b64 = a.double() * sa.double(), b.double() * sb.double()
    elif gran == "ROWWISE":
        sa, sb = _scale((1, k), gen), _scale((1, n), gen)
        a64, b64 = a.double() * sa.double(), b.double() * sb.double()
    else:  # bs x 1 blocks along M
        sa, sb = _scale((_cdiv(m, bs), k), gen), _scale((_cdiv(m, bs), n), gen)
        a64 = a.double() * _expand(sa.double(), 0, bs, m)
        b64 = b.double() * _expand(sb.double(), 0, bs, m)
    mats, start = [], 0
    for rows in lens:
        c = a64[start:start + rows].t() @ b64[start:start + rows]
        mats.append(c.t() if trans_c else c)
        start += rows
    args = dict(a=a, a_scale_inv=sa, b=b, b_scale_inv=sb, group_lens=torch.tensor(lens, dtype=torch.int64),
                group_offs=_offs(lens), granularity=gran, block_size=bs, trans_c=trans_c)
    return args, torch.stack(mats)


#: BLOCKWISE wgrad groups as the grouped quantizer pads them: each starting on a multiple of 16
PADDED_LENS = (16, 0, 37)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("path,k,n,cfg", VARK_PATHS, ids=_ids(VARK_PATHS))
@pytest.mark.parametrize("trans_c", [False, True], ids=["C", "CT"])
@pytest.mark.parametrize("gran_id", ["tensorwise", "rowwise", "blockwise-1d"])
def test_variable_k_against_float64(gran_id, trans_c, path, k, n, cfg):
    gran, bs, _ = GRANS[gran_id]
    lens = PADDED_LENS if bs else LENS
    args, want = _vark_case(gran, bs, k, n, trans_c, lens=lens, tail=11 if bs else TAIL)
    c = _vark(GroupedGemmFp8VariableKArgs(**args, out_dtype=torch.float32), cfg, path)
    assert c.dtype == torch.float32 and c.shape == want.shape
    _close(c, want, torch.float32)
    assert torch.count_nonzero(c[1]) == 0, "an empty group gives a zero matrix"


@pytest.mark.parametrize("path", ["pointer", "tma", "tma+kmajor"])
@pytest.mark.parametrize("trans_c", [False, True], ids=["C", "CT"])
def test_variable_k_blockwise_unaligned_groups(trans_c, path):
    # group starts that are not multiples of the block size (a broken precondition of the spec's
    # padded layout, and block 32 with a K step of 16): still the float64 result, row block r // bs
    for bs, lens in ((16, (5, 0, 17)), (32, (9, 40, 1, 30))):
        args, want = _vark_case("BLOCKWISE", bs, 48, 32, trans_c, lens=lens, tail=5, seed=bs)
        c = _vark(GroupedGemmFp8VariableKArgs(**args, out_dtype=torch.float32), SMALL, path)
        _close(c, want, torch.float32)


VARK_FORMATS = [(E5M2, E5M2, None), (E4M3, E5M2, None), (E5M2, E4M3, True),
                (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, None)]


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("fmt", VARK_FORMATS, ids=[_fmt_id(f) for f in VARK_FORMATS])
@pytest.mark.parametrize("gran_id", ["rowwise", "blockwise-1d"])
def test_variable_k_formats(gran_id, fmt):
    gran, bs, _ = GRANS[gran_id]
    a_dtype, b_dtype, upcast = fmt
    lens = PADDED_LENS if bs else LENS
    args, want = _vark_case(gran, bs, 48, 32, False, a_dtype, b_dtype, lens=lens, seed=1)
    c = _vark(GroupedGemmFp8VariableKArgs(**args, out_dtype=torch.float32), SMALL, "tma",
                                    upcast=upcast)
    _close(c, want, torch.float32)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("path", ["pointer", "tma"])
def test_variable_k_out_dtypes(path, out_dtype):
    args, want = _vark_case("BLOCKWISE", 16, 48, 32, path == "tma", lens=PADDED_LENS, seed=3)
    c = _vark(GroupedGemmFp8VariableKArgs(**args, out_dtype=out_dtype), SMALL, path)
    assert c.dtype == out_dtype
    _close(c, want, out_dtype)


# accumulate into out (the fused wgrad): fp32 and bf16 out, both paths, the output TMA store and
# the masked one, in both layouts
ACCUM = [("rowwise", "pointer", None, torch.float32, False), ("blockwise-1d", "tma", SMALL, torch.bfloat16, True),
         ("tensorwise", "tma", TALL, torch.float32, False), ("blockwise-1d", "pointer", None, torch.float16, True),
         ("rowwise", "tma+kmajor", SMALL, torch.bfloat16, True)]


@pytest.mark.parametrize("gran_id,path,cfg,out_dtype,trans_c", ACCUM,
                         ids=[f"{g}-{p}-{str(d)[6:]}-{'CT' if t else 'C'}" for g, p, _, d, t in ACCUM])
def test_variable_k_accumulates_into_out(gran_id, path, cfg, out_dtype, trans_c):
    gran, bs, _ = GRANS[gran_id]
    lens = PADDED_LENS if bs else LENS
    args, want = _vark_case(gran, bs, 48, 32, trans_c, lens=lens, seed=2)
    gen = torch.Generator().manual_seed(9)
    base = torch.randn(*want.shape, generator=gen).to(out_dtype)
    out = base.clone()
    got = _vark(GroupedGemmFp8VariableKArgs(**args, out=out), cfg, path)
    assert got is out and out.dtype == out_dtype
    _close(out, base.double() + want, out_dtype)
    assert torch.equal(out[1], base[1]), "an empty group leaves out[g] unchanged"


def test_quantizer_layouts_end_to_end():
    # BLOCKWISE operands exactly as the op makes them (turbo_core.ops.quantization, the reference
    # quantizers): tokens row-wise with transposed scales, the weight in bs x bs tiles, the wgrad
    # copies col-wise with each group padded to bs and the padded offsets
    from turbo_core.low_precision import ScalingRecipe
    from turbo_core.ops import quantization as q
    from turbo_core.testing.numerics import snr_db

    bs, lens = 32, torch.tensor([40, 0, 23], dtype=torch.int64)
    gen = torch.Generator().manual_seed(6)
    x, w, dy = torch.randn(63, 64, generator=gen), torch.randn(3, 48, 64, generator=gen), \
        torch.randn(63, 48, generator=gen)
    offs = _offs(lens.tolist())
    xq, xs, _, _ = q.grouped_quantize_fp8(x, E4M3, "BLOCKWISE", lens, offs, axis=1, block_size=bs)
    wq, ws = q.quantize_fp8(w, E4M3, "BLOCKWISE", block_size=bs, scaling_recipe=ScalingRecipe(use_2d_block=True))
    c = _fwd(GroupedGemmFp8Args(xq, xs, wq, ws, lens, offs, True, torch.float32, "BLOCKWISE", bs))
    ideal = torch.cat([x[:40].double() @ w[0].double().t(), x[40:].double() @ w[2].double().t()])
    assert snr_db(ideal, c) >= 25
    xc, xcs, dyc, dycs, lens_p, offs_p = *q.grouped_quantize_fp8(x, E4M3, "BLOCKWISE", lens, offs, axis=0,
                                                                  block_size=bs)[:2], \
        *q.grouped_quantize_fp8(dy, E5M2, "BLOCKWISE", lens, offs, axis=0, block_size=bs)
    assert torch.all(offs_p % bs == 0) and xc.shape[0] == 63 + 3 * bs
    dw = _vark(GroupedGemmFp8VariableKArgs(
        xc, xcs, dyc, dycs, lens_p, offs_p, torch.float32, "BLOCKWISE", bs, trans_c=True))
    ideal_dw = torch.stack([dy[:40].double().t() @ x[:40].double(), torch.zeros(48, 64, dtype=torch.float64),
                            dy[40:].double().t() @ x[40:].double()])
    assert dw.shape == (3, 48, 64) and torch.count_nonzero(dw[1]) == 0
    assert snr_db(ideal_dw, dw) >= 20


DEFER = Fp8GroupedConfig(16, 16, 16, 2, 1, 1, defer_scale=True)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("bs", [16, 32])
def test_blockwise_deferred_scaling(bs):
    # the TMA kernels' option to scale each K step's product one step later: forward both layouts,
    # the wgrad on padded and unpadded groups (masked first/last chunks scaled at once)
    for trans_b in (False, True):
        args, want = _fwd_case("BLOCKWISE", bs, True, 80, 32, trans_b, seed=bs)
        _check_fwd(_fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32), DEFER, "tma"), want, torch.float32)
    for lens in ((16, 0, 37), (5, 0, 70)):
        args, want = _vark_case("BLOCKWISE", bs, 48, 32, True, lens=lens, seed=bs)
        _close(_vark(GroupedGemmFp8VariableKArgs(**args, out_dtype=torch.float32), DEFER, "tma"), want,
               torch.float32)


# -- edges, paths, declines -------------------------------------------------------------------------


@pytest.mark.usefixtures("poisoned_empty")
def test_edge_sizes():
    def fwd(m, k, n, lens):
        gen = torch.Generator().manual_seed(0)
        a, b = _fp8((m, k), E4M3, gen), _fp8((len(lens), k, n), E4M3, gen)
        offs = torch.zeros(len(lens) + 1, dtype=torch.int64)
        offs[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
        return _fwd(GroupedGemmFp8Args(a, _scale((), gen), b, _scale((), gen), torch.tensor(
            lens, dtype=torch.int64), offs, False, torch.bfloat16))

    assert fwd(0, 8, 5, (0, 0)).shape == (0, 5)
    for c in (fwd(6, 8, 5, (0, 0)), fwd(4, 8, 5, ()), fwd(4, 0, 5, (1, 3))):  # all tail; G = 0; K = 0
        assert torch.count_nonzero(c) == 0 and not c.isnan().any()
    assert fwd(4, 8, 0, (1, 3)).shape == (4, 0)

    def vark(m, lens, out=None):
        gen = torch.Generator().manual_seed(0)
        offs = torch.zeros(len(lens) + 1, dtype=torch.int64)
        offs[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
        return _vark(GroupedGemmFp8VariableKArgs(
            _fp8((m, 8), E4M3, gen), _scale((), gen), _fp8((m, 5), E5M2, gen), _scale((), gen),
            torch.tensor(lens, dtype=torch.int64), offs, None if out is not None else torch.float32, out=out))

    z = vark(0, (0, 0))
    assert z.shape == (2, 8, 5) and torch.count_nonzero(z) == 0 and not z.isnan().any()
    out = torch.ones(2, 8, 5)
    assert vark(0, (0, 0), out) is out and torch.equal(out, torch.ones(2, 8, 5))
    assert vark(3, ()).shape == (0, 8, 5)


def test_tma_path_only_where_it_applies():
    args, _ = _fwd_case("ROWWISE", None, False, 45, 16, False)
    fargs = GroupedGemmFp8Args(**args, out_dtype=torch.float32)
    assert kernel_path(fargs) == "pointer"  # the interpreter picks the portable kernel by itself
    with pytest.raises(ValueError, match="path"):
        grouped_gemm_fp8(fargs, path="tma")  # K=45: rows of 45 bytes are not 16-byte aligned
    args, _ = _fwd_case("BLOCKWISE", 32, False, 48, 16, False)
    with pytest.raises(ValueError, match="path"):  # NN BLOCKWISE: the K step (32) must divide K=48
        grouped_gemm_fp8(GroupedGemmFp8Args(**args, out_dtype=torch.float32),
                         Fp8GroupedConfig(16, 16, 32, 2, 1, 1), "tma")
    with pytest.raises(ValueError, match="block_k"):  # a K step that does not divide the block
        grouped_gemm_fp8(GroupedGemmFp8Args(**args, out_dtype=torch.float32), Fp8GroupedConfig(16, 16, 64, 2, 1, 1))
    vargs, _ = _vark_case("TENSORWISE", None, 45, 33, False)
    vargs = GroupedGemmFp8VariableKArgs(**vargs, out_dtype=torch.float32)
    assert variable_k_kernel_path(vargs) == "pointer"
    with pytest.raises(ValueError, match="path"):
        grouped_gemm_fp8_variable_k(vargs, path="tma")


def test_declines_with_reasons(monkeypatch):
    args, _ = _fwd_case("BLOCKWISE", 16, False, 48, 32, True)
    fargs = dict(args, out_dtype=torch.float32)
    vargs, _ = _vark_case("ROWWISE", None, 48, 32, False)
    vargs = dict(vargs, out_dtype=torch.float32)
    assert can_handle(GroupedGemmFp8Args(**fargs)) is None
    assert can_handle_variable_k(GroupedGemmFp8VariableKArgs(**vargs)) is None
    mx = can_handle(GroupedGemmFp8Args(**dict(fargs, granularity="MX_BLOCKWISE", block_size=None)))
    assert "MX_BLOCKWISE" in mx
    assert "MX_BLOCKWISE" in can_handle_variable_k(GroupedGemmFp8VariableKArgs(**dict(vargs, granularity="MX_BLOCKWISE")))
    assert "multiple of 16" in can_handle(GroupedGemmFp8Args(**dict(fargs, block_size=24)))
    assert "FP8" in can_handle(GroupedGemmFp8Args(**dict(fargs, a=fargs["a"].float())))
    fnuz = dict(vargs, a=vargs["a"].to(torch.float8_e4m3fnuz), b=vargs["b"].to(torch.float8_e5m2fnuz))
    assert can_handle_variable_k(GroupedGemmFp8VariableKArgs(**fnuz)) is None  # the interpreter has FNUZ
    for arch, words in (("sm90", "gfx942"), ("gfx950", "gfx942")):
        monkeypatch.setattr(launch, "_arch", lambda a, arch=arch: arch)
        assert words in can_handle_variable_k(GroupedGemmFp8VariableKArgs(**fnuz))
    monkeypatch.setattr(launch, "_arch", lambda a: "sm80")
    assert "sm89" in can_handle(GroupedGemmFp8Args(**fargs))
    monkeypatch.setattr(launch, "_arch", lambda a: "sm90")
    assert "multiple of 32" in can_handle(GroupedGemmFp8Args(**fargs))  # block 16 < the GPU's K step
    monkeypatch.setattr(launch, "_INT32", 3)
    assert "int32" in can_handle_variable_k(GroupedGemmFp8VariableKArgs(**vargs))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(GroupedGemmFp8Args(**fargs))


def test_configs_pick_block_k_for_blockwise():
    cfg = configs.pick_fwd("sm90", 8192, 4096, 7168, 8, 132, 2, 128)
    assert cfg.block_k == 128 and 128 % cfg.block_k == 0
    assert configs.pick_variable_k("gfx942", 4096, 2048, 8, 304, 4, 128).block_k == 64
    assert configs.pick_fwd("sm90", 8192, 4096, 7168, 8, 132, 2, 96).block_k == 32  # 96 = 3 * 32
    assert configs.hybrid_native("sm90") and not configs.hybrid_native("sm80") and configs.hybrid_native("interpreter")


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("gran_id", list(GRANS))
def test_forward_k_major_copy_of_b(gran_id, monkeypatch):
    """On sm90 a ``[G, K, N]`` b is copied K-major and its scales read through a transposed view;
    here the copy is forced (the interpreter then runs the pointer kernel on the copied operands)."""
    monkeypatch.setattr(launch, "_tma_arch", lambda arch: True)
    gran, bs, two_d = GRANS[gran_id]
    args, want = _fwd_case(gran, bs, two_d, 40 if bs else 45, 33, False)
    moved = launch._k_major_b(GroupedGemmFp8Args(**args, out_dtype=torch.float32), "sm90")
    assert moved.trans_b and moved.b.shape == (3, 33, moved.b.shape[2])
    c = _fwd(GroupedGemmFp8Args(**args, out_dtype=torch.float32))
    _check_fwd(c, want, torch.float32)
