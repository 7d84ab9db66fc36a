"""``turbo bench async-tp`` on the CPU: two gloo ranks started by the suite; every case (bf16
all-gather and reduce-scatter, FP8 quantize-once all-gather at both granularities) timed for the
unfused baseline, the op's own choice and every tuning candidate, each checked against float64 math;
PyTorch's symmetric-memory ops say why they do not run; the fastest candidates land in the tuning
database named by ``TURBO_TUNING_DB``, where the op's planner then finds them. One device gives rows
that say why nothing ran. On two GPUs (marked gpu): the same quick run, on the symmetric-memory
transport, with PyTorch's fused ops measured too (or their rows saying how they failed)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from ranks_harness import needs_two_gpus

from turbo_core import tuning
from turbo_core.bench.suites import async_tp
from turbo_core.ops import async_tp_plan


def _run(**kw):
    args = {"quick": True, "tokens": None, "models": None, "providers": None, "include_reference": False,
            "warmup": 1, "iters": 2, "device": "cpu"} | kw
    return async_tp.run(**args)


def _check_rows(rows, *, transport: str, torch_symm_runs: bool) -> None:
    cases = {r["case"] for r in rows}
    assert len(cases) == 8  # qkv, gate_up (bf16, FP8 tensorwise, FP8 rowwise), o, down
    assert len(rows) == 8 * len(async_tp.PROVIDERS)
    assert {r["pass"] for r in rows} == set(async_tp.PASSES)
    for r in rows:
        assert r["world"] == 2 and r["transport"] == transport, r
        assert (r["transport_reason"] is None) == (transport == "symm"), r
        if r["provider"] == async_tp.TORCH_SYMM:
            if not torch_symm_runs:
                assert r["status"].startswith("skipped: torch.ops.symm_mem's fused ops run on CUDA GPUs"), r
                continue
            if r["status"] != "ok":  # PyTorch's op: where it fails, the row says how
                assert r["status"].startswith("error: ") and len(r["status"]) > 10, r
                continue
        assert r["status"] == "ok", r
        assert r["tflops"] > 0 and r["median_ms"] > 0 and r["comm_ms"] > 0 and r["gemm_ms"] > 0, r
        assert r["overlap"] == pytest.approx((r["comm_ms"] + r["gemm_ms"] - r["median_ms"])
                                             / min(r["comm_ms"], r["gemm_ms"]))
        # one bf16 GEMM (and a bf16 sum over two ranks); FP8: against float64 of the quantized operands
        assert r["max_rel_err"] < 1e-2, r
        if r["provider"] == async_tp.BASELINE:
            assert r["ratio"] == 1.0
        if r["provider"].startswith(async_tp.TURBO):
            assert r["splits"] >= 1 and r["order"] in ("rank", "split"), r
            assert r["plan"] == ("heuristic" if r["provider"] == async_tp.TURBO else "given"), r
    for case in cases:
        best = [r for r in rows if r["case"] == case and r.get("best")]
        assert len(best) == 1 and best[0]["provider"] in async_tp.CANDIDATE_NAMES
        timed = [r["median_ms"] for r in rows if r["case"] == case and r["provider"] in async_tp.CANDIDATE_NAMES]
        assert best[0]["median_ms"] == min(timed)


@pytest.mark.distributed
def test_quick_suite_over_gloo_records_the_tuned_choices(tmp_path, monkeypatch):
    db = tmp_path / "async_tp.json"
    monkeypatch.setenv(tuning.ENV_DB, str(db))
    tuning.reset()
    rows = _run()
    _check_rows(rows, transport="nccl", torch_symm_runs=False)
    best = [r for r in rows if r.get("best")]
    assert all(r["tuning_db"] == str(db) for r in best)
    entries = json.loads(db.read_text())["entries"]
    assert len(entries) == len(best)
    tuning.reset()  # what a later process reads
    for r in best:
        got = async_tp_plan(r["tune_op"], m=r["m"], n=r["n"], k=r["k"], world=2, device="cpu",
                            transport_name="nccl", dtype=_dtype(r), out_dtype=torch.bfloat16,
                            layout=r["tune_key"]["layout"].rsplit("/", 1)[0])
        assert (got.num_splits, got.order, got.source) == (r["splits"], r["order"], "tuned"), r["case"]


def _dtype(row) -> torch.dtype:
    return torch.float8_e4m3fn if row["pass"] == "ag-mm-fp8" else torch.bfloat16


def test_one_device_rows_say_why():
    rows = _run(iters=1, world=1)
    assert rows and all(r["status"].startswith("skipped: needs 2 or more cpu devices") for r in rows)
    assert len(rows) == 8 * len(async_tp.PROVIDERS)


def test_unknown_names_are_named():
    with pytest.raises(ValueError, match="models: unknown nope"):
        _run(quick=False, models=["nope"], iters=1)
    with pytest.raises(ValueError, match="providers: unknown nope"):
        _run(providers=["nope"], iters=1)


@pytest.mark.gpu
@pytest.mark.distributed
@needs_two_gpus
def test_quick_suite_on_two_gpus(monkeypatch):
    if importlib.util.find_spec("turbo_triton") is None:
        pytest.skip("needs turbo-triton for the GEMMs on the GPU")
    monkeypatch.setenv("TURBO_PLUGINS", "turbo_core.reference.plugin,turbo_triton.plugin")
    rows = _run(device="cuda", world=2)
    _check_rows(rows, transport="symm", torch_symm_runs=True)
