"""The Gluon sm90 grouped FP8 GEMMs (``turbo_triton.grouped_gemm_fp8.gluon_sm90``: forward and dgrad;
``gluon_variable_k_sm90``: the BLOCKWISE wgrad): which calls they take and why not (CPU), and their
results against the reference on a Hopper GPU (``@pytest.mark.gpu``:
``TRITON_INTERPRET=0 pytest -m gpu packages/turbo-triton/tests/test_grouped_gemm_fp8_gluon.py``).

The kernels are the default on sm90, where these GPU tests check them (``TURBO_TRITON_GG8_GLUON=0``
turns them off). The interpreter cannot run Gluon, so on the CPU only the eligibility rules are tested here."""

import os

import pytest
import torch

from turbo_core.dispatch.specs.grouped_gemm_fp8 import GroupedGemmFp8Args, GroupedGemmFp8VariableKArgs
from turbo_core.reference.grouped_gemm_fp8 import grouped_gemm_fp8 as reference
from turbo_core.reference.grouped_gemm_fp8 import grouped_gemm_fp8_variable_k as reference_variable_k
from turbo_triton.grouped_gemm_fp8 import launch

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
ENV = launch.GLUON_ENV
G = launch.G


def _offs(lens, device) -> torch.Tensor:
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64)
    offs[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return offs.to(device)


def _args(lens=(3000, 0, 4000, 1100), tail=92, n=4000, k=1040, gran="ROWWISE", trans_b=True, device="cpu",
          da=E4, db=E4, out=torch.bfloat16, seed=0, b_2d=True):
    """Random FP8 operands with random positive scales in the spec's layouts (BLOCKWISE: 1 x 128
    activation blocks, b's scales as 128 x 128 tiles or, ``b_2d=False``, 1 x 128 blocks)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    g, m = len(lens), sum(lens) + tail
    a = (torch.randn(m, k, generator=gen, device=device) * 3).to(da)
    b = (torch.randn((g, n, k) if trans_b else (g, k, n), generator=gen, device=device) * 3).to(db)

    def scale(*shape):
        return torch.rand(shape, generator=gen, device=device) + 0.25

    if gran == "TENSORWISE":
        sa, sb = scale(), scale()
    elif gran == "ROWWISE":
        sa, sb = scale(m, 1), scale(g, n, 1) if trans_b else scale(g, 1, n)
    else:
        kb, nb = -(-k // 128), -(-n // 128)
        sa = scale(kb, m)
        if b_2d:
            sb = scale(g, nb, kb) if trans_b else scale(g, kb, nb)
        else:
            sb = scale(g, n, kb) if trans_b else scale(g, kb, n)
    return GroupedGemmFp8Args(a, sa, b, sb, torch.tensor(lens, dtype=torch.int64, device=device), _offs(lens, device),
                              trans_b, out, gran, 128 if gran == "BLOCKWISE" else None)


@pytest.fixture
def hopper(monkeypatch):
    """Make the eligibility check see a 132-SM sm90 GPU outside the interpreter, the kernels on by default."""
    monkeypatch.setattr(launch._runtime, "interpreting", lambda: False)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("TURBO_TRITON_FP8_FAST_ACCUM", raising=False)
    monkeypatch.setattr(launch, "_GLUON_BROKEN", [])


def _reason(args, arch="sm90"):
    return launch.gluon_reason(args, arch, 132)


def test_takes_large_forward_problems(hopper):
    for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE"):
        for out in (torch.bfloat16, torch.float16, torch.float32):
            assert _reason(_args(gran=gran, out=out)) is None, (gran, out)
    assert _reason(_args(da=E4, db=E5)) is None  # HYBRID
    assert _reason(_args(da=E5, db=E5)) is None


def test_narrower_tiles_below_one_wave(hopper):
    """256-wide tiles where they fill the GPU, 128-wide where 256 would leave SMs idle (DeepSeek-V3's
    down-projection dgrad: 2048 rows x 2048 columns is 128 tiles of 256, 256 of 128)."""
    assert launch._block_n(G.ROWWISE, torch.bfloat16, 2048, 4096, 132) == 256  # 16 x 16 tiles
    assert launch._block_n(G.ROWWISE, torch.bfloat16, 2048, 2048, 132) == 128
    assert launch._block_n(G.TENSORWISE, torch.float16, 4096, 768, 132) == 128  # Qwen3 down dgrad: 32 x 3
    assert launch._block_n(G.ROWWISE, torch.bfloat16, 2048, 2048, 64) == 256  # num_cu caps the wave
    assert launch._block_n(G.BLOCKWISE, torch.bfloat16, 1 << 16, 8192, 132) == 128  # always 128
    assert launch._block_n(G.ROWWISE, torch.float32, 1 << 16, 8192, 132) == 128
    assert _reason(_args(lens=(500, 500), tail=0)) is None  # 8 x 16 tiles of 256: 8 x 32 of 128


def test_declines_with_reasons(hopper, monkeypatch):
    big = _args()
    assert "sm90" in _reason(big, "sm100")
    assert "less than one wave" in _reason(_args(lens=(250, 250), tail=0))  # 4 x 32 tiles of 128 x 128
    assert "less than one wave" in _reason(_args(lens=(1000, 1000), tail=0, gran="BLOCKWISE", n=1000))  # 16 x 8
    assert "128 x 128 tiles" in _reason(_args(gran="BLOCKWISE", b_2d=False))
    bw = _args(gran="BLOCKWISE")
    small_blocks = GroupedGemmFp8Args(bw.a, bw.a_scale_inv, bw.b, bw.b_scale_inv, bw.group_lens, bw.group_offs,
                                      True, torch.bfloat16, "BLOCKWISE", 64)
    assert "128-deep blocks" in _reason(small_blocks)
    mx = GroupedGemmFp8Args(big.a, big.a_scale_inv, big.b, big.b_scale_inv, big.group_lens, big.group_offs, True,
                            torch.bfloat16, "MX_BLOCKWISE", 32)
    assert "MX_BLOCKWISE is not implemented" in _reason(mx)
    assert "K-major" in _reason(_args(trans_b=False))  # the launcher copies b K-major first
    assert "TMA" in _reason(_args(k=1000))
    assert "dtypes" in _reason(_args(out=torch.float64))
    half_scales = GroupedGemmFp8Args(big.a, big.a_scale_inv.half(), big.b, big.b_scale_inv, big.group_lens,
                                     big.group_offs, True, torch.bfloat16, "ROWWISE")
    assert "fp32 scales" in _reason(half_scales)
    monkeypatch.setattr(launch, "_GLUON_BROKEN", ["RuntimeError: no"])
    assert "failed earlier" in _reason(big)
    monkeypatch.setattr(launch, "_GLUON_BROKEN", [])
    monkeypatch.setenv("TURBO_TRITON_FP8_FAST_ACCUM", "1")
    assert "FAST_ACCUM" in _reason(big)
    monkeypatch.delenv("TURBO_TRITON_FP8_FAST_ACCUM")
    monkeypatch.setenv(ENV, "1")
    assert _reason(big) is None
    for off in ("0", "off", "False"):
        monkeypatch.setenv(ENV, off)
        assert f"{ENV}=0 turns the Gluon grouped kernels off" in _reason(big)


def test_dgrad_layout_is_taken_after_the_copy(hopper):
    """The dgrad's ``b [G, K, N]`` is declined as given and taken as the launcher's K-major copy leaves
    it (the 128 x 128 tile scales then read transposed)."""
    for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE"):
        nn = _args(gran=gran, trans_b=False)
        assert "K-major" in _reason(nn)
        assert _reason(launch._as_k_major_b(nn)) is None, gran


def _vk_args(lens=(1024, 0, 2048, 384, 640), k=2048, n=1024, gran="BLOCKWISE", trans_c=True, device="cpu",
             da=E4, db=E5, out_dtype=torch.bfloat16, out=None, seed=0):
    """The wgrad's operands: x ``[M, K]`` and dy ``[M, N]`` FP8 with 1 x 128 block scales along M
    (``[cdiv(M, 128), K]`` / ``[cdiv(M, 128), N]``), groups padded to 128 rows as the grouped quantizer
    returns them (dy in E5M2: HYBRID, as the op's backward)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    m = sum(lens)
    a = (torch.randn(m, k, generator=gen, device=device) * 3).to(da)
    b = (torch.randn(m, n, generator=gen, device=device) * 3).to(db)
    if gran == "BLOCKWISE":
        sa = torch.rand(-(-m // 128), k, generator=gen, device=device) + 0.25
        sb = torch.rand(-(-m // 128), n, generator=gen, device=device) + 0.25
    else:
        sa = torch.rand((), generator=gen, device=device) + 0.25
        sb = torch.rand((), generator=gen, device=device) + 0.25
    return GroupedGemmFp8VariableKArgs(a, sa, b, sb, torch.tensor(lens, dtype=torch.int64, device=device),
                                       _offs(lens, device), out_dtype if out is None else None, gran,
                                       128 if gran == "BLOCKWISE" else None, trans_c, None, out)


def _vk_reason(args, arch="sm90"):
    return launch.gluon_variable_k_reason(args, arch, 132)


def test_variable_k_takes_blockwise_wgrads(hopper):
    for trans_c in (True, False):
        assert _vk_reason(_vk_args(trans_c=trans_c)) is None
        assert _vk_reason(_vk_args(trans_c=trans_c, out_dtype=torch.float32)) is None
        acc = torch.zeros((5, 1024, 2048) if trans_c else (5, 2048, 1024))
        assert _vk_reason(_vk_args(trans_c=trans_c, out=acc)) is None  # the fused main_grad accumulation


def test_variable_k_declines_with_reasons(hopper, monkeypatch):
    assert "BLOCKWISE with 128-row blocks only" in _vk_reason(_vk_args(gran="TENSORWISE"))
    assert "sm90" in _vk_reason(_vk_args(), "sm100")
    assert "not a multiple" in _vk_reason(_vk_args(n=1000))  # trans_c: the result's rows are N
    assert "not a multiple" in _vk_reason(_vk_args(k=2000, trans_c=False))
    assert "less than one wave" in _vk_reason(_vk_args(k=512, n=512))  # 5 x 4 x 4 tiles
    bw = _vk_args()
    strided = GroupedGemmFp8VariableKArgs(bw.a, bw.a_scale_inv.t().contiguous().t(), bw.b, bw.b_scale_inv,
                                          bw.group_lens, bw.group_offs, torch.bfloat16, "BLOCKWISE", 128, True)
    assert "unit column stride" in _vk_reason(strided)
    odd_out = torch.zeros(5, 1024, 2050)[:, :, :2048]  # rows 8200 bytes apart
    assert "aligned rows of out" in _vk_reason(_vk_args(out=odd_out))
    monkeypatch.setenv("TURBO_TRITON_FP8_FAST_ACCUM", "1")
    assert "FAST_ACCUM" in _vk_reason(bw)
    monkeypatch.delenv("TURBO_TRITON_FP8_FAST_ACCUM")
    monkeypatch.setenv(ENV, "0")
    assert f"{ENV}=0 turns" in _vk_reason(bw)


def _sm90() -> bool:
    """A Hopper GPU and the compiled kernels (this package's tests default to the interpreter:
    run these with ``TRITON_INTERPRET=0 pytest -m gpu``)."""
    return (os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
            and torch.cuda.get_device_capability() == (9, 0))


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="the Gluon grouped FP8 GEMM runs on sm90 (Hopper) GPUs, not in "
                                                    "the interpreter")


def _error(got, args) -> float:
    """Max error relative to the largest result, against the reference's dequantized math (fp32 sums
    on the GPU: float64 on the CPU would take minutes at these sizes)."""
    want = reference(GroupedGemmFp8Args(args.a, args.a_scale_inv, args.b, args.b_scale_inv, args.group_lens,
                                        args.group_offs, args.trans_b, torch.float32, args.granularity,
                                        args.block_size)).double()
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.fixture
def gluon_on(monkeypatch):
    """The Gluon kernels on (the default, whatever the environment says)."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("TURBO_TRITON_FP8_FAST_ACCUM", raising=False)
    monkeypatch.setattr(launch, "_GLUON_BROKEN", [])


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
@pytest.mark.parametrize("trans_b", [True, False], ids=["fwd", "dgrad"])
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
def test_gpu_against_reference(gran, trans_b, out):
    """Through ``grouped_gemm_fp8`` (the op's launcher): the Gluon path, groups of 3000, 0, 4000 and
    1100 rows (partial row tiles, an empty group) and 92 rows past the last group (zeros), N and K
    not multiples of the tiles, poisoned output memory; error at cuBLAS's level (cuBLAS's dense
    errors on such inputs: 1.5-3.5e-3 with bf16 out, 1.5-2.2e-4 with fp32 out)."""
    args = _args(gran=gran, trans_b=trans_b, out=out, device="cuda", seed=len(gran) + trans_b)
    assert launch.kernel_path(args) == ("gluon" if trans_b else "gluon+kmajor")
    torch.full((args.a.shape[0], 4000), float("nan"), device="cuda", dtype=out)  # a freed NaN block handed back
    got = launch.grouped_gemm_fp8(args)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    assert torch.isfinite(got).all()
    assert torch.count_nonzero(got[-92:]) == 0, "the rows past the last group must be zero"
    err = _error(got, args)
    assert err < (6e-3 if out == torch.bfloat16 else 6e-4), err


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
def test_gpu_narrow_tiles_against_reference(gran):
    """A problem under one wave of 256-wide tiles (groups of 700, 0, 1348 rows, N = K = 2048: DeepSeek-V3's
    down-projection dgrad) runs on 128-wide tiles, dgrad layout included, with the same accuracy."""
    for trans_b in (True, False):
        args = _args(lens=(700, 0, 1348), tail=0, n=2048, k=2048, gran=gran, trans_b=trans_b, device="cuda",
                     seed=int(trans_b))
        assert launch._block_n(G(gran), torch.bfloat16, 2048, 2048, 132) == 128
        assert launch.kernel_path(args) == ("gluon" if trans_b else "gluon+kmajor")
        got = launch.grouped_gemm_fp8(args)
        assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
        assert torch.isfinite(got).all()
        assert _error(got, args) < 6e-3


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("lens,tail", [((128, 256, 8192), 0), ((1, 8000, 63, 0, 400), 200), ((0, 0, 8704), 64)],
                         ids=["aligned", "ragged", "empty-first"])
def test_gpu_every_row_written(lens, tail):
    """The kernel directly, into an output filled with NaN: group rows get their products, rows past
    the last group zeros, nothing is left unwritten (single-row and empty groups included)."""
    from turbo_triton.grouped_gemm_fp8 import gluon_sm90

    args = _args(lens=lens, tail=tail, n=2048, k=512, device="cuda", seed=sum(lens))
    c = torch.full((args.a.shape[0], 2048), float("nan"), device="cuda", dtype=torch.bfloat16)
    s = launch._fwd_scales(args)
    gluon_sm90.grouped_gemm_fp8_nt(args.a, args.b, args.a_scale_inv, args.b_scale_inv, args.group_offs, c,
                                   "ROWWISE", 132, s_am=s.s_am, s_bg=s.s_bg, s_bn=s.s_bn)
    assert torch.isfinite(c).all()
    if tail:
        assert torch.count_nonzero(c[-tail:]) == 0
    assert _error(c, args) < 6e-3


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
def test_gpu_graph_replays_new_group_sizes():
    """Captured in a CUDA graph, the call reads the group offsets on the device: new lengths written
    into the same tensors give the new result on replay (no host sync, no stale tile count)."""
    args = _args(lens=(4096, 2048, 2048), tail=0, n=4096, k=1024, device="cuda", seed=3)
    launch.grouped_gemm_fp8(args)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = launch.grouped_gemm_fp8(args)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    for lens in [(100, 8000, 92), (0, 0, 8192), (4096, 2048, 2048)]:
        args.group_lens.copy_(torch.tensor(lens))
        args.group_offs.copy_(_offs(lens, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert _error(got, args) < 6e-3, lens


def _vk_error(got, args) -> float:
    want = reference_variable_k(GroupedGemmFp8VariableKArgs(args.a, args.a_scale_inv, args.b, args.b_scale_inv,
                                                            args.group_lens, args.group_offs, torch.float32,
                                                            args.granularity, args.block_size, args.trans_c))
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
@pytest.mark.parametrize("trans_c", [True, False], ids=["trans_c", "KN"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_gpu_variable_k_against_reference(trans_c, out_dtype):
    """Through ``grouped_gemm_fp8_variable_k``: the Gluon wgrad on padded groups of 1024, 0, 2048, 384
    and 640 rows (an empty group gives zeros), HYBRID operands, poisoned output memory."""
    args = _vk_args(trans_c=trans_c, out_dtype=out_dtype, device="cuda", seed=int(trans_c))
    assert launch.variable_k_kernel_path(args) == "gluon+kmajor"
    torch.full((5, 2048, 1024), float("nan"), device="cuda", dtype=out_dtype)  # a freed NaN block handed back
    got = launch.grouped_gemm_fp8_variable_k(args)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    assert torch.isfinite(got).all()
    assert torch.count_nonzero(got[1]) == 0, "an empty group's result is zero"
    assert _vk_error(got, args) < (6e-3 if out_dtype == torch.bfloat16 else 6e-4)


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
def test_gpu_variable_k_accumulates():
    """``out[g] += C[g]`` in fp32 (the fused main_grad accumulation); the empty group's ``out`` unchanged."""
    base = torch.randn(5, 1024, 2048, device="cuda")
    out = base.clone()
    args = _vk_args(device="cuda", out=out, seed=7)
    launch.grouped_gemm_fp8_variable_k(args)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    assert torch.equal(out[1], base[1])
    assert _vk_error(out - base, args) < 6e-4


@pytest.mark.gpu
@needs_sm90
@pytest.mark.usefixtures("gluon_on")
def test_gpu_variable_k_graph_replays_new_group_sizes():
    """Captured in a CUDA graph, the wgrad reads the (128-aligned) offsets on the device."""
    args = _vk_args(lens=(1024, 1024, 1024, 1024, 0), device="cuda", seed=9)
    launch.grouped_gemm_fp8_variable_k(args)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = launch.grouped_gemm_fp8_variable_k(args)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    for lens in [(128, 3840, 0, 0, 128), (0, 0, 0, 0, 4096), (1024, 1024, 1024, 1024, 0)]:
        args.group_lens.copy_(torch.tensor(lens))
        args.group_offs.copy_(_offs(lens, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert _vk_error(got, args) < 6e-3, lens


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("gran", ["ROWWISE", "BLOCKWISE"])
def test_gpu_op_training_step(gran, monkeypatch):
    """The op's forward and backward (``turbo_core.ops.grouped_gemm_fp8``, pinned to TRITON) on the
    Gluon kernels (the default) agree with the same step on the Triton kernels; the Gluon kernels ran for the
    forward and the dgrad, and for the BLOCKWISE wgrad (on the quantizer's padded groups)."""
    import collections

    from turbo_core import Float8QuantConfig
    from turbo_core.dispatch.manager import use_backend
    from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8 as op
    from turbo_triton.grouped_gemm_fp8 import gluon_sm90, gluon_variable_k_sm90

    calls = collections.Counter()

    def counting(name, real):
        def counted(*a, **k):
            calls[name] += 1
            return real(*a, **k)
        return counted

    for mod, name in ((gluon_sm90, "grouped_gemm_fp8_nt"), (gluon_variable_k_sm90, "grouped_gemm_fp8_variable_k_nt")):
        monkeypatch.setattr(mod, name, counting(name, getattr(mod, name)))
    monkeypatch.setattr(launch, "_GLUON_BROKEN", [])
    gen = torch.Generator(device="cuda").manual_seed(0)
    lens = torch.tensor([3000, 0, 4000, 1192], device="cuda")
    x = torch.randn(8192, 2048, generator=gen, device="cuda").to(torch.bfloat16)
    w = (torch.randn(4, 2048, 2048, generator=gen, device="cuda") * 2048 ** -0.5).to(torch.bfloat16)
    dy = torch.randn(8192, 2048, generator=gen, device="cuda").to(torch.bfloat16)
    cfg = Float8QuantConfig(granularity=gran, block_size=128 if gran == "BLOCKWISE" else None)

    def step(gluon: bool):
        if gluon:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, "0")
        xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
        with use_backend("TRITON"), torch.autograd.set_multithreading_enabled(False):  # the pin holds in backward
            out = op(xi, wi, lens, config=cfg)
            out.backward(dy)
        return out.detach(), xi.grad, wi.grad

    want = step(False)
    assert not calls
    got = step(True)
    assert not launch._GLUON_BROKEN, launch._GLUON_BROKEN
    assert calls["grouped_gemm_fp8_nt"] == 2, calls  # forward and dgrad
    assert calls["grouped_gemm_fp8_variable_k_nt"] == (1 if gran == "BLOCKWISE" else 0), calls
    for name, g_, w_ in zip(("out", "grad_x", "grad_w"), got, want, strict=True):
        assert torch.isfinite(g_).all(), name
        err = ((g_.double() - w_.double()).abs().max() / w_.double().abs().max()).item()
        assert err < 1e-2, (name, err)  # the same FP8 operands; the two kernels' sums differ in order only
