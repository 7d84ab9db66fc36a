"""The integers that cross into the extension: dtype/scale/epilogue codes agree with the C++ enums,
the 29-argument tuple is in the order ``_C.matmul`` parses (``algo`` last), scales travel with their operand when a
plan is swapped, and the grouped loop's per-group pointers/sizes compute the grouped GEMMs (checked
by replaying them on a float64 column-major BLAS over the raw storage)."""

from __future__ import annotations

import re

import pytest
import torch
from blas_sim import run_call

from turbo_hipblaslt import _toolchain
from turbo_hipblaslt.algos import MAX_ALGOS
from turbo_hipblaslt.codes import DTYPE_CODES, EPILOGUE_CODES, SCALE_CODES
from turbo_hipblaslt.grouped_gemm import group_calls
from turbo_hipblaslt.layout import BlasPlan, plan_gemm
from turbo_hipblaslt.matmul_args import ALGO_SLOT, NUM_ARGS, Side, call_args, probe_args, with_algo

CPP = (_toolchain.csrc_dir() / "turbo_blaslt.cpp").read_text()


def cpp_enum(prefix: str) -> dict[str, int]:
    return {name: int(value) for name, value in re.findall(rf"\b({prefix}\w+) = (-?\d+)", CPP)}


def test_dtype_codes_match_the_cpp_enum():
    cpp = cpp_enum("kCode")
    want = {"kCodeF32": torch.float32, "kCodeF16": torch.float16, "kCodeBF16": torch.bfloat16,
            "kCodeE4M3": torch.float8_e4m3fn, "kCodeE5M2": torch.float8_e5m2,
            "kCodeE4M3Fnuz": torch.float8_e4m3fnuz, "kCodeE5M2Fnuz": torch.float8_e5m2fnuz}
    assert {k: cpp[k] for k in want} == {k: DTYPE_CODES[v] for k, v in want.items()}


def test_scale_and_epilogue_codes_match_the_cpp_enums():
    scale = cpp_enum("kScale")
    assert [scale[n] for n in ("kScaleNone", "kScaleScalar", "kScaleOuterVec", "kScaleVec128", "kScaleBlk128")] == \
        [SCALE_CODES[n] for n in ("none", "scalar", "outer_vec", "vec128", "blk128x128")]
    epi = cpp_enum("kEpi")
    assert [epi[n] for n in ("kEpiNone", "kEpiBias", "kEpiGelu", "kEpiGeluBias")] == \
        [EPILOGUE_CODES[n] for n in (None, "bias", "gelu", "gelu_bias")]


def test_argument_format_has_29_fields_with_algo_last():
    fmt = re.search(r'kCallFormat = "(\w+)"', CPP).group(1)
    args = call_args(BlasPlan(1, 2, 3, True, False, False, 3, 3, 1), Side(1, 2), Side(3, 2), 5, 0, device=0, algo=7)
    assert len(fmt) == len(args) == NUM_ARGS == 29
    kinds = {"i": int, "L": int, "K": int, "d": float}
    assert all(isinstance(v, kinds[f]) for f, v in zip(fmt, args, strict=True))
    assert fmt[ALGO_SLOT] == "i" and args[ALGO_SLOT] == 7  # an int, parsed into Call::algo, the last field
    parsed = re.search(r"PyArg_ParseTuple\(tuple, kCallFormat,(.*?)\) != 0;", CPP, re.S).group(1)
    assert parsed.split(",")[-1].strip() == "&c->algo"
    default = call_args(BlasPlan(1, 2, 3, True, False, False, 3, 3, 1), Side(1, 2), Side(3, 2), 5, 0, device=0)
    assert default[ALGO_SLOT] == 0 and default[:ALGO_SLOT] == args[:ALGO_SLOT]
    assert with_algo(default, 3) == (*default[:ALGO_SLOT], 3)


def test_algo_limit_and_entry_points_match_the_cpp():
    assert int(re.search(r"constexpr int kMaxAlgos = (\d+);", CPP).group(1)) == MAX_ALGOS
    for name, flags in (("algo_count", "METH_VARARGS"), ("library_version", "METH_NOARGS"),
                        ("check", "METH_VARARGS"), ("matmul", "METH_VARARGS")):
        assert re.search(rf'\{{"{name}", py_{name}, {flags},', CPP), name
    # algo is part of the descriptor cache's key (a configuration cached at rank 0 never serves rank 2)
    key = re.search(r"Key make_key\(const Call& c\) \{(.*?)\n\}", CPP, re.S).group(1)
    assert "c.algo" in key


@pytest.mark.parametrize("swapped", [False, True])
def test_swapped_plan_swaps_operands_with_their_scales(swapped):
    p = BlasPlan(4, 5, 6, True, False, swapped, 6, 6, 4)
    a = Side(1000, DTYPE_CODES[torch.float8_e4m3fn], 111, 1)
    b = Side(2000, DTYPE_CODES[torch.float8_e5m2], 222, 2)
    args = call_args(p, a, b, 3000, DTYPE_CODES[torch.bfloat16], device=2, alpha=1.0, beta=1.0, compute=0,
                     epilogue=1, bias_ptr=4000, bias_code=2, stream=77, workspace=88, workspace_size=99)
    first, second = (b, a) if swapped else (a, b)
    assert args == (2, 4, 5, 6, 1, 0, first.ptr, first.code, 6, second.ptr, second.code, 6, 3000, 2, 4, 1.0, 1.0,
                    0, 1, 4000, 2, first.scale_ptr, first.scale_mode, second.scale_ptr, second.scale_mode, 77, 88, 99,
                    0)


def test_probe_args_reduce_pointers_to_their_alignment_class():
    args = call_args(BlasPlan(4, 5, 6, True, False, False, 6, 6, 4), Side(4096 + 2, 2, 5000, 0), Side(8192, 2),
                     4096 + 8, 2, device=0, bias_ptr=12345, stream=9, workspace=10, workspace_size=1 << 20, algo=3)
    p = probe_args(args)
    assert len(p) == 29
    assert (p[6], p[9], p[12]) == (2, 16, 8)  # residues mod 16 (16 when aligned), as the selection cache keys them
    assert (p[19], p[21], p[23]) == (16, 16, 0)  # bias / scale stand-ins (0 stays 0: none set)
    assert (p[25], p[26], p[27], p[28]) == (0, 0, 1 << 20, 3)  # the rank asked about is kept


@pytest.mark.parametrize("trans_b", [False, True])
def test_grouped_forward_calls_compute_each_group(trans_b):
    gen = torch.Generator().manual_seed(3)
    lens = [3, 0, 1, 4]  # an empty group in the middle
    m, k, n = sum(lens) + 2, 5, 6  # two tail rows outside every group
    a = torch.randn(m, k, generator=gen, dtype=torch.float64)
    b = torch.randn(len(lens), *((n, k) if trans_b else (k, n)), generator=gen, dtype=torch.float64)
    out = torch.full((m, n), 7.0, dtype=torch.float64)
    offs = [0]
    for length in lens:
        offs.append(offs[-1] + length)
    p = plan_gemm(((m, k), a.stride()), False, ((b.shape[1], b.shape[2]), b.stride()[1:]), trans_b,
                  ((m, n), out.stride()), False)
    calls = group_calls(p, offs, vary="rows", a_ptr=0, a_step=a.stride(0), b_ptr=0, b_step=b.stride(0), d_ptr=0,
                        d_step=out.stride(0), fixed=(n, k))
    assert len(calls) == 3  # the empty group is skipped
    for cm, cn, ck, pa, pb, pd in calls:  # element offsets here (step = stride in elements)
        first, second = (b, a) if p.swapped else (a, b)
        run_call(cm, cn, ck, p.transa, p.transb, (first, pa, p.lda), (second, pb, p.ldb), (out, pd, p.ldd))
    for g, length in enumerate(lens):
        rows = slice(offs[g], offs[g] + length)
        w = b[g].t() if trans_b else b[g]
        torch.testing.assert_close(out[rows], a[rows] @ w, rtol=1e-12, atol=1e-12)
    assert torch.all(out[offs[-1]:] == 7.0)  # rows past the groups untouched by the calls


@pytest.mark.parametrize("trans_c", [False, True])
def test_grouped_variable_k_calls_compute_each_group(trans_c):
    gen = torch.Generator().manual_seed(4)
    lens = [0, 3, 5]
    m, k, n = sum(lens) + 1, 4, 3
    a = torch.randn(m, k, generator=gen, dtype=torch.float64)
    b = torch.randn(m, n, generator=gen, dtype=torch.float64)
    out = torch.zeros((len(lens), n, k) if trans_c else (len(lens), k, n), dtype=torch.float64)
    offs = [0, 0, 3, 8]
    p = plan_gemm(((m, k), a.stride()), True, ((m, n), b.stride()), False, (tuple(out.shape[1:]), out.stride()[1:]),
                  trans_c)
    calls = group_calls(p, offs, vary="k", a_ptr=0, a_step=a.stride(0), b_ptr=0, b_step=b.stride(0), d_ptr=0,
                        d_step=out.stride(0), fixed=(k, n))
    for cm, cn, ck, pa, pb, pd in calls:
        first, second = (b, a) if p.swapped else (a, b)
        run_call(cm, cn, ck, p.transa, p.transb, (first, pa, p.lda), (second, pb, p.ldb), (out, pd, p.ldd))
    for g in range(len(lens)):
        c = a[offs[g]:offs[g + 1]].t() @ b[offs[g]:offs[g + 1]]
        torch.testing.assert_close(out[g], c.t() if trans_c else c, rtol=1e-12, atol=1e-12)
