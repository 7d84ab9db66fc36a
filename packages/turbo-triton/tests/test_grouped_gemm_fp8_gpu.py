"""The TRITON grouped FP8 GEMM's compiled kernels on the GPU (``@pytest.mark.gpu``; see ``gpu_support``):
``grouped_gemm_fp8`` (forward, dgrad) and ``grouped_gemm_fp8_variable_k`` (wgrad), TENSORWISE /
ROWWISE / BLOCKWISE (128; b as 1-D blocks and as 128 x 128 tiles).

Results against float64 math on the dequantized operands (random FP8 data, random positive scales
in every scale layout of the spec), outputs from NaN-filled allocations, NaN rows past the groups of
the inputs, the forward's rows past the groups required to be 0:

* odd shapes (pointer kernel); aligned ones on the heuristic's kernel (the Gluon kernels where they
  apply), the Triton kernels alone (``TURBO_TRITON_GG8_GLUON=0``), the pointer kernel and the TMA
  kernel forced (the wgrad's on M-major and on K-major copies), a small config, BLOCKWISE's deferred
  scaling; NN and NT, trans_c,
  accumulation into an fp32/bf16 ``out``, fp32/bf16/fp16 results, E5M2 and HYBRID (both orders,
  native and upcast); the unpromoted FP8 sum (``precise_acc=False``) at K = 7168; the wgrad on groups
  padded to 128 rows (the grouped quantizer's layout) and on unpadded ones;
* the MoE layers of DeepSeek-V3 and Qwen3-30B-A3B (8 local experts, 8192 tokens), balanced and
  skewed, forward, dgrad and wgrad with E5M2 gradients, and the wgrad accumulated into fp32.

Gate: ``max |err| / max |ref|`` below 2e-3 (fp32 results: the tensor cores' FP8 sums) or 1e-2
(bf16/fp16 results); the unpromoted sum at 1e-2, the error ``torch._scaled_mm(use_fast_accum=True)``
shows on such inputs. CUDA graphs: the ROWWISE forward and the padded BLOCKWISE wgrad captured once and
replayed with other group lengths written into the captured tensors.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, poisoned_empty, replay

from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GROUPED_GEMM_FP8,
    GROUPED_GEMM_FP8_VARIABLE_K,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
)

pytestmark = [pytest.mark.gpu, COMPILED]

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16
BS = 128
GATE = {FP32: 2e-3, FP16: 1e-2, BF16: 1e-2}
UNPROMOTED_GATE = 1e-2
ODD, ALIGNED = (5, 0, 17, 1), (37, 0, 130, 1, 300)
KN_ODD = {"TENSORWISE": (45, 33), "ROWWISE": (45, 33), "BLOCKWISE": (2 * BS + 72, 200)}
KN_ALIGNED = (512, 384)


@pytest.fixture(scope="module")
def gl():
    from turbo_triton.grouped_gemm_fp8 import launch

    return launch


@pytest.fixture(scope="module")
def cfgs():
    from turbo_triton.grouped_gemm_fp8.configs import Fp8GroupedConfig as C

    return {"small": C(64, 64, 64, 4, 4, 3), "defer": C(128, 128, 128, 8, 8, 4, defer_scale=True)}


@contextlib.contextmanager
def _gluon(on: bool | None):
    """``TURBO_TRITON_GG8_GLUON`` for the calls inside: 1 / 0, or left as it is (None)."""
    from turbo_triton.grouped_gemm_fp8.launch import GLUON_ENV

    before = os.environ.get(GLUON_ENV)
    if on is not None:
        os.environ[GLUON_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(GLUON_ENV, None)
        else:
            os.environ[GLUON_ENV] = before


def _offsets(lens):
    lens_t = torch.tensor(lens, dtype=torch.int64, device=DEV)
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64, device=DEV)
    offs[1:] = torch.cumsum(lens_t, 0)
    return lens_t, offs


def _cdiv(a, b):
    return -(-a // b)


def _expand(s, dim, size):
    return s.repeat_interleave(BS, dim=dim).narrow(dim, 0, size)


def _fp8(shape, dtype, gen):
    return (torch.randn(shape, device=DEV, generator=gen) * 2).to(dtype)


def _scales(shape, gen):
    return torch.rand(shape, device=DEV, generator=gen) * 1.5 + 0.5


def _fwd_case(gran, lens, k, n, trans_b, *, two_d=True, a_dtype=E4M3, b_dtype=E4M3, tail=0, out_dtype=FP32, seed=0):
    """A forward/dgrad call and its float64 result."""
    gen = torch.Generator(device=DEV).manual_seed(seed + k + 3 * n)
    g, m = len(lens), sum(lens) + tail
    a = _fp8((m, k), a_dtype, gen)
    a[m - tail:] = float("nan")
    b = _fp8((g, n, k) if trans_b else (g, k, n), b_dtype, gen)
    if gran == "TENSORWISE":
        sa, sb = _scales((), gen), _scales((), gen)
    elif gran == "ROWWISE":
        sa, sb = _scales((m, 1), gen), _scales((g, n, 1) if trans_b else (g, 1, n), gen)
    else:
        sa = _scales((_cdiv(k, BS), m), gen)
        if two_d:
            sb = _scales((g, _cdiv(b.shape[1], BS), _cdiv(b.shape[2], BS)), gen)
        else:
            sb = _scales((g, n, _cdiv(k, BS)) if trans_b else (g, _cdiv(k, BS), n), gen)
    lens_t, offs = _offsets(lens)
    args = GroupedGemmFp8Args(a, sa, b, sb, lens_t, offs, trans_b=trans_b, out_dtype=out_dtype, granularity=gran,
                              block_size=BS if gran == "BLOCKWISE" else None)
    a64, b64 = a.double(), b.double()
    if gran == "BLOCKWISE":
        a64 = a64 * _expand(sa.double().t(), 1, k)
        if two_d:
            b64 = b64 * _expand(_expand(sb.double(), 1, b.shape[1]), 2, b.shape[2])
        else:
            b64 = b64 * _expand(sb.double(), 2 if trans_b else 1, k)
    else:
        a64, b64 = a64 * sa.double(), b64 * sb.double()
    want = torch.zeros(m, n, dtype=torch.float64, device=DEV)
    start = 0
    for i, rows in enumerate(lens):
        want[start:start + rows] = a64[start:start + rows] @ (b64[i].t() if trans_b else b64[i])
        start += rows
    return args, want


def _padded(lens):
    return tuple(_cdiv(x, BS) * BS for x in lens)


def _vark_case(gran, lens, k, n, trans_c, *, a_dtype=E4M3, b_dtype=E4M3, out_dtype=FP32, out=None, pad=True, seed=0):
    """A variable-K call and its float64 result; BLOCKWISE with ``pad``: every group padded with zero
    rows to a multiple of 128 (the grouped quantizer's col-wise layout), the padded offsets."""
    gen = torch.Generator(device=DEV).manual_seed(seed + k + 3 * n)
    rows = _padded(lens) if gran == "BLOCKWISE" and pad else tuple(lens)
    m = sum(rows)
    a, b = _fp8((m, k), a_dtype, gen), _fp8((m, n), b_dtype, gen)
    start = 0
    for real, r in zip(lens, rows, strict=True):
        a[start + real:start + r] = 0
        b[start + real:start + r] = 0
        start += r
    if gran == "TENSORWISE":
        sa, sb = _scales((), gen), _scales((), gen)
    elif gran == "ROWWISE":
        sa, sb = _scales((1, k), gen), _scales((1, n), gen)
    else:
        sa, sb = _scales((_cdiv(m, BS), k), gen), _scales((_cdiv(m, BS), n), gen)
    lens_t, offs = _offsets(rows)
    args = GroupedGemmFp8VariableKArgs(a, sa, b, sb, lens_t, offs, out_dtype=None if out is not None else out_dtype,
                                       granularity=gran, block_size=BS if gran == "BLOCKWISE" else None,
                                       trans_c=trans_c, out=out)
    if gran == "BLOCKWISE":
        a64, b64 = a.double() * _expand(sa.double(), 0, m), b.double() * _expand(sb.double(), 0, m)
    else:
        a64, b64 = a.double() * sa.double(), b.double() * sb.double()
    mats, start = [], 0
    for r in rows:
        c = a64[start:start + r].t() @ b64[start:start + r]
        mats.append(c.t() if trans_c else c)
        start += r
    want = torch.stack(mats)
    return args, (want + out.double() if out is not None else want)


def _check(c, want, gate, what, tail=0):
    assert bool(torch.isfinite(c).all()), f"{what}: non-finite elements (an unwritten output?)"
    if tail:
        assert torch.count_nonzero(c[c.shape[0] - tail:]) == 0, f"{what}: rows past the last group must be 0"
    err = (c.double() - want).abs().max().item() / (want.abs().max().item() or 1.0)
    assert err < gate, f"{what}: max |err| / max |ref| = {err:.2e}, gate {gate:g}"


def _run_fwd(gl, args, want, cfg=None, path=None, upcast=None, gluon=None, tail=0, gate=None):
    GROUPED_GEMM_FP8.check_args(args)
    with _gluon(gluon):
        with poisoned_empty():
            c = gl.grouped_gemm_fp8(args, cfg, path, upcast)
        used = path or gl.kernel_path(args, cfg)
    _check(c, want, gate or GATE[args.out_dtype], f"{used} kernel", tail)


def _run_vark(gl, args, want, cfg=None, path=None, upcast=None, gluon=None):
    GROUPED_GEMM_FP8_VARIABLE_K.check_args(args)
    with _gluon(gluon):
        with poisoned_empty():
            c = gl.grouped_gemm_fp8_variable_k(args, cfg, path, upcast)
        used = path or gl.variable_k_kernel_path(args)
    if args.out is not None:
        assert c is args.out
    _check(c, want, GATE[c.dtype], f"{used} kernel")


# -- forward / dgrad ---------------------------------------------------------------------------------

GRANS = {"tensorwise": ("TENSORWISE", True), "rowwise": ("ROWWISE", True), "blockwise-2d": ("BLOCKWISE", True),
         "blockwise-1d": ("BLOCKWISE", False)}
#: aligned-shape variants: (config, path, TURBO_TRITON_GG8_GLUON)
FWD_VARIANTS = {"default": (None, None, None), "triton": (None, None, False), "pointer": (None, "pointer", None),
                "tma": (None, "tma", None), "small": ("small", None, None), "defer": ("defer", None, None)}


@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
@pytest.mark.parametrize("gran_id", list(GRANS))
def test_forward_odd_shape(gl, gran_id, trans_b):
    gran, two_d = GRANS[gran_id]
    args, want = _fwd_case(gran, ODD, *KN_ODD[gran], trans_b, two_d=two_d, tail=7)
    _run_fwd(gl, args, want, tail=7)


@pytest.mark.parametrize("variant", list(FWD_VARIANTS))
@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
@pytest.mark.parametrize("gran_id", list(GRANS))
def test_forward_aligned(gl, cfgs, gran_id, trans_b, variant):
    gran, two_d = GRANS[gran_id]
    cfg, path, gluon = FWD_VARIANTS[variant]
    if cfg == "defer" and gran != "BLOCKWISE":
        pytest.skip("deferred scaling is BLOCKWISE's")
    args, want = _fwd_case(gran, ALIGNED, *KN_ALIGNED, trans_b, two_d=two_d, tail=5)
    _run_fwd(gl, args, want, cfgs.get(cfg), path, gluon=gluon, tail=5)


@pytest.mark.parametrize("out_dtype", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
@pytest.mark.parametrize("gran_id", list(GRANS))
def test_forward_out_dtypes(gl, gran_id, trans_b, out_dtype):
    gran, two_d = GRANS[gran_id]
    args, want = _fwd_case(gran, ALIGNED, *KN_ALIGNED, trans_b, two_d=two_d, tail=5, out_dtype=out_dtype)
    _run_fwd(gl, args, want, tail=5)


FORMATS = [(E5M2, E5M2, None), (E4M3, E5M2, None), (E5M2, E4M3, None), (E5M2, E4M3, True)]


@pytest.mark.parametrize("fmt", FORMATS, ids=["e5m2", "e4m3xe5m2", "e5m2xe4m3", "e5m2xe4m3-upcast"])
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_forward_formats(gl, gran, fmt):
    a_dtype, b_dtype, upcast = fmt
    args, want = _fwd_case(gran, ALIGNED, *KN_ALIGNED, True, a_dtype=a_dtype, b_dtype=b_dtype, tail=5)
    _run_fwd(gl, args, want, upcast=upcast, tail=5)


@pytest.mark.parametrize("gran", ["ROWWISE", "BLOCKWISE"])
@pytest.mark.parametrize("upcast", [False, True], ids=["native", "upcast"])
def test_forward_hybrid_native_and_upcast(gl, gran, upcast):
    """E5M2 x E4M3 with the mixed FP8 dot and with the fp16 upcast (``configs.hybrid_native`` picks)."""
    args, want = _fwd_case(gran, (64, 0, 200), 256, 128, True, a_dtype=E5M2, b_dtype=E4M3, seed=11)
    _run_fwd(gl, args, want, upcast=upcast)


@pytest.mark.parametrize("precise", [False, True], ids=["unpromoted", "promoted"])
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
def test_forward_accumulator_at_long_k(gl, gran, precise):
    from turbo_triton.grouped_gemm_fp8 import configs

    args, want = _fwd_case(gran, (256, 0, 300), 7168, 256, True)
    arch, sms = gl._device_facts(args.a)
    cfg = replace(configs.pick_fwd(arch, args.a.shape[0], 256, 7168, 3, sms, 4, None), precise_acc=precise)
    _run_fwd(gl, args, want, cfg, gate=None if precise else UNPROMOTED_GATE)


# -- variable K (wgrad) ------------------------------------------------------------------------------

VARK_VARIANTS = {"default": (None, None, None), "triton": (None, None, False), "pointer": (None, "pointer", None),
                 "tma-m-major": (None, "tma", None), "tma-kmajor": (None, "tma+kmajor", None),
                 "small": ("small", None, None), "defer": ("defer", None, None)}


@pytest.mark.parametrize("trans_c", [False, True], ids=["c", "tc"])
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_variable_k_odd_shape(gl, gran, trans_c):
    args, want = _vark_case(gran, ODD, *KN_ODD[gran], trans_c)
    _run_vark(gl, args, want)


@pytest.mark.parametrize("variant", list(VARK_VARIANTS))
@pytest.mark.parametrize("trans_c", [False, True], ids=["c", "tc"])
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_variable_k_aligned(gl, cfgs, gran, trans_c, variant):
    cfg, path, gluon = VARK_VARIANTS[variant]
    if cfg == "defer" and gran != "BLOCKWISE":
        pytest.skip("deferred scaling is BLOCKWISE's")
    args, want = _vark_case(gran, ALIGNED, *KN_ALIGNED, trans_c)
    _run_vark(gl, args, want, cfgs.get(cfg), path, gluon=gluon)


@pytest.mark.parametrize("case", ["accumulate-fp32", "accumulate-bf16", "hybrid", "hybrid-upcast", "unpadded",
                                  "unpadded-pointer"])
@pytest.mark.parametrize("trans_c", [False, True], ids=["c", "tc"])
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE", "BLOCKWISE"])
def test_variable_k_variants(gl, gran, trans_c, case):
    k, n = KN_ALIGNED
    kw, run_kw = {}, {}
    if case.startswith("accumulate"):
        shape = (len(ALIGNED), n, k) if trans_c else (len(ALIGNED), k, n)
        dtype = FP32 if case.endswith("fp32") else BF16
        kw["out"] = torch.randn(shape, device=DEV, generator=torch.Generator(device=DEV).manual_seed(4)).to(dtype)
    elif case.startswith("hybrid"):
        kw.update(a_dtype=E4M3, b_dtype=E5M2)
        run_kw["upcast"] = True if case.endswith("upcast") else None
    else:  # groups not starting on a multiple of the block
        if gran != "BLOCKWISE":
            pytest.skip("unpadded groups matter to BLOCKWISE alone")
        kw["pad"] = False
        run_kw["path"] = "pointer" if case.endswith("pointer") else None
    args, want = _vark_case(gran, ALIGNED, k, n, trans_c, **kw)
    _run_vark(gl, args, want, **run_kw)


# -- MoE layers --------------------------------------------------------------------------------------

#: (model, layer, out_features, in_features, experts, top-k); 8 local experts, 8192 tokens.
LAYERS = [("deepseek-v3", "gate_up", 4096, 7168, 256, 8), ("deepseek-v3", "down", 7168, 2048, 256, 8),
          ("qwen3-30b-a3b", "gate_up", 1536, 2048, 128, 8), ("qwen3-30b-a3b", "down", 2048, 768, 128, 8)]


def _lens(experts, topk, balance, tokens=8192, local=8):
    per = tokens * topk // experts
    if balance == "balanced":
        return (per,) * local
    total, weights = per * local, [0.75 ** i for i in range(local - 1)] + [0.0]
    lens = [int(total * w / sum(weights)) for w in weights]
    lens[0] += total - sum(lens)
    return tuple(lens)


MODEL = [(f"{model}/{layer}", bal, gran) for model, layer, *_ in LAYERS for bal in ("balanced", "skewed")
         for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE")]


@pytest.mark.parametrize("layer,balance,gran", MODEL, ids=["/".join(c) for c in MODEL])
def test_moe_layer(gl, layer, balance, gran):
    """Forward (bf16 out, 64 rows past the groups), dgrad with E5M2 gradients, wgrad with E5M2
    gradients, and the wgrad accumulated into an fp32 main grad."""
    _, _, out_f, in_f, experts, topk = next(x for x in LAYERS if f"{x[0]}/{x[1]}" == layer)
    lens = _lens(experts, topk, balance)
    args, want = _fwd_case(gran, lens, in_f, out_f, True, tail=64, out_dtype=BF16)
    _run_fwd(gl, args, want, tail=64)
    args, want = _fwd_case(gran, lens, out_f, in_f, False, a_dtype=E5M2, tail=64, out_dtype=BF16)
    _run_fwd(gl, args, want, tail=64)
    args, want = _vark_case(gran, lens, in_f, out_f, True, b_dtype=E5M2, out_dtype=BF16)
    _run_vark(gl, args, want)
    base = torch.randn(len(lens), out_f, in_f, device=DEV, generator=torch.Generator(device=DEV).manual_seed(6))
    args, want = _vark_case(gran, lens, in_f, out_f, True, out=base)
    _run_vark(gl, args, want)


# -- CUDA graphs -------------------------------------------------------------------------------------

REPLAYS = {"skewed+zero": (1500, 900, 700, 0, 500, 300, 173, 23), "one group": (0, 0, 0, 4096, 0, 0, 0, 0),
           "tail 100": (500,) * 7 + (400,), "all empty": (0,) * 8}


def test_graph_forward_rowwise_replays_with_new_group_lengths(gl):
    k, n, lens0 = 512, 768, (512,) * 8
    args, _ = _fwd_case("ROWWISE", lens0, k, n, True, out_dtype=BF16, seed=2)
    graph, c = capture(lambda: gl.grouped_gemm_fp8(args))
    a64, b64 = args.a.double() * args.a_scale_inv.double(), args.b.double() * args.b_scale_inv.double()
    for name, lens in REPLAYS.items():
        lens_t, offs = _offsets(lens)
        args.group_lens.copy_(lens_t)
        args.group_offs.copy_(offs)
        c.fill_(float("nan"))
        replay(graph)
        want = torch.zeros(a64.shape[0], n, dtype=torch.float64, device=DEV)
        start = 0
        for i, r in enumerate(lens):
            want[start:start + r] = a64[start:start + r] @ b64[i].t()
            start += r
        _check(c, want, GATE[BF16], f"replay with {name} lengths")


def test_graph_wgrad_blockwise_replays_with_new_group_lengths(gl):
    k, n, g, lens0 = 512, 768, 8, (512,) * 8
    # operands sized for the worst padding (every group padded: M + G * 128 rows), zero past M
    args, _ = _vark_case("BLOCKWISE", lens0 + (g * BS,), k, n, True, out_dtype=BF16, seed=2)
    args = replace(args, group_lens=args.group_lens[:g].clone(), group_offs=args.group_offs[:g + 1].clone())
    m = 4096
    args.a[m:] = 0
    args.b[m:] = 0
    graph, c = capture(lambda: gl.grouped_gemm_fp8_variable_k(args))
    a64 = args.a.double() * _expand(args.a_scale_inv.double(), 0, args.a.shape[0])
    b64 = args.b.double() * _expand(args.b_scale_inv.double(), 0, args.b.shape[0])
    for name, lens in REPLAYS.items():
        rows = _padded(lens)
        lens_t, offs = _offsets(rows)
        args.group_lens.copy_(lens_t)
        args.group_offs.copy_(offs)
        c.fill_(float("nan"))
        replay(graph)
        mats, start = [], 0
        for r in rows:
            mats.append((a64[start:start + r].t() @ b64[start:start + r]).t())
            start += r
        _check(c, torch.stack(mats), GATE[BF16], f"replay with {name} lengths")
