"""``turbo bench async-tp`` on the CPU: two gloo ranks started by the suite, every case timed for the
unfused baseline and the fused op at 2 and 4 chunks, each checked against float64 math; one device
gives rows that say why nothing ran."""

from __future__ import annotations

import pytest

from turbo_core.bench.suites import async_tp


@pytest.mark.distributed
def test_quick_suite_over_gloo():
    rows = async_tp.run(quick=True, tokens=None, models=None, providers=None, include_reference=False, warmup=1,
                        iters=2, device="cpu")
    assert len(rows) == 4 * 3  # qkv, gate_up, o, down x (unfused, splits 2, splits 4)
    assert {r["pass"] for r in rows} == {"ag-mm", "mm-rs"}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["world"] == 2 and r["tflops"] > 0 and r["median_ms"] > 0
        assert r["max_rel_err"] < 1e-2, r  # one bf16 GEMM (and a bf16 sum over two ranks)
        if r["provider"] == async_tp.BASELINE:
            assert r["ratio"] == 1.0


def test_one_device_rows_say_why():
    rows = async_tp.run(quick=True, tokens=None, models=None, providers=None, include_reference=False, warmup=1,
                        iters=1, device="cpu", world=1)
    assert rows and all(r["status"].startswith("skipped: needs 2 or more cpu devices") for r in rows)


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="models: unknown nope"):
        async_tp.run(quick=False, tokens=None, models=["nope"], providers=None, include_reference=False, warmup=1,
                     iters=1, device="cpu")
