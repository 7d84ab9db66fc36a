"""``turbo bench sparse-mla``: the quick run on the CPU (dense masked SDPA through its math backend,
TORCH, and TRITON under the interpreter when it can run here), its rows and report, FLOPs and the
dense mask by hand, and the pass option."""

from __future__ import annotations

import pytest
import torch
from triton_here import triton_interpretable

from turbo_core.bench import dataset
from turbo_core.bench.suites import SUITES
from turbo_core.bench.suites import sparse_mla as suite
from turbo_core.cli.main import main


def test_cases_flops_and_mask_by_hand():
    assert "sparse-mla" in SUITES
    full = suite.cases(4096, False, None)
    assert [(c.heads, c.topk, c.d_qk, c.d_v, c.pass_) for c in full] == [
        (128, 2048, 576, 512, "fwd"), (128, 2048, 576, 512, "bwd"), (64, 2048, 576, 512, "fwd"),
        (64, 2048, 576, 512, "bwd")]
    fwd, bwd = suite.cases(32, True, None)
    # 32 causal tokens, top-16: token t sees min(t + 1, 16) rows -> 1 + ... + 16 + 16 * 16 = 392 pairs
    inputs = suite.make_inputs(fwd, "cpu", torch.bfloat16)
    valid = int((inputs["idx"] >= 0).sum())
    assert valid == 392
    assert fwd.flops(valid) == 392 * 2 * 2 * (24 + 16) and bwd.flops(valid) == 392 * 2 * 2 * (3 * 24 + 2 * 16)
    mask, idx = inputs["mask"], inputs["idx"]
    for t in range(32):
        assert set(torch.nonzero(mask[t])[:, 0].tolist()) == {j for j in idx[t].tolist() if j >= 0}
        assert all(j <= t for j in idx[t].tolist())  # causal
    assert suite.checked_rows(32).tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31]


def test_quick_run_on_cpu_and_its_report(tmp_path, monkeypatch, use_plugins):
    no_triton = triton_interpretable()
    if no_triton is None:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        use_plugins("turbo_triton.plugin")
    data = tmp_path / "data"
    assert main(["bench", "sparse-mla", "--quick", "--record", str(data)]) == 0
    rows = dataset.load(data)
    tol = suite.tolerance_of(torch.bfloat16)
    providers = {r["provider"] for r in rows}
    assert {"sdpa:masked", "turbo:TORCH"} <= providers
    if no_triton is None:
        assert "turbo:TRITON" in providers
    base = {r["pass"]: r for r in rows if r["provider"] == "sdpa:masked"}
    for r in rows:
        assert r["suite"] == "sparse-mla" and r["status"] == "ok", r
        assert 0 <= r["max_rel_err"] < tol and r["tolerance"] == tol
        assert r["tflops"] == pytest.approx(r["flops"] / r["median_ms"] / 1e9)
        b = base[r["pass"]]
        assert r["ratio"] == pytest.approx(b["median_ms"] / r["median_ms"])
        assert r["wall_ratio"] == pytest.approx(b["wall_ms"] / r["wall_ms"])
        assert r["wall_p10_ms"] <= r["wall_ms"] <= r["wall_p90_ms"]
    page = tmp_path / "perf.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page), "--no-plots"]) == 0
    text = page.read_text()
    assert "### `sparse-mla` on cpu" in text and "| tiny/bwd t32 h2 top16 d24/16 |" in text


def test_pass_option(capsys):
    assert main(["bench", "sparse-mla", "--quick", "--passes", "dgrad"]) == 2
    assert "--passes: sparse-mla has no pass dgrad (it has fwd, bwd)" in " ".join(capsys.readouterr().err.split())
    rows = suite.run(quick=True, tokens=20, models=None, providers=["turbo:TORCH"], include_reference=True,
                     warmup=0, iters=1, device="cpu", passes=["bwd"])
    assert [(r["pass"], r["provider"], r["tokens"], r["status"]) for r in rows] == [("bwd", "turbo:TORCH", 20, "ok")]
