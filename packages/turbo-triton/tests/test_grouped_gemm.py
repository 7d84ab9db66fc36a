"""The TRITON grouped GEMM kernels directly (CPU interpreter): both kernel paths (the TMA kernel runs
here too, through the interpreter's tensor descriptors), both layouts of b, trans_c, accumulate into
out, the zeroed tail, empty groups and edge sizes, poisoned outputs and inputs, and what they decline.

Group lengths: 0 (first, middle, last), 1, 5 and 17 rows cross the row tiles of every config used
here (16 and 32 rows); K and N are odd for the pointer kernel and multiples of 8 for the TMA kernel
(TMA needs 16-byte strides), with a 16x16x16 config so that tiles end both inside and at the edge of
a group and of K/N.
"""

import pytest
import torch

from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.testing.cases.grouped_gemm import reference_grouped_gemm_variable_k
from turbo_triton.grouped_gemm import launch
from turbo_triton.grouped_gemm.configs import GroupedConfig
from turbo_triton.grouped_gemm.launch import (
    can_handle,
    can_handle_variable_k,
    grouped_gemm,
    grouped_gemm_variable_k,
    kernel_path,
    variable_k_kernel_path,
)

LENS = {1: (17,), 2: (0, 5), 3: (5, 0, 17), 4: (0, 1, 17, 5)}
SMALL = GroupedConfig(16, 16, 16, 2, 1, 1)
SPLIT = GroupedConfig(16, 32, 16, 2, 1, 1, flatten=True, subtile=True)
# (path, K, N, config): odd sizes on the pointer kernel; aligned ones on the TMA kernel, default
# config and small ones (several tiles per group, full and partial; one storing in halves)
PATHS = [("pointer", 45, 33, None), ("pointer", 23, 1, SMALL), ("tma", 48, 40, None), ("tma", 48, 32, SMALL),
         ("tma", 48, 32, SPLIT)]
IDS = [f"{p}-K{k}-N{n}-{'table' if c is None else 'split' if c.subtile else 'small'}" for p, k, n, c in PATHS]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _offs(lens) -> torch.Tensor:
    offs = torch.zeros(len(lens) + 1, dtype=torch.int64)
    offs[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return offs


def _fwd_ref(a, b, lens, trans_b):
    out = torch.zeros(a.shape[0], b.shape[1] if trans_b else b.shape[2], dtype=torch.float64)
    start = 0
    for g, n in enumerate(lens):
        w = b[g].double().t() if trans_b else b[g].double()
        out[start:start + n] = a[start:start + n].double() @ w
        start += n
    return out


def _close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """torch.empty returns NaN-filled tensors, so an output element the kernel misses shows."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", empty)


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)  # fp16: the conformance suite
@pytest.mark.parametrize("path,k,n,cfg", PATHS, ids=IDS)
@pytest.mark.parametrize("trans_b", [False, True], ids=["NN", "NT"])
def test_forward_against_float64(trans_b, path, k, n, cfg, dtype):
    for g, lens in LENS.items():
        tail = 3 if g % 2 else 0
        m = sum(lens) + tail
        gen = torch.Generator().manual_seed(g * 100 + k)
        a = torch.randn(m, k, generator=gen).to(dtype)
        if tail:
            a[m - tail:] = float("nan")  # rows outside every group are never read into a result
        b = torch.randn(*((g, n, k) if trans_b else (g, k, n)), generator=gen).to(dtype)
        c = grouped_gemm(GroupedGemmArgs(a, b, torch.tensor(lens), _offs(lens), trans_b), cfg, path)
        assert c.dtype == dtype and c.shape == (m, n)
        _close(c, _fwd_ref(a, b, lens, trans_b), dtype)
        if tail:
            assert torch.count_nonzero(c[m - tail:]) == 0, "the rows past the last group must be zero"


@pytest.mark.usefixtures("poisoned_empty")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("path,k,n,cfg", PATHS, ids=IDS)
@pytest.mark.parametrize("trans_c", [False, True], ids=["C", "CT"])
def test_variable_k_against_float64(trans_c, path, k, n, cfg, dtype):
    for g, lens in LENS.items():
        tail = 3 if g % 2 else 0
        m = sum(lens) + tail
        gen = torch.Generator().manual_seed(g * 100 + k + 7)
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(m, n, generator=gen).to(dtype)
        if tail:
            a[m - tail:] = float("nan")
            b[m - tail:] = float("inf")
        c = grouped_gemm_variable_k(
            GroupedGemmVariableKArgs(a, b, torch.tensor(lens), _offs(lens), trans_c), cfg, path)
        assert c.dtype == dtype and c.shape == ((g, n, k) if trans_c else (g, k, n))
        _close(c, reference_grouped_gemm_variable_k(a, b, lens, trans_c), dtype)
        for i, length in enumerate(lens):
            if length == 0:
                assert torch.count_nonzero(c[i]) == 0, "an empty group gives a zero matrix"


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("path,k,n,cfg", PATHS, ids=IDS)
@pytest.mark.parametrize("trans_c", [False, True], ids=["C", "CT"])
def test_variable_k_accumulates_into_out(trans_c, path, k, n, cfg, out_dtype):
    lens = LENS[4]
    m = sum(lens)
    gen = torch.Generator().manual_seed(k + n)
    a = torch.randn(m, k, generator=gen).bfloat16()
    b = torch.randn(m, n, generator=gen).bfloat16()
    base = torch.randn(*((4, n, k) if trans_c else (4, k, n)), generator=gen).to(out_dtype)
    out = base.clone()
    got = grouped_gemm_variable_k(
        GroupedGemmVariableKArgs(a, b, torch.tensor(lens), _offs(lens), trans_c, None, out), cfg, path)
    assert got is out and out.dtype == out_dtype
    _close(out, base.double() + reference_grouped_gemm_variable_k(a, b, lens, trans_c), out_dtype)
    assert torch.equal(out[0], base[0]), "an empty group leaves out[g] unchanged"


@pytest.mark.usefixtures("poisoned_empty")
def test_edge_sizes():
    bf = torch.bfloat16
    # M_total = 0; every group empty but a tail; G = 0 (everything is tail); K = 0; N = 0
    c = grouped_gemm(GroupedGemmArgs(torch.randn(0, 8).to(bf), torch.randn(2, 8, 5).to(bf),
                                     torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)))
    assert c.shape == (0, 5)
    c = grouped_gemm(GroupedGemmArgs(torch.randn(6, 8).to(bf), torch.randn(2, 8, 5).to(bf),
                                     torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)))
    assert torch.count_nonzero(c) == 0 and not c.isnan().any()
    c = grouped_gemm(GroupedGemmArgs(torch.randn(4, 8).to(bf), torch.randn(0, 8, 5).to(bf),
                                     torch.zeros(0, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)))
    assert c.shape == (4, 5) and torch.count_nonzero(c) == 0 and not c.isnan().any()
    c = grouped_gemm(GroupedGemmArgs(torch.randn(4, 0).to(bf), torch.randn(2, 0, 5).to(bf),
                                     torch.tensor([1, 3]), torch.tensor([0, 1, 4])))
    assert c.shape == (4, 5) and torch.count_nonzero(c) == 0 and not c.isnan().any()
    c = grouped_gemm(GroupedGemmArgs(torch.randn(4, 8).to(bf), torch.randn(2, 8, 0).to(bf),
                                     torch.tensor([1, 3]), torch.tensor([0, 1, 4])))
    assert c.shape == (4, 0)
    # variable K: no rows at all gives zeros (or leaves out unchanged); G = 0 gives [0, K, N]
    z = grouped_gemm_variable_k(GroupedGemmVariableKArgs(
        torch.randn(0, 8).to(bf), torch.randn(0, 5).to(bf), torch.zeros(2, dtype=torch.int64),
        torch.zeros(3, dtype=torch.int64)))
    assert z.shape == (2, 8, 5) and torch.count_nonzero(z) == 0 and not z.isnan().any()
    out = torch.ones(2, 5, 8)
    assert grouped_gemm_variable_k(GroupedGemmVariableKArgs(
        torch.randn(0, 8).to(bf), torch.randn(0, 5).to(bf), torch.zeros(2, dtype=torch.int64),
        torch.zeros(3, dtype=torch.int64), True, None, out)) is out
    assert torch.equal(out, torch.ones(2, 5, 8))
    z = grouped_gemm_variable_k(GroupedGemmVariableKArgs(
        torch.randn(3, 8).to(bf), torch.randn(3, 5).to(bf), torch.zeros(0, dtype=torch.int64),
        torch.zeros(1, dtype=torch.int64)))
    assert z.shape == (0, 8, 5)


def test_strided_inputs_hints_and_offsets_view():
    torch.manual_seed(3)
    lens = (5, 0, 17)
    big = torch.randn(22, 64)
    a = big[:, 1:60:2]  # non-unit inner stride: the pointer kernel takes any strides
    b = torch.randn(3, 40, 30).transpose(1, 2)  # [G, K, N] as a transposed view
    offs = torch.stack([_offs(lens), _offs(lens)], 1)[:, 0]  # a non-contiguous view
    want = _fwd_ref(a, b, lens, False)
    for num_cu, schedule in ((None, "static"), (1, "static"), (None, "work_steal")):
        c = grouped_gemm(GroupedGemmArgs(a, b, torch.tensor(lens), offs, False, num_cu, schedule))
        torch.testing.assert_close(c.double(), want, rtol=1e-4, atol=1e-4)
    y = torch.randn(22, 64)[:, ::3]
    c = grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, y, torch.tensor(lens), offs, False, 2))
    torch.testing.assert_close(c.double(), reference_grouped_gemm_variable_k(a, y, lens, False), rtol=1e-4, atol=1e-4)


def test_tma_path_only_where_it_applies():
    a, b = torch.randn(8, 45), torch.randn(2, 45, 16)
    lens, offs = torch.tensor([3, 5]), torch.tensor([0, 3, 8])
    args = GroupedGemmArgs(a, b, lens, offs)
    assert kernel_path(args) == "pointer"  # the interpreter picks the portable kernel by itself
    with pytest.raises(ValueError, match="path"):
        grouped_gemm(args, path="tma")  # K=45: 180-byte rows are not 16-byte aligned
    vargs = GroupedGemmVariableKArgs(a, torch.randn(8, 3), lens, offs)
    assert variable_k_kernel_path(vargs) == "pointer"
    with pytest.raises(ValueError, match="path"):
        grouped_gemm_variable_k(vargs, path="tma")


def test_declines_with_reasons(monkeypatch):
    a, b = torch.randn(4, 4), torch.randn(1, 4, 4)
    lens, offs = torch.tensor([4]), torch.tensor([0, 4])
    assert can_handle(GroupedGemmArgs(a, b, lens, offs)) is None
    assert can_handle_variable_k(GroupedGemmVariableKArgs(a, a, lens, offs)) is None
    assert "float64" in can_handle(GroupedGemmArgs(a.double(), b.double(), lens, offs))
    assert "float64" in can_handle_variable_k(
        GroupedGemmVariableKArgs(a, a, lens, offs, False, None, torch.zeros(1, 4, 4, dtype=torch.float64)))
    monkeypatch.setattr(launch, "_INT32", 3)
    assert "int32" in can_handle(GroupedGemmArgs(a, b, lens, offs))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(GroupedGemmArgs(a, b, lens, offs))
    assert "TRITON_INTERPRET=1" in can_handle_variable_k(GroupedGemmVariableKArgs(a, a, lens, offs))


def test_offsets_past_the_rows_are_clamped():
    # a broken contract (caught asynchronously on a GPU, after the launch) must not take the kernels
    # outside the tensors: rows are clamped to [0, M_total]
    torch.manual_seed(4)
    a, b = torch.randn(8, 16), torch.randn(2, 16, 8)
    lens, offs = torch.tensor([5, 95]), torch.tensor([0, 5, 100])
    c = grouped_gemm(GroupedGemmArgs(a, b, lens, offs))
    torch.testing.assert_close(c.double(), _fwd_ref(a, b, (5, 3), False), rtol=1e-4, atol=1e-4)
    c = grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, a, lens, offs))
    torch.testing.assert_close(c.double(), reference_grouped_gemm_variable_k(a, a, (5, 3), False), rtol=1e-4, atol=1e-4)


def test_sm90_tile_rules():
    # the tuned sm90 table: the variable-K (wgrad) kernel stores its whole tile when the output is bf16 and
    # in halves when an fp32 output (the fused wgrad) would not fit three stages otherwise; forward/dgrad
    # never take a 64-row tile (the slowest on sm90), not even for Qwen3's down projection
    from turbo_triton.grouped_gemm import configs

    bf16_out = configs.pick_variable_k("sm90", 7168, 4096, 8, 132, 2, 2)
    fp32_out = configs.pick_variable_k("sm90", 7168, 4096, 8, 132, 2, 4)
    assert (bf16_out.block_m, bf16_out.block_n, bf16_out.num_stages, bf16_out.subtile) == (128, 256, 3, False)
    assert (fp32_out.block_m, fp32_out.block_n, fp32_out.num_stages, fp32_out.subtile) == (128, 256, 3, True)
    for arch in ("sm90", "gfx942", "gfx950"):
        for out_bytes in (2, 4):
            cfg = configs.pick_variable_k(arch, 7168, 4096, 8, 132, 2, out_bytes)
            assert configs.smem_bytes(cfg, 2, out_bytes) <= configs.SMEM_LIMIT[arch], (arch, out_bytes, cfg)
    assert configs.pick_fwd("sm90", 4096, 768, 2048, 8, 132, 2).block_m == 128
