"""How the async tensor-parallel ops choose ``num_splits`` and the chunk order
(``turbo_core.ops.async_tp.plan``): given, tuned in turbo's tuning database, else the heuristic.

- ``async_tp_plan`` gives the documented heuristic per op, transport and world size, and a given
  ``num_splits`` / ``order`` as given;
- a choice recorded with ``record_choice`` is found for its key and for the other shapes of its
  shape bucket (not for another transport or layout), is saved to ``TURBO_TUNING_DB`` and read back
  by a fresh load; a malformed stored config is reported and the heuristic used;
- on two gloo ranks, an op called with ``num_splits=None`` runs with the tuned choice (the pipeline's
  arguments, seen by a spy) and still matches float64 math.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
import torch.distributed as dist
from ranks_harness import run_ranks

from turbo_core import tuning
from turbo_core.ops import async_tp_plan
from turbo_core.ops.async_tp import plan as P
from turbo_core.testing import assert_close_to_reference

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh_db():
    tuning.reset()
    yield
    tuning.reset()


def _plan(op="fused_all_gather_matmul", transport="nccl", world=2, **kw):
    args = {"m": 8192, "n": 1280, "k": 8192, "world": world, "dtype": torch.bfloat16, "device": CPU,
            "transport_name": transport} | kw
    return async_tp_plan(op, **args)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_heuristic_table(world):
    splits = max(1, 4 // world)
    assert _plan(world=world, transport="symm")[:3] == (splits, "rank", "heuristic")
    assert _plan("fused_matmul_reduce_scatter", world=world, transport="symm")[:3] == (splits, "split", "heuristic")
    for op in P.OPS:
        assert _plan(op, world=world, transport="nccl")[:3] == (2, "split", "heuristic")
    assert _plan(world=world, transport="symm", order="split")[:3] == (splits, "split", "heuristic")


def test_a_given_choice_is_kept():
    assert _plan(num_splits=3)[:3] == (3, "split", "given")  # the heuristic's order for nccl
    assert _plan(num_splits=3, transport="symm")[:3] == (3, "rank", "given")
    assert _plan(num_splits=1, order="rank", transport="symm").transport == "symm"


def test_bad_plan_arguments_are_named():
    cases = [(dict(op="gemm"), "op: expected one of"), (dict(transport="ib"), "transport_name: expected one of"),
             (dict(order="zigzag"), "order: expected None or one of"), (dict(num_splits=0), "num_splits"),
             (dict(world=0), "world")]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            _plan(**kw)
    key = P.key_of("fused_matmul_reduce_scatter", device=CPU, m=8, n=8, k=8, world=2, dtype=torch.float32,
                   out_dtype=torch.float32, layout="NT", transport="nccl")
    with pytest.raises(ValueError, match="op: expected one of"):
        P.record_choice("gemm", key, 2, "rank")
    with pytest.raises(ValueError, match="order: expected one of"):
        P.record_choice("fused_matmul_reduce_scatter", key, 2, "zigzag")


def test_a_tuned_choice_is_found_saved_and_read_back(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    monkeypatch.setenv(tuning.ENV_DB, str(path))
    tuning.reset()
    op = "fused_matmul_reduce_scatter"
    key = P.key_of(op, device=CPU, m=8192, n=8192, k=1024, world=8, dtype=torch.bfloat16, out_dtype=torch.bfloat16,
                   layout="NT", transport="symm")
    P.record_choice(op, key, 4, "rank", time_us=410.0, heuristic_time_us=455.5)
    got = _plan(op, m=8192, n=8192, k=1024, world=8, transport="symm")
    assert got == P.Plan(4, "rank", "tuned", "symm", None)
    assert _plan(op, m=6000, n=8192, k=1000, world=8, transport="symm")[:3] == (4, "rank", "tuned")  # its bucket
    assert _plan(op, m=6000, n=8192, k=1000, world=8, transport="symm", order="split")[:3] == (4, "split", "tuned")
    assert _plan(op, m=8192, n=8192, k=1024, world=8, transport="nccl").source == "heuristic"
    assert _plan(op, m=8192, n=8192, k=1024, world=8, transport="symm", layout="NN").source == "heuristic"
    assert _plan(op, m=8192, n=8192, k=1024, world=4, transport="symm").source == "heuristic"
    assert tuning.save() == str(path)
    saved = json.loads(path.read_text())["entries"]
    assert [(e["primitive"], e["configs"]["ASYNC_TP"]["config"]) for e in saved] == \
        [(op, {"num_splits": 4, "order": "rank"})]
    assert saved[0]["configs"]["ASYNC_TP"]["time_us"] == 410.0
    tuning.reset()  # a fresh load reads the file
    assert _plan(op, m=8192, n=8192, k=1024, world=8, transport="symm")[:3] == (4, "rank", "tuned")


def test_a_malformed_tuned_config_is_reported_and_the_heuristic_used(tmp_path, monkeypatch, caplog):
    op = "fused_all_gather_matmul"
    key = P.key_of(op, device=CPU, m=8192, n=1280, k=8192, world=2, dtype=torch.bfloat16, out_dtype=torch.bfloat16,
                   layout="NT", transport="nccl")
    entry = tuning.Entry(op, key, configs={P.TUNER: tuning.ConfigChoice(key, {"num_splits": 2, "order": "zigzag"})})
    path = tmp_path / "bad.json"
    tuning.TuningDB([entry]).save(path)
    monkeypatch.setenv(tuning.ENV_DB, str(path))
    tuning.reset()
    with caplog.at_level(logging.WARNING, logger="turbo"):
        got = _plan(op)
    assert got[:3] == (2, "split", "heuristic")
    assert "ignoring a tuned async-TP config (the heuristic choice is used): order" in caplog.text


def _check_tuned_ops(rank: int, world: int, dev: torch.device) -> None:
    import turbo_core.ops.async_tp.ag_matmul as ag
    import turbo_core.ops.async_tp.ag_scaled_matmul as ags
    import turbo_core.ops.async_tp.mm_reduce_scatter as rs
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.ops import fused_all_gather_matmul, fused_all_gather_scaled_matmul, fused_matmul_reduce_scatter

    seen = []

    def spy(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kw):
            seen.append((kw["num_splits"], kw["order"], kw["transport_name"]))
            return real(*args, **kw)
        setattr(module, name, wrapper)

    spy(ag, "all_gather_chunks")
    spy(ags, "all_gather_chunks")
    spy(rs, "reduce_scatter_chunks")
    group = dist.group.WORLD
    g = torch.Generator().manual_seed(7)
    shards = [torch.randn(6, 16, generator=g) for _ in range(world)]
    w = torch.randn(5, 16, generator=g)
    common = {"device": dev, "world": world, "transport": "nccl"}
    P.record_choice("fused_all_gather_matmul", P.key_of("fused_all_gather_matmul", m=6 * world, n=5, k=16,
                                                        dtype=torch.float32, out_dtype=torch.float32, layout="NT",
                                                        **common), 3, "rank")
    _, (c,) = fused_all_gather_matmul(shards[rank], [w], ["NT"], 0, group)
    assert_close_to_reference(c, torch.cat(shards).double() @ w.double().t(), dtype=torch.float32)
    P.record_choice("fused_matmul_reduce_scatter", P.key_of("fused_matmul_reduce_scatter", m=6, n=5, k=16,
                                                            dtype=torch.float32, out_dtype=torch.float32,
                                                            layout="NT", **common), 1, "rank")
    out = fused_matmul_reduce_scatter(shards[rank], w, "NT", "sum", 0, group)
    per = 6 // world
    want = sum(s.double() for s in shards)[rank * per:(rank + 1) * per] @ w.double().t()
    assert_close_to_reference(out, want, dtype=torch.float32)
    want = [(3, "rank", "nccl"), (1, "rank", "nccl")]
    if getattr(torch, "float8_e4m3fn", None) is not None:
        want.append((2, "rank", "nccl"))
        P.record_choice("fused_all_gather_scaled_matmul",
                        P.key_of("fused_all_gather_scaled_matmul", m=6 * world, n=5, k=16, dtype=torch.float8_e4m3fn,
                                 out_dtype=torch.bfloat16, layout="NT/rowwise", **common), 2, "rank")
        fused_all_gather_scaled_matmul(shards[rank], [w.to(torch.float8_e4m3fn)], ["NT"], None, [torch.ones(5, 1)],
                                       0, group, A_quant_config=Float8QuantConfig(granularity=ScalingGranularity.ROWWISE))
    assert seen == want


@pytest.mark.distributed
def test_ops_run_with_the_tuned_choice(tmp_path):
    run_ranks(_check_tuned_ops, 2, tmp_path)
