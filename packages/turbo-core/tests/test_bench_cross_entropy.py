"""``turbo_core.bench.suites.cross_entropy`` (the ``cross-entropy`` suite), called directly: the cases
and byte counts by hand, a quick CPU run (eager torch and turbo:TORCH measured against float64 math,
torch.compile skipped with its reason, liger declined where it is not importable), liger through a
fake ``liger_kernel`` that, like the real one, writes over the logits it is given (the suite must
hand it private copies), the table, and the performance report's tables for the rows."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from turbo_core.bench import dataset
from turbo_core.bench.markdown import write_performance
from turbo_core.bench.suites import cross_entropy as ce

_RUN = dict(quick=True, tokens=None, models=None, include_reference=True, warmup=1, iters=2, device="cpu")


def test_cases_and_bytes_by_hand():
    cs = ce.cases(None, False, None)
    assert [(c.model, c.vocab, c.tokens, c.pass_) for c in cs] == [
        (m, v, 8192, p) for m, v in (("llama3.1-8b", 128256), ("qwen3", 151936), ("mixtral-8x7b", 32000))
        for p in ("fwd", "fwd+bwd")]
    assert cs[0].label == "cross_entropy/fwd llama3.1-8b 8192x128256"
    assert ce.logits_bytes(cs[0]) == 8192 * 128256 * 2 and ce.logits_bytes(cs[1]) == 3 * 8192 * 128256 * 2
    assert [c.tokens for c in ce.cases(4096, False, ["qwen3"])] == [4096, 4096]
    assert {(c.model, c.vocab, c.tokens) for c in ce.cases(None, True, None)} == {("tiny", 1000, 32)}


def test_quick_cpu_run_rows_table_and_report(tmp_path):
    rows = ce.run(providers=None, **_RUN)
    assert {(r["pass"], r["provider"]) for r in rows} == {(p, n) for p in ce.PASSES
                                                          for n in ("torch", "torch.compile", "turbo:TORCH", "liger")}
    for r in rows:
        assert r["suite"] == "cross-entropy" and r["op"] == "cross_entropy" and r["timing"] == ce.WALL, r
        if r["provider"] == "torch.compile":
            assert r["status"].startswith("skipped: torch.compile is timed on GPUs only"), r
            continue
        if r["provider"] == "liger":
            assert r["status"].startswith("declined: liger-kernel not importable"), r
            continue
        assert r["status"] == "ok", r
        assert r["gbps"] == pytest.approx(r["bytes"] / r["median_ms"] / 1e6)
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] and r["peak_bytes"] is None  # (GPUs only)
        # fwd: the fp32 loss; fwd+bwd: also the bf16 gradient (one rounding: 2**-9 of max|ref|)
        assert r["max_rel_err"] < (1e-6 if r["pass"] == "fwd" else 4e-3), r
    turbo = next(r for r in rows if r["provider"] == "turbo:TORCH" and r["pass"] == "fwd")
    base = next(r for r in rows if r["provider"] == "torch" and r["pass"] == "fwd")
    assert turbo["ratio"] == pytest.approx(base["median_ms"] / turbo["median_ms"])

    console = Console(record=True, width=220)
    ce.print_table(rows, console)
    text = console.export_text()
    assert "turbo bench cross-entropy: GB/s" in text and "cross_entropy/fwd+bwd tiny 32x1000" in text

    data = tmp_path / "data"
    dataset.append(rows, dataset.provenance("cpu", "turbo bench cross-entropy --quick"), data)
    page = tmp_path / "perf.md"
    write_performance(data, page, plots_wanted=False)
    text = page.read_text()
    assert "`cross-entropy` on cpu" in text and "#### fwd+bwd" in text and "`turbo:TORCH` vs `torch`" in text


def test_the_accuracy_column_sees_a_wrong_loss():
    case = ce.cases(None, True, None)[1]
    logits, target = ce.make_inputs(case, "cpu", torch.Generator().manual_seed(0))
    outs = ce._step(ce.torch_loss, logits, target, True)()
    assert ce._error(outs, logits, target) < 4e-3
    assert ce._error([outs[0] * 1.01, outs[1]], logits, target) > 5e-3
    assert ce._error([outs[0], outs[1] * 1.05], logits, target) > 2e-2


class _FakeLigerLoss(torch.nn.Module):
    """liger-kernel's ``LigerCrossEntropyLoss``'s call, in plain torch; like the real one it writes
    over the logits it is given (NaN here, after reading them), so a suite that timed it on shared
    logits would read NaN on its accuracy call."""

    calls = 0

    def forward(self, logits, target):
        type(self).calls += 1
        loss = F.cross_entropy(logits.float(), target)
        logits.data.fill_(float("nan"))
        return loss


@pytest.fixture
def fake_liger(monkeypatch):
    _FakeLigerLoss.calls = 0
    pkg = types.ModuleType("liger_kernel")
    pkg.__version__ = "0.0-fake"
    pkg.__path__ = []
    transformers = types.ModuleType("liger_kernel.transformers")
    transformers.LigerCrossEntropyLoss = _FakeLigerLoss
    pkg.transformers = transformers
    monkeypatch.setitem(sys.modules, "liger_kernel", pkg)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", transformers)


def test_liger_runs_on_private_copies_of_the_logits(fake_liger):
    rows = ce.run(providers=["torch", "liger"], **_RUN)
    liger = [r for r in rows if r["provider"] == "liger"]
    assert len(liger) == 2 and _FakeLigerLoss.calls >= 2 * (2 + 1 + 2)  # warm-up, accuracy, timed calls
    for r in liger:
        assert r["status"] == "ok" and r["max_rel_err"] < 4e-3, r
        assert r["note"].startswith("liger-kernel 0.0-fake: LigerCrossEntropyLoss()")
    assert all(r["status"] == "ok" and r["max_rel_err"] < 4e-3 for r in rows if r["provider"] == "torch")
