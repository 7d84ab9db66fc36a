"""``turbo bench moe-dispatch --quick`` with turbo-deepep installed: two gloo processes, every case
timed for the raw all-to-all baseline and for DEEP_EP, the round trip checked (the suite's rows are
the product: this checks that they are complete and consistent, not how fast the CPU is)."""

from __future__ import annotations

import json

import pytest
import torch

from turbo_core.bench.suites import moe_dispatch
from turbo_core.cli.main import main


@pytest.mark.distributed
def test_quick_rows_are_complete_and_consistent(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["bench", "moe-dispatch", "--quick", "--out", str(out)]) == 0
    assert "turbo bench moe-dispatch" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    ran = [r for r in rows if r["status"] == "ok"]
    fp8 = getattr(torch, "float8_e4m3fn", None) is not None
    # (dispatch bf16, combine bf16[, dispatch fp8]) x (exact, worst, worst back to back)
    per_provider = (2 + (1 if fp8 else 0)) * 3
    for provider in (moe_dispatch.BASELINE, "turbo:DEEP_EP"):
        mine = [r for r in ran if r["provider"] == provider]
        assert len(mine) == per_provider, (provider, [r["case"] for r in mine])
        for r in mine:
            assert r["world"] == 2 and r["median_ms"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
            assert r["gbps"] == pytest.approx(r["bytes"] / r["median_ms"] / 1e6)
    for r in ran:
        if r["provider"] == "turbo:DEEP_EP":
            base = next(b for b in ran if b["provider"] == moe_dispatch.BASELINE and b["case"] == r["case"])
            assert r["ratio"] == pytest.approx(base["median_ms"] / r["median_ms"])
            assert r["bytes"] == base["bytes"]
            if r["pass"].startswith("combine"):  # x * (ranks the token went to), summed in float64 on the CPU: exact
                assert r["max_rel_err"] == 0.0
    # a bf16 row is H * 2 bytes, an fp8 row H + (H / 128) * 4
    h = moe_dispatch.QUICK.hidden
    sample = {(r["dtype"], r["pass"], r["mode"]): r for r in ran if r["provider"] == moe_dispatch.BASELINE}
    exact = sample[("bf16", "dispatch", "exact")]
    b2b = sample[("bf16", "dispatch (back to back)", "worst-b2b")]  # the worst mode's slots, batched calls
    assert b2b["bytes"] == sample[("bf16", "dispatch", "worst")]["bytes"]
    assert exact["bytes"] % (2 * h) == 0
    if fp8:
        assert sample[("fp8", "dispatch", "exact")]["bytes"] * 2 * h == exact["bytes"] * (h + h // 128 * 4)


def test_unknown_provider_and_model_are_named():
    with pytest.raises(ValueError, match="no moe_dispatch backend NOPE"):
        moe_dispatch.run(quick=True, tokens=None, models=None, providers=["turbo:NOPE"], include_reference=False,
                         warmup=1, iters=1, device="cpu")
    with pytest.raises(ValueError, match="moe-dispatch has deepseek-v3"):
        moe_dispatch._models(False, ["llama"])
