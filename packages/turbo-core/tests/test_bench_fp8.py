"""``turbo bench gemm-fp8`` / ``grouped-gemm-fp8`` on the CPU: every provider reports a row (measured,
declined or skipped with its reason), the accuracy column is real, and the PyTorch baselines get
their operands in the layouts torch documents (checked here by stand-ins that enforce torch's
layout rules and compute the scaled product in float64, since the real kernels need a GPU)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from turbo_core.bench.suites import gemm_fp8 as dense
from turbo_core.bench.suites import grouped_gemm_fp8 as grouped
from turbo_core.bench.suites.gemm import GemmCase
from turbo_core.bench.suites.grouped_gemm import QUICK, GroupedCase, group_lens
from turbo_core.cli import main
from turbo_core.low_precision import Format, ScalingGranularity, ScalingRecipe
from turbo_core.ops import quantization as quant

G = ScalingGranularity
GRANS = {g.value for g in dense.default_granularities()}
#: Every row carries these; measured rows also the timing and ratio fields.
FIELDS = {"suite", "case", "model", "layer", "pass", "layout", "m", "n", "k", "dtype", "granularity", "format",
          "a_dtype", "b_dtype", "block_size", "out_dtype", "provider", "role", "baseline", "status"}
MEASURED = {"median_ms", "p10_ms", "p90_ms", "tflops", "ratio", "bf16_ratio", "peak_fraction", "max_rel_err"}


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps table cells at the terminal width


def _bench(tmp_path, *argv):
    out = tmp_path / "bench.json"
    assert main(["bench", *argv, "--quick", "--include-reference", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def _check_measured(r):
    assert MEASURED <= set(r), r
    assert r["median_ms"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
    assert r["tflops"] > 0 and math.isfinite(r["max_rel_err"])


# ---- the suites end to end -----------------------------------------------------------------------


def test_quick_gemm_fp8_suite(tmp_path, capsys):
    data = _bench(tmp_path, "gemm-fp8")
    rows = data["rows"]
    assert data["run"]["device"] == "cpu"
    assert {r["granularity"] for r in rows} == GRANS
    providers = {r["provider"] for r in rows}
    assert providers == {"bf16:torch.matmul", "torch._scaled_mm", "F.scaled_mm", "turbo:TORCH"}
    # 2 tiny layers x 3 passes x granularities x (bf16, the granularity's baseline, turbo:TORCH)
    assert len(rows) == 2 * 3 * len(GRANS) * 3
    for r in rows:
        assert FIELDS <= set(r), r
        assert r["suite"] == "gemm_fp8" and r["format"] == "E4M3" and r["a_dtype"] == "float8_e4m3fn"
        if r["status"] == "ok":
            _check_measured(r)
    turbo = [r for r in rows if r["provider"] == "turbo:TORCH"]
    for r in turbo:  # the reference backend against float64 on the dequantized operands: bf16 rounding only
        assert r["status"] == "ok", r
        assert r["max_rel_err"] < 1e-2 and r["bf16_ratio"] > 0
        assert r["baseline"] == ("torch._scaled_mm" if r["granularity"] in ("TENSORWISE", "ROWWISE") else "F.scaled_mm")
    assert {r["layout"] for r in turbo if r["granularity"] == "MX_BLOCKWISE"} <= {"NT"}
    for r in rows:
        if r["provider"] == "F.scaled_mm":  # cuBLASLt block scaling: not on a CPU, said so
            assert r["status"].startswith("skipped: ") and "CUDA GPU" in r["status"], r
        if r["provider"] == "torch._scaled_mm":  # runs on the CPU in recent torch; else skipped with the reason
            assert r["status"] == "ok" or r["status"].startswith("skipped: torch._scaled_mm"), r
            if r["status"] == "ok":
                assert r["max_rel_err"] < 1e-2 and r["ratio"] == 1.0
    # the bf16 reference is timed once per shape and repeated for each granularity
    bf16 = [r for r in rows if r["provider"] == "bf16:torch.matmul" and r["model"] == "tiny" and r["layer"] == "qkv"
            and r["pass"] == "fwd"]
    assert len(bf16) == len(GRANS) and len({r["median_ms"] for r in bf16}) == 1
    assert all(r["max_rel_err"] < 1e-2 and r["bf16_ratio"] == 1.0 and r["ratio"] is None for r in bf16)
    summ = [s for s in data["summary"] if s["provider"] == "turbo:TORCH"]
    assert {(s["pass"], s["granularity"]) for s in summ} == {(p, g) for p in ("fwd", "dgrad", "wgrad") for g in GRANS}
    assert all(s["geomean_bf16_ratio"] > 0 for s in summ)
    out = capsys.readouterr().out
    assert "F.scaled_mm: skipped: F.scaled_mm with BlockWise1x128 scales (cuBLASLt) needs a CUDA GPU" in out
    assert "geomean ratio to F.scaled_mm, torch._scaled_mm" in out


def test_quick_grouped_gemm_fp8_suite(tmp_path, capsys):
    data = _bench(tmp_path, "grouped-gemm-fp8")
    rows = data["rows"]
    assert {r["provider"] for r in rows} == {"bf16:torch._grouped_mm", "torch._scaled_grouped_mm", "turbo:TORCH"}
    # 2 tiny layers x balanced/skewed x 3 passes x granularities x 3 providers
    assert len(rows) == 2 * 2 * 3 * len(GRANS) * 3
    for r in rows:
        assert FIELDS | {"balance", "groups", "group_lens"} <= set(r), r
        assert r["m"] == sum(r["group_lens"])
        if r["status"] == "ok":
            _check_measured(r)
        if r["provider"] == "turbo:TORCH":
            assert r["status"] == "ok" and r["max_rel_err"] < 1e-2 and r["bf16_ratio"] > 0, r
        if r["provider"] == "torch._scaled_grouped_mm":  # CUDA only, and rowwise scales only
            assert r["status"].startswith("skipped: "), r
            want = "needs a CUDA GPU" if r["granularity"] in ("TENSORWISE", "ROWWISE") else "scales"
            assert want in r["status"], r
        if r["provider"] == "bf16:torch._grouped_mm":
            assert r["status"] == "ok" and r["max_rel_err"] < 1e-2, r
    assert all(0 in r["group_lens"] for r in rows if r["balance"] == "skewed")
    out = capsys.readouterr().out
    assert "torch._scaled_grouped_mm: skipped: torch._scaled_grouped_mm (CUTLASS) needs a CUDA GPU" in out


def test_filters_format_and_options(tmp_path):
    data = _bench(tmp_path, "gemm-fp8", "--granularities", "rowwise", "mx", "--passes", "wgrad", "--format", "HYBRID",
                  "--providers", "turbo:TORCH")
    rows = data["rows"]
    assert {r["provider"] for r in rows} == {"turbo:TORCH"}
    assert {r["pass"] for r in rows} == {"wgrad"} and {r["granularity"] for r in rows} <= {"ROWWISE", "MX_BLOCKWISE"}
    for r in rows:  # HYBRID: the gradient (wgrad's a) is E5M2, the activations E4M3
        assert r["status"] == "ok" and r["max_rel_err"] < 1e-2, r
        assert (r["a_dtype"], r["b_dtype"]) == ("float8_e5m2", "float8_e4m3fn") and r["format"] == "HYBRID"
        assert r["ratio"] is None and r["bf16_ratio"] is None  # their providers were filtered out
    assert main(["bench", "gemm", "--quick", "--format", "E5M2"]) == 2  # an FP8 option on another suite
    assert main(["bench", "gemm-fp8", "--quick", "--granularities", "bogus"]) == 2


def test_backend_without_fp8_kernel_declines(use_plugins):
    # What the GPU script meets while TRITON has a bf16 gemm but no gemm_fp8 kernel yet.
    use_plugins("fake_a")
    rows = dense.run(quick=True, tokens=None, models=["tiny"], providers=None, include_reference=False, warmup=0,
                     iters=1, device="cpu", granularities=["tensorwise"], passes=["fwd"])
    fake = [r for r in rows if r["provider"] == "turbo:FAKEA"]
    assert len(fake) == 2 and all(r["status"] == "declined: FAKEA has no kernel for gemm_fp8" for r in fake)
    assert "turbo:TORCH" not in {r["provider"] for r in rows}  # the reference only when asked for


# ---- the oracle ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gran, kw", [
    (G.TENSORWISE, {}),
    (G.ROWWISE, {"axis": -2}),
    (G.BLOCKWISE, {"axis": -1, "block_size": 128}),
    (G.BLOCKWISE, {"block_size": 128, "scaling_recipe": ScalingRecipe(use_2d_block=True)}),
    (G.MX_BLOCKWISE, {"axis": -1}),
])
def test_dequant64_agrees_with_the_library_dequantizer(gran, kw):
    if gran == G.MX_BLOCKWISE and not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip("no E8M0 dtype in this torch")
    # 200 x 300: partial blocks on both dims (128 does not divide either)
    x = torch.randn(200, 300, generator=torch.Generator().manual_seed(1)) * 3
    q, s = quant.quantize_fp8(x, torch.float8_e4m3fn, gran, **kw)
    ours = dense.dequant64(q, s, dense.MX_BLOCK if gran == G.MX_BLOCKWISE else dense.BLOCK)
    lib = quant.dequantize_fp8(q, torch.float32, gran, scale_inv=s, **kw)
    assert ours.shape == lib.shape
    torch.testing.assert_close(ours, lib.double(), rtol=2e-7, atol=0)  # fp32 rounding of the library's product
    assert (ours[:200, :300] - x.double()).abs().max() / x.abs().max() < 0.1  # and it is x, quantized


# ---- the baselines' layouts: torch's own rules (its meta kernels), then the product in float64 -----------

REAL_SCALED_MM = torch._scaled_mm
REAL_F_SCALED_MM = getattr(torch.nn.functional, "scaled_mm", None)
REAL_SCALED_GROUPED_MM = getattr(torch, "_scaled_grouped_mm", None)


def _meta(t):
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def _cdiv(a, b):
    return -(-a // b)


def _blocks(s, dim, size, block=128):
    return s.repeat_interleave(block, dim=dim).narrow(dim, 0, size)


def _k_major(mat1, mat2):
    """cuBLASLt's FP8 rule on sm90 (a C++ check the meta kernels lack): row-major x column-major."""
    k = mat1.shape[1]
    assert mat1.stride() == (k, 1) and mat2.stride() == (1, k), (mat1.stride(), mat2.stride())


def _fake_scaled_mm(mat1, mat2, scale_a, scale_b, *, out_dtype):
    REAL_SCALED_MM(_meta(mat1), _meta(mat2), _meta(scale_a), _meta(scale_b), out_dtype=out_dtype)
    _k_major(mat1, mat2)
    return ((mat1.double() * scale_a.double()) @ (mat2.double() * scale_b.double().reshape(1, -1))).to(out_dtype)


def _mx_unswizzle(s, rows, cols):
    """E8M0 values [rows, cols] from cuBLAS's 128x4-tiled layout (index formula, not a permute)."""
    c_pad = _cdiv(cols, 4) * 4
    r = torch.arange(rows).reshape(-1, 1)
    c = torch.arange(cols).reshape(1, -1)
    idx = ((r // 128) * (c_pad // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    byte = s.view(torch.uint8)[idx].double()
    return torch.exp2(byte - 127)


def _fake_f_scaled_mm(mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b, swizzle_a=None, swizzle_b=None,
                      output_dtype=torch.bfloat16):
    """torch's F.scaled_mm rules (meta kernel), then: 1x128 a: scale_a[m, kb]; 128x128 b:
    scale_b[kb, nb] (rows padded to 4); 1x128 b: scale_b[n, kb]; MX: swizzled E8M0 per 1x32."""
    args = (recipe_a, scale_b, recipe_b)
    kw = {"swizzle_a": swizzle_a, "swizzle_b": swizzle_b, "output_dtype": output_dtype}
    if mat_a.device.type == "meta":  # the suite's own check of the layout against torch's rules
        return REAL_F_SCALED_MM(mat_a, mat_b, scale_a, *args, **kw)
    REAL_F_SCALED_MM(_meta(mat_a), _meta(mat_b), _meta(scale_a), recipe_a, _meta(scale_b), recipe_b, **kw)
    _k_major(mat_a, mat_b)
    st = torch.nn.functional.ScalingType
    m, k = mat_a.shape
    n = mat_b.shape[1]
    a, b_nk = mat_a.double(), mat_b.t().double()
    if recipe_a == st.BlockWise1x32:
        a = a * _blocks(_mx_unswizzle(scale_a, m, k // 32), 1, k, 32)
        b_nk = b_nk * _blocks(_mx_unswizzle(scale_b, n, k // 32), 1, k, 32)
    else:
        a = a * _blocks(scale_a.double(), 1, k)
        if recipe_b == st.BlockWise128x128:
            b_nk = b_nk * _blocks(_blocks(scale_b.double()[:_cdiv(k, 128)].t(), 0, n), 1, k)
        else:
            b_nk = b_nk * _blocks(scale_b.double(), 1, k)
    return (a @ b_nk.t()).to(output_dtype)


# M, N multiples of 16 (torch's rule), K (and N for 128x128 tiles) multiples of 128 as torch's
# blockwise rules want: every scale has several entries per dim, so its strides are really checked.
DENSE_SHAPES = [("fwd", "NT", 160, 256, 384), ("dgrad", "NN", 160, 384, 256), ("wgrad", "TN", 256, 400, 256)]


@pytest.mark.parametrize("pass_, layout, m, n, k", DENSE_SHAPES)
@pytest.mark.parametrize("gran", [G.TENSORWISE, G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE])
def test_dense_baseline_operands(monkeypatch, gran, pass_, layout, m, n, k):
    if gran == G.MX_BLOCKWISE and not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip("no E8M0 dtype in this torch")
    if gran in (G.BLOCKWISE, G.MX_BLOCKWISE) and REAL_F_SCALED_MM is None:
        pytest.skip("no torch.nn.functional.scaled_mm in this torch")
    monkeypatch.setattr(torch, "_scaled_mm", _fake_scaled_mm)
    monkeypatch.setattr(torch.nn.functional, "scaled_mm", _fake_f_scaled_mm, raising=False)
    case = dense.Fp8GemmCase(GemmCase("t", "l", pass_, layout, m, n, k), gran, Format.E4M3)
    inputs = dense.make_inputs(case, "cpu", torch.Generator().manual_seed(0))
    make = dense._scaled_mm if dense.baseline_name(gran) == "torch._scaled_mm" else dense._f_scaled_mm
    out = make(case, inputs["q"])()
    ref = dense.reference(case, inputs, "main")
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-2


@pytest.mark.parametrize("pass_, layout, m, n, k", DENSE_SHAPES)
@pytest.mark.parametrize("gran", [G.TENSORWISE, G.ROWWISE, G.BLOCKWISE])
def test_dense_k_major_operands_are_the_baselines_bytes(gran, pass_, layout, m, n, k):
    """``operands="k-major"``: the turbo providers get the tensors the baseline multiplies (no copy made
    for it), K-contiguous, in the pass's layout, with the same values; the product is unchanged."""
    from turbo_core.dispatch.dispatcher import call
    from turbo_core.dispatch.manager import use_backend

    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    plain = dense.Fp8GemmCase(GemmCase("t", "l", pass_, layout, m, n, k), gran, Format.E4M3)
    kmaj = dense.Fp8GemmCase(plain.gemm, gran, Format.E4M3, "k-major")
    assert kmaj.label == plain.label + " k-major"
    p_in, k_in = dense.make_inputs(plain, "cpu", gen()), dense.make_inputs(kmaj, "cpu", gen())
    qa, sa, qb, sb, ta, tb = k_in["q"]
    assert (ta, tb) == p_in["q"][4:] and sa is not None
    for x, y in zip(k_in["q"][:4], p_in["q"][:4], strict=True):
        assert x.shape == y.shape and torch.equal(x.float(), y.float())
    assert (qa.stride(0) if ta else qa.stride(1)) == 1 and (qb.stride(1) if tb else qb.stride(0)) == 1
    mat1, mat2 = dense.k_major(k_in["q"])
    assert mat1.data_ptr() == qa.data_ptr() and mat2.data_ptr() == qb.data_ptr()
    with use_backend("TORCH"):
        got = call("gemm_fp8", dense.turbo_args(gran, k_in["q"]))
    ref = dense.reference(plain, p_in, "main")
    assert (got.double() - ref).abs().max() / ref.abs().max() < 1e-2
    with pytest.raises(ValueError, match="operands"):
        dense.cases(32, True, None, [gran], Format.E4M3, operands="kmajor")


def test_operands_option_reaches_the_rows_and_only_gemm_fp8_takes_it(tmp_path, capsys):
    rows = _bench(tmp_path, "gemm-fp8", "--operands", "k-major", "--granularities", "tensorwise",
                  "--passes", "wgrad")["rows"]
    assert rows and {r["operands"] for r in rows} == {"k-major"}
    assert all(r["status"] == "ok" for r in rows if r["provider"] == "turbo:TORCH")
    assert main(["bench", "grouped-gemm-fp8", "--quick", "--operands", "k-major"]) != 0
    assert "--operands applies to gemm-fp8, not to grouped-gemm-fp8" in capsys.readouterr().err


def _fake_scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, *, offs, out_dtype):
    """torch._scaled_grouped_mm's rules (meta kernel), then rowwise scales: 2d x 3d [M] and [G, N];
    2d x 2d: [G * M_a] and [G * N], group-major."""
    REAL_SCALED_GROUPED_MM(_meta(mat_a), _meta(mat_b), _meta(scale_a), _meta(scale_b), offs=_meta(offs),
                           out_dtype=out_dtype)
    ends = [0] + offs.tolist()
    a, b = mat_a.double(), mat_b.double()
    if mat_b.dim() == 3:
        g, _, n = mat_b.shape
        out = torch.zeros(mat_a.shape[0], n, dtype=torch.float64)
        for i in range(g):
            rows = slice(ends[i], ends[i + 1])
            out[rows] = (a[rows] * scale_a[rows, None].double()) @ (b[i] * scale_b[i].double())
        return out.to(out_dtype)
    g = offs.shape[0]
    sa, sb = scale_a.double().reshape(g, mat_a.shape[0]), scale_b.double().reshape(g, mat_b.shape[1])
    return torch.stack([(a[:, ends[i]:ends[i + 1]] * sa[i, :, None]) @ (b[ends[i]:ends[i + 1]] * sb[i])
                        for i in range(g)]).to(out_dtype)


@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad"])
@pytest.mark.parametrize("balance", ["balanced", "skewed"])
@pytest.mark.parametrize("gran", [G.TENSORWISE, G.ROWWISE])
def test_grouped_baseline_operands(monkeypatch, gran, balance, pass_):
    if REAL_SCALED_GROUPED_MM is None:
        pytest.skip("no torch._scaled_grouped_mm in this torch")
    monkeypatch.setattr(torch, "_scaled_grouped_mm", _fake_scaled_grouped_mm)
    spec = QUICK["tiny"]
    _, out_f, in_f = spec["layers"][0]
    case = grouped.GroupedFp8Case(GroupedCase("tiny", "gate_up", pass_, balance, group_lens(32, spec, balance),
                                              out_f, in_f), gran, Format.E4M3)
    inputs = grouped.make_inputs(case, "cpu", torch.Generator().manual_seed(0))
    out = grouped.scaled_grouped_mm(case, inputs)()
    ref = grouped.reference(case, inputs, "main")
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-2


@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad"])
def test_grouped_baseline_skips_unaligned_wgrad_groups(monkeypatch, pass_):
    """torch._scaled_grouped_mm's wgrad asserts on the device (and kills the process) when a group's
    token count is not a multiple of 16: such cases get a skipped baseline row before any call."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        pytest.skip("no torch._scaled_grouped_mm in this torch")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # an H100/H200, as seen here

    def case(lens):
        return grouped.GroupedFp8Case(GroupedCase("tiny", "gate_up", pass_, "skewed", lens, 64, 32), G.ROWWISE,
                                      Format.E4M3)

    e4 = torch.zeros(1, dtype=torch.float8_e4m3fn)
    q = (e4, None, e4, None)
    reason = grouped.baseline_skip(case((48, 0, 17, 63)), q, "cuda")
    if pass_ == "wgrad":
        assert "multiple of 16" in reason
    else:  # fwd / dgrad group along the rows of a: any count runs
        assert reason is None
    assert grouped.baseline_skip(case((48, 0, 16, 64)), q, "cuda") is None


def test_swizzle_is_a_permutation_of_the_padded_scales():
    if not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip("no E8M0 dtype in this torch")
    rows, cols = 130, 5  # pads to 256 x 8
    s = torch.randint(100, 150, (rows, cols), dtype=torch.uint8)
    out = dense.swizzle_32_4_4(s.view(torch.float8_e8m0fnu)).view(torch.uint8)
    assert out.shape == (256 * 8,)
    assert torch.equal(_mx_unswizzle(out.view(torch.float8_e8m0fnu), rows, cols), torch.exp2(s.double() - 127))
    assert int((out == 0).sum()) == 256 * 8 - rows * cols  # the padding, and nothing else, is zero


def test_baselines_through_the_suites(monkeypatch):
    # The GPU path of both suites end to end on the CPU: the baselines made runnable (torch's
    # rules, float64 products), so their rows, ratios and accuracy go through the runner.
    if REAL_F_SCALED_MM is None or REAL_SCALED_GROUPED_MM is None:
        pytest.skip("this torch lacks F.scaled_mm or torch._scaled_grouped_mm")
    monkeypatch.setattr(torch, "_scaled_mm", _fake_scaled_mm)
    monkeypatch.setattr(torch.nn.functional, "scaled_mm", _fake_f_scaled_mm)
    monkeypatch.setattr(torch, "_scaled_grouped_mm", _fake_scaled_grouped_mm)
    monkeypatch.setattr(dense, "baseline_skip", lambda *a: None)
    monkeypatch.setattr(grouped, "baseline_skip", lambda case, q, device: None)
    monkeypatch.setattr(dense.gemm_suite, "QUICK", {"t128": [("l", 256, 384)]})  # dims torch's block rules take
    kw = {"quick": True, "tokens": 128, "models": None, "providers": None, "include_reference": True, "warmup": 0,
          "iters": 1, "device": "cpu", "granularities": ["tensorwise", "rowwise", "blockwise"]}
    rows = dense.run(**kw) + grouped.run(**{**kw, "tokens": None, "granularities": ["tensorwise", "rowwise"]})
    baselines = [r for r in rows if r["role"] == "baseline"]
    assert {r["provider"] for r in baselines} == {"torch._scaled_mm", "F.scaled_mm", "torch._scaled_grouped_mm"}
    for r in baselines:
        assert r["status"] == "ok" and r["ratio"] == 1.0 and r["max_rel_err"] < 1e-2, r
    for r in rows:
        if r["provider"] == "turbo:TORCH":
            assert r["status"] == "ok" and r["ratio"] > 0 and r["bf16_ratio"] > 0, r
