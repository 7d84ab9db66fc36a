"""``turbo bench moe``'s fused-layer cases (``turbo_core.bench.suites.moe_mega``): the case list and
FLOP counts worked out by hand, a quick CPU run through the suite (the eager loop and turbo:TORCH
measured, torch.compile skipped with its reason) whose rows match float64 math, the table and the
report's own tables for them."""

from __future__ import annotations

import pytest
import torch
from rich.console import Console

from turbo_core.bench import dataset
from turbo_core.bench.suites import moe, moe_mega
from turbo_core.cli import main


def test_cases_and_flops_by_hand():
    cs = moe_mega.cases(None, False, None)
    assert [(c.model, c.pass_, c.tokens) for c in cs] == [
        (m, p, 4096) for m in ("mixtral-8x7b", "deepseek-v2-lite", "deepseek-v3-ep8-rank") for p in ("fwd", "fwd+bwd")]
    assert len({c.label for c in cs}) == len(cs)
    c = cs[4]  # DeepSeek-V3 rank, forward: 4096 x 8 routed pairs; L1 [H=7168 to 2I=4096], L2 [I=2048 to H=7168]
    assert c.label == "fused_mega_moe/fwd deepseek-v3-ep8-rank 4096x7168"
    assert moe_mega.flops(c) == 2 * 32768 * 7168 * 4096 + 2 * 32768 * 2048 * 7168
    assert moe_mega.flops(cs[5]) == 3 * moe_mega.flops(c)
    assert [c.tokens for c in moe_mega.cases(512, False, ["mixtral-8x7b"])] == [512, 512]
    assert {c.model for c in moe_mega.cases(None, True, None)} == {"tiny-layer"}


def test_quick_run_rows_table_and_report(tmp_path):
    data = tmp_path / "data"
    assert main(["bench", "moe", "--quick", "--include-reference", "--models", "tiny-layer", "--providers", "torch",
                 "torch.compile", "turbo:TORCH", "--record", str(data)]) == 0
    rows = dataset.load(data)
    assert {(r["pass"], r["provider"]) for r in rows} == {(p, n) for p in moe_mega.PASSES
                                                          for n in ("torch", "torch.compile", "turbo:TORCH")}
    by_case = {c.label: c for c in moe_mega.cases(None, True, None)}
    for r in rows:
        assert r["op"] == "fused_mega_moe" and r["mode"] == moe_mega.MODE and r["timing"] == moe_mega.WALL, r
        if r["provider"] == "torch.compile":
            assert r["status"].startswith("skipped: torch.compile is timed on GPUs only"), r
            continue
        assert r["status"] == "ok", r
        assert r["tflops"] == pytest.approx(moe_mega.flops(by_case[r["case"]]) / r["median_ms"] / 1e9)
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["max_rel_err"] < 2e-2, r  # bf16 against float64 (the output, and the gradients for fwd+bwd)
        if r["provider"] == "turbo:TORCH":
            base = next(b for b in rows if b["case"] == r["case"] and b["provider"] == "torch")
            assert r["ratio"] == pytest.approx(base["median_ms"] / r["median_ms"])

    console = Console(record=True, width=200)
    moe.print_table(rows, console)
    text = console.export_text()
    assert "turbo bench moe fused layer: TFLOP/s" in text and "fused_mega_moe/fwd+bwd tiny-layer 24x64" in text

    page_path = tmp_path / "perf.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page_path), "--no-plots"]) == 0
    page = page_path.read_text()
    assert "#### fwd+bwd" in page and page.count("##### fused layer · wall clock") == 2
    assert "`turbo:TORCH` vs `torch`" in page


def test_a_wrong_output_is_seen():
    """The accuracy column compares with the float64 loop: a provider off by 1% shows it."""
    case = moe_mega.cases(None, True, None)[0]
    inputs = moe_mega.make_inputs(case, "cpu", torch.Generator().manual_seed(0))
    ref = moe_mega._step(moe_mega.mega_moe_reference, inputs, torch.float64, False)()
    good = moe_mega._step(moe_mega._turbo("TORCH"), inputs, torch.float32, False)()
    bad = moe_mega._step(lambda *a: moe_mega._turbo("TORCH")(*a) * 1.01, inputs, torch.float32, False)()
    assert moe_mega.max_rel_err(good[0], ref[0]) < 1e-4 < 5e-3 < moe_mega.max_rel_err(bad[0], ref[0])
