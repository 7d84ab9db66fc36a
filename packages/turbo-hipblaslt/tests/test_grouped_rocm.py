"""The grouped GEMMs' ROCm path on the CPU: with an extension that has ``matmul_grouped`` (hipBLASLt's
one-launch grouped GEMM; the ROCm-flavoured fake ``RocmFakeExt``), ``grouped_gemm`` and
``grouped_gemm_variable_k`` make exactly one ``matmul_grouped`` call with exactly the groups the loop
path hands to ``matmul_many`` on the CUDA-flavoured fake (compared call against call), empty groups
left out, and results equal to float64 math; a ``False`` answer (no grouped algorithm) falls back to the
loop; the CUDA-flavoured fake (no ``matmul_grouped``) always takes the loop."""

from __future__ import annotations

import pytest
import torch
from fake_ext import FakeExt, RocmFakeExt, simulate

from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.testing.numerics import assert_close_to_reference
from turbo_hipblaslt import grouped_gemm

LENS = [3, 0, 5, 1]
OFFS = [0, 3, 3, 8, 9]
M, K, N = sum(LENS) + 2, 6, 4
POINTER_SLOTS = (6, 9, 12)  # A, B, D in the argument tuple


def _tensors(trans_b: bool):
    g = torch.Generator().manual_seed(11)
    a = torch.randn(M, K, generator=g).bfloat16()
    b = torch.randn(len(LENS), *((N, K) if trans_b else (K, N)), generator=g).bfloat16()
    dy = torch.randn(M, N, generator=g).bfloat16()
    return a, b, dy


def _normalized(record: tuple[tuple, list]) -> tuple[tuple, list]:
    """``(common, groups)`` with pointers made relative to the call's own A/B/D base pointers (fresh outputs
    live at new addresses in every run) and the base pointers dropped from ``common``."""
    common, groups = record
    bases = [common[i] for i in POINTER_SLOTS]
    rest = tuple(v for i, v in enumerate(common) if i not in POINTER_SLOTS)
    return rest, [(m, n, k, a - bases[0], b - bases[1], d - bases[2]) for m, n, k, a, b, d in groups]


def _run(monkeypatch, fake: FakeExt, op: str, flag: bool, with_out: bool = False):
    simulate(monkeypatch, fake)
    a, b, dy = _tensors(flag if op == "forward" else False)
    lens, offs = torch.tensor(LENS), torch.tensor(OFFS)
    if op == "forward":
        return grouped_gemm.grouped_gemm(GroupedGemmArgs(a, b, lens, offs, flag)), (a, b, dy)
    out = torch.ones(len(LENS), *((N, K) if flag else (K, N))) if with_out else None
    res = grouped_gemm.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, dy, lens, offs, flag, out=out))
    return res, (a, b, dy)


def _check_numbers(op: str, flag: bool, with_out: bool, res: torch.Tensor, tensors) -> None:
    a, b, dy = tensors
    for i, (s, e) in enumerate(zip(OFFS[:-1], OFFS[1:], strict=True)):
        if op == "forward":
            w = b[i].double().t() if flag else b[i].double()
            assert_close_to_reference(res[s:e], a[s:e].double() @ w, dtype=torch.bfloat16)
        else:
            c = a[s:e].double().t() @ dy[s:e].double()
            c = c.t() if flag else c
            if with_out:
                assert_close_to_reference(res[i], c + 1.0, dtype=torch.float32)
            else:
                assert_close_to_reference(res[i], c, dtype=torch.bfloat16)
    if op == "forward":
        assert torch.count_nonzero(res[OFFS[-1]:]) == 0


CASES = [("forward", False, False), ("forward", True, False), ("variable_k", False, False),
         ("variable_k", True, False), ("variable_k", False, True), ("variable_k", True, True)]


@pytest.mark.parametrize("op,flag,with_out", CASES)
def test_rocm_runs_one_grouped_call_with_the_loops_groups(monkeypatch, op, flag, with_out):
    cuda = FakeExt()
    res_cuda, tensors = _run(monkeypatch, cuda, op, flag, with_out)
    assert not hasattr(cuda, "matmul_grouped")
    assert len(cuda.many) == 1  # the CUDA-flavoured fake: the loop

    rocm = RocmFakeExt()
    res_rocm, tensors_rocm = _run(monkeypatch, rocm, op, flag, with_out)
    assert len(rocm.grouped) == 1, "one matmul_grouped call per grouped call"
    assert rocm.many == [] and rocm.calls == [], "the loop is not used on ROCm"
    assert _normalized(rocm.grouped[0]) == _normalized(cuda.many[0])
    groups = rocm.grouped[0][1]
    assert len(groups) == sum(1 for n in LENS if n), "empty groups are left out"
    assert all(m and n and k for m, n, k, *_ in groups)
    _check_numbers(op, flag, with_out, res_rocm, tensors_rocm)
    _check_numbers(op, flag, with_out, res_cuda, tensors)


@pytest.mark.parametrize("op,flag,with_out", [CASES[0], CASES[3], CASES[5]])
def test_rocm_without_a_grouped_algorithm_falls_back_to_the_loop(monkeypatch, op, flag, with_out):
    rocm = RocmFakeExt(grouped_offers=False)
    res, tensors = _run(monkeypatch, rocm, op, flag, with_out)
    assert len(rocm.grouped) == 1 and len(rocm.many) == 1
    assert rocm.many[0] == rocm.grouped[0], "the loop gets the same groups"
    _check_numbers(op, flag, with_out, res, tensors)


def test_no_groups_to_run_makes_no_call(monkeypatch):
    rocm = RocmFakeExt()
    simulate(monkeypatch, rocm)
    a, b, _ = _tensors(False)
    zero = torch.zeros(len(LENS), dtype=torch.long)
    out = grouped_gemm.grouped_gemm(GroupedGemmArgs(a, b, zero, torch.zeros(len(LENS) + 1, dtype=torch.long)))
    assert rocm.grouped == [] and rocm.many == []
    assert torch.count_nonzero(out) == 0
