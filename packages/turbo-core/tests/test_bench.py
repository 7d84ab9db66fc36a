"""``turbo bench --quick`` on the CPU: every provider runs, rows carry the documented keys, the
accuracy column is real, and the JSON file holds the run's provenance and a summary."""

import json

import pytest
import torch

from turbo_core import timing
from turbo_core.bench import compare, console
from turbo_core.bench.suites import norm, quant
from turbo_core.cli import main


def test_quick_gemm_suite_writes_rows(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "gemm", "--quick", "--include-reference", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["run"]["device"] == "cpu" and data["run"]["versions"]["torch"] == torch.__version__
    rows = data["rows"]
    providers = {r["provider"] for r in rows}
    assert providers == {"torch", "turbo:TORCH"}  # conftest limits discovery to turbo-core's own plugin
    assert len(rows) == 2 * 6  # 2 tiny layers x 3 passes x 2 providers
    for r in rows:
        assert r["status"] == "ok", r
        assert r["median_ms"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["max_rel_err"] < 1e-2  # bf16 against float64
        assert r["ratio"] > 0 and (r["provider"] != "torch" or r["ratio"] == 1.0)
    assert {(s["provider"], s["pass"]) for s in data["summary"]} == {
        ("turbo:TORCH", "fwd"), ("turbo:TORCH", "dgrad"), ("turbo:TORCH", "wgrad")}
    assert "geomean ratio to torch" in capsys.readouterr().out


def test_rounds_time_each_provider_in_turn(tmp_path, monkeypatch, capsys):
    """--rounds 3: every provider of a case is timed three times, interleaved (A B, A B, A B), and the
    row reports the median of its rounds."""
    from turbo_core.bench import runner

    order = []
    real = timing.measure

    def spy(fn, sets, **kw):
        order.append(len(order))
        return real(fn, sets, **kw)

    monkeypatch.setattr(timing, "measure", spy)
    monkeypatch.setattr(runner, "ROUNDS", 1)
    out = tmp_path / "r.json"
    assert main(["bench", "gemm", "--quick", "--include-reference", "--rounds", "3", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert all(r["rounds"] == 3 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] for r in rows)
    assert len(order) == 3 * len(rows)  # 6 cases x 2 providers x 3 rounds
    assert main(["bench", "gemm", "--quick", "--rounds", "0"]) == 2
    assert "--rounds: expected a count >= 1" in capsys.readouterr().err


def test_provider_filter_and_reference_excluded_by_default(tmp_path):
    out = tmp_path / "b.json"
    main(["bench", "--quick", "--out", str(out)])
    assert {r["provider"] for r in json.loads(out.read_text())["rows"]} == {"torch"}


def test_geomean():
    assert abs(compare.geomean([2.0, 8.0]) - 4.0) < 1e-12
    assert compare.geomean([]) is None


@pytest.mark.parametrize("suite", ["norm", "activation"])
def test_quick_memory_bound_suite(tmp_path, suite):
    out = tmp_path / "b.json"
    assert main(["bench", suite, "--quick", "--include-reference", "--providers", "torch", "turbo:TORCH",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert {r["provider"] for r in rows} == {"torch", "turbo:TORCH"}
    assert {r["pass"] for r in rows} == {"fwd", "bwd"}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["gbps"] > 0 and r["copy_gbps"] > 0 and r["copy_fraction"] > 0
        assert r["bytes"] > 0 and r["max_rel_err"] < 1e-2
    assert {s["provider"] for s in data["summary"]} == {"turbo:TORCH"}


def test_quick_grouped_gemm_suite(tmp_path):
    out = tmp_path / "g.json"
    assert main(["bench", "grouped_gemm", "--quick", "--include-reference", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["provider"] for r in rows} == {"torch", "turbo:TORCH"}
    assert len(rows) == 2 * 2 * 3 * 2  # 2 tiny layers x balanced/skewed x 3 passes x 2 providers
    for r in rows:
        assert r["status"] == "ok", r
        assert r["max_rel_err"] < 1e-2 and r["m"] == sum(r["group_lens"])
    assert {r["balance"] for r in rows} == {"balanced", "skewed"}
    assert all(0 in r["group_lens"] for r in rows if r["balance"] == "skewed")


def test_summary_scores_providers_not_their_baselines():
    # Two FP8 cases of one granularity: the turbo rows are scored against the FP8 baseline and bf16;
    # the baseline only against bf16; the bf16 reference not at all. Old rows (no role) keep "torch".
    def row(provider, role, ratio, bf16, gran="ROWWISE"):
        return {"suite": "s", "provider": provider, "pass": "fwd", "granularity": gran, "status": "ok",
                "role": role, "ratio": ratio, "bf16_ratio": bf16}

    rows = [row("bf16:torch.matmul", "bf16", None, 1.0), row("torch._scaled_mm", "baseline", 1.0, 1.5),
            row("turbo:X", "turbo", 2.0, 3.0), row("turbo:X", "turbo", 0.5, 0.75),
            {**row("turbo:X", "turbo", 9.0, 9.0), "status": "declined: no"},
            {"suite": "g", "provider": "torch", "pass": "fwd", "status": "ok", "ratio": 1.0},
            {"suite": "g", "provider": "turbo:X", "pass": "fwd", "status": "ok", "ratio": 4.0}]
    got = {(s["suite"], s["provider"]): s for s in console.summary(rows)}
    assert set(got) == {("s", "torch._scaled_mm"), ("s", "turbo:X"), ("g", "turbo:X")}
    assert got[("s", "turbo:X")]["cases"] == 2 and got[("s", "turbo:X")]["granularity"] == "ROWWISE"
    assert abs(got[("s", "turbo:X")]["geomean_ratio"] - 1.0) < 1e-12
    assert abs(got[("s", "turbo:X")]["geomean_bf16_ratio"] - 1.5) < 1e-12
    assert got[("s", "torch._scaled_mm")]["geomean_ratio"] is None
    assert got[("s", "torch._scaled_mm")]["geomean_bf16_ratio"] == 1.5
    assert got[("g", "turbo:X")] == {"suite": "g", "provider": "turbo:X", "pass": "fwd", "cases": 1,
                                     "geomean_ratio": 4.0}


def test_quick_quant_suite(tmp_path):
    out = tmp_path / "q.json"
    assert main(["bench", "quant", "--quick", "--include-reference", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["provider"] for r in rows} == {"torch", "torch.compile", "turbo:TORCH"}
    assert {r["pass"] for r in rows} == {"quantize", "with_trans", "dequantize"}
    assert {r["op"] for r in rows} >= {"tensorwise", "rowwise", "blockwise-1x128", "blockwise-128x128", "mx"}
    if quant.FP4 is not None:
        assert {r["op"] for r in rows} >= {"mxfp4", "mxfp4-col"}
    compiled = [r for r in rows if r["provider"] == "torch.compile"]  # not timed on the CPU, and says why
    assert compiled and all(r["status"] == "skipped: " + norm.compile_skip_reason("cpu") for r in compiled)
    for r in (r for r in rows if r["provider"] != "torch.compile"):
        assert r["status"] == "ok", r
        assert r["gbps"] > 0 and r["bytes"] > 2 * 32 * 256  # the bf16 input read once, and the outputs
        assert r["max_rel_err"] == 0.0  # the same kernel as the reference: bit-identical outputs


def test_quant_suite_accuracy_sees_a_wrong_kernel(monkeypatch):
    """The accuracy column compares every output with the reference's: a wrong scale shows."""

    case = next(c for c in quant.cases(None, True, None) if c.op == "rowwise" and c.pass_ == "quantize")
    gen = torch.Generator().manual_seed(0)
    inputs = quant.make_inputs(case, "cpu", gen)
    refs = quant.reference(case, inputs)
    q, s = quant.torch_provider(case, False)(inputs)()
    from turbo_core.bench.suites.norm import _max_rel_err

    assert _max_rel_err([q, s], refs) == 0.0
    assert _max_rel_err([q, s * 1.01], refs) > 5e-3


def test_quick_host_suite_times_every_op_beside_its_torch_call(tmp_path):
    out = tmp_path / "h.json"
    assert main(["bench", "host", "--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    from turbo_core.bench.suites import host

    assert [(r["op"], r["provider"]) for r in rows] == [(c.op, p) for c in host.CASES for p in ("torch", "turbo:auto")]
    served = {"gemm": "gemm", "gemm_fp8": "gemm_fp8", "flash_attn_func": "attention_fwd", "grouped_gemm": "grouped_gemm",
              "rmsnorm": "rmsnorm_fwd", "swiglu": "swiglu_fwd", "linear_fp8": "gemm_fp8"}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["us_per_call"] == pytest.approx(r["median_ms"] * 1e3) and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["calls"] == host.QUICK_CALLS and r["tokens"] == host.TOKENS
        if r["provider"] == "torch":
            assert r["ratio"] == 1.0 and r["max_rel_err"] == 0.0
        else:  # the same result as torch's call on the same inputs (bf16 rounding; FP8 quantization alike)
            assert r["max_rel_err"] < 0.05, r
            assert f"{served[r['op']]}:TORCH" in r["kernels"].split(", "), r
    step = next(r for r in rows if r["op"] == "linear_fp8" and r["provider"] == "turbo:auto")
    assert "gemm_fp8:TORCH" in step["kernels"] and step["pass"] == "fwd+bwd"
