"""``turbo bench --quick`` on the CPU: every provider runs, rows carry the documented keys, the
accuracy column is real, and the JSON file holds the run's provenance and a summary."""

import json
import os
import subprocess
import sys

import pytest
import torch

from turbo_core import timing
from turbo_core.bench import compare, console, runner
from turbo_core.bench.suites import norm, quant
from turbo_core.bench.suites.norm import _max_rel_err
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


def test_provider_filter_and_reference_excluded_by_default(tmp_path, capsys):
    out = tmp_path / "b.json"
    # only the reference backend is installed here: no turbo provider runs, the run says so and exits 1
    assert main(["bench", "--quick", "--out", str(out)]) == 1
    assert {r["provider"] for r in json.loads(out.read_text())["rows"]} == {"torch"}
    captured = capsys.readouterr()
    assert "turbo bench: no turbo backend ran a case: none is installed besides the reference backend TORCH" in (
        " ".join(captured.err.split()))
    assert "no provider was compared with it" in captured.out  # no empty geomean table
    # asking for the baseline alone is not asking for a turbo provider
    assert main(["bench", "--quick", "--providers", "torch"]) == 0


def test_legend_explains_the_figures_of_the_cells(capsys):
    from rich.console import Console

    from turbo_core.bench.console import print_tables

    row = {"suite": "gemm", "case": "c", "pass": "fwd", "status": "ok", "tflops": 1.5, "max_rel_err": 2e-3}
    rows = [{**row, "provider": "torch", "role": "baseline"}, {**row, "provider": "turbo:X", "ratio": 1.25}]
    print_tables(rows, Console(width=80))
    out = capsys.readouterr().out
    # brackets printed, not read as markup (the title wraps to the table's width)
    assert "turbo bench: TFLOP/s (ratio to torch) [max rel err]" in " ".join(out.split())
    assert "1.5 (1.25x) [2.0e-03]" in out
    assert "(1.23x): the baseline's time / this provider's (above 1x: faster)" in out
    assert "[1.0e-03]: max|out - ref| / max|ref| against float64 math" in out


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


@pytest.mark.parametrize("model", ["tiny", "tiny-moe"])  # the dense variants; the grouped ones
def test_quick_quant_suite(tmp_path, monkeypatch, model):
    monkeypatch.setattr(timing, "ROTATE_BYTES", 1)  # one input set a case: rotating sets beyond L2 is for GPUs
    out = tmp_path / "q.json"
    assert main(["bench", "quant", "--quick", "--include-reference", "--models", model, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["provider"] for r in rows} == {"torch", "torch.compile", "turbo:TORCH"}
    assert {r["pass"] for r in rows} == {"quantize", "with_trans", "dequantize"}
    compiled = [r for r in rows if r["provider"] == "torch.compile"]  # not timed on the CPU, and says why
    assert compiled and all(r["status"] == "skipped: " + norm.compile_skip_reason("cpu") for r in compiled)
    for r in (r for r in rows if r["provider"] != "torch.compile"):
        assert r["status"] == "ok", r
        assert r["gbps"] > 0
        assert r["max_rel_err"] == 0.0  # the same kernel as the reference: bit-identical outputs
    if model == "tiny":
        assert {r["op"] for r in rows} >= {"tensorwise", "rowwise", "blockwise-1x128", "blockwise-128x128", "mx"}
        if quant.FP4 is not None:
            assert {r["op"] for r in rows} >= {"mxfp4", "mxfp4-col"}
        assert all("balance" not in r and r["bytes"] > 2 * 32 * 256 for r in rows)  # the bf16 input, the outputs
        return
    # every grouped variant, in tables of their own (balance), their groups in the rows
    want = {tuple(k.split("/")) for k, v in quant.GROUPED_VARIANTS.items() if quant.FP4 is not None or "fp4" not in v[0]}
    assert {(r["pass"], r["op"]) for r in rows} == want and len(rows) == 3 * len(want)
    for r in rows:
        assert r["balance"] == "skewed" and r["group_lens"] == [24, 0, 8] and r["groups"] == 3 and r["hidden"] == 32
        assert r["case"].endswith(" tiny-moe G3 32x32")


def test_grouped_quant_bytes_are_the_layouts_read_and_written():
    """By hand at model shapes; and at the quick shapes, the bytes of the reference kernel's
    inputs and outputs (every layout's padded data and scales, the int64 lens and offsets)."""
    fp8_mx_col = quant.grouped_bytes("grouped_quantize_fp8", quant.G.MX_BLOCKWISE, 32, 0, 16384, 7168, 32)
    m_c = 20480  # cdiv(16384 + 32 * 128, 128) * 128: each group padded to 128 rows
    assert fp8_mx_col == 2 * 16384 * 7168 + 8 * 65 + 7168 * m_c + 7168 * m_c // 32 + 8 * 65
    bw_row_dq = quant.grouped_bytes("grouped_dequantize_fp8", quant.G.BLOCKWISE, 128, 1, 16384, 7168, 8)
    assert bw_row_dq == 16384 * 7168 + 4 * 56 * 16384 + 2 * 8 * 9 + 2 * 16384 * 7168  # tight rows, scales [N/128, M]
    fp4_wt = quant.grouped_bytes("grouped_quantize_fp4_with_trans", quant.G.MX_BLOCKWISE, 32, None, 16384, 4096, 8)
    m_c = 20480  # cdiv(16384 + 8 * 512, 512) * 512
    assert fp4_wt == (2 * 16384 * 4096 + 8 * 17 + 16384 * 2048 + 16384 * 128 + 4096 * m_c // 2 + 4096 * m_c // 32
                      + 2 * 8 * 17)
    lens = quant.skewed_lens(16384, 32)
    assert sum(lens) == 16384 and lens[1] == 0 and lens.count(0) == 1
    assert lens[2:] == tuple(sorted(lens[2:], reverse=True)) and lens[0] > lens[2]
    gen = torch.Generator().manual_seed(0)
    for case in (c for c in quant.cases(None, True, None) if c.fields.get("balance")):
        inputs = quant.make_inputs(case, "cpu", gen)
        outs = quant.reference(case, inputs)  # float64 copies: count the element sizes of the real dtypes
        name, args = quant.turbo_args(case, inputs)
        real = getattr(quant.ref, name)(args)
        real = [real] if isinstance(real, torch.Tensor) else list(real)
        assert [o.shape for o in outs] == [r.shape for r in real]
        assert case.bytes == runner.tensor_bytes(inputs) + runner.tensor_bytes(real), case.label


def test_grouped_quant_accuracy_sees_a_wrong_output():
    case = next(c for c in quant.cases(None, True, None) if c.label.startswith("grouped-mx-col/quantize"))
    inputs = quant.make_inputs(case, "cpu", torch.Generator().manual_seed(0))
    refs = quant.reference(case, inputs)
    outs = quant.torch_provider(case, False)(inputs)()
    assert len(outs) == 4 and _max_rel_err(outs, refs) == 0.0  # q, scale_inv, padded lens and offsets
    assert _max_rel_err([*outs[:3], outs[3] + 1], refs) > 0  # offsets one row off
    scale = outs[1].view(torch.uint8).clone()
    scale[0, 0] += 1  # one block's exponent
    assert _max_rel_err([outs[0], scale.view(outs[1].dtype), *outs[2:]], refs) > 0


# A fresh process: the interpreter must be on before triton (and triton.language) is first imported. The
# grouped FP8 with_trans variants are left out: each of their calls takes seconds in the interpreter (the
# kernels are checked against the reference by turbo-triton's tests).
TRITON_GROUPED = """
import json
from turbo_core import timing
from turbo_core.bench.suites import quant
from turbo_core.bench.suites.norm import run_bandwidth
cases = [c for c in quant.cases(None, True, None)
         if c.fields.get("balance") and quant._spec(c)[0] != "grouped_quantize_fp8_with_trans"]
timing.ROTATE_BYTES = 1  # one input set a case: rotating sets beyond L2 is for GPUs
rows = run_bandwidth(quant, cases, providers=["turbo:TRITON"], include_reference=False, warmup=0, iters=1,
                     device="cpu", copy_gbps=1.0)
print("ROWS" + json.dumps(rows))
"""


def test_quick_grouped_quant_triton_rows_under_the_interpreter(tmp_path):
    pytest.importorskip("turbo_triton", reason="turbo-triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TURBO_PLUGINS": "turbo_triton.plugin"}
    done = subprocess.run([sys.executable, "-c", TRITON_GROUPED], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("ROWS"))[4:])
    assert {r["pass"] for r in rows} == {"quantize", "dequantize"} | ({"with_trans"} if quant.FP4 is not None else set())
    assert len(rows) == (17 if quant.FP4 is not None else 12)
    for r in rows:
        assert r["provider"] == "turbo:TRITON" and r["status"] == "ok", r
        assert r["max_rel_err"] == 0.0, r  # bit-identical to the reference kernel


def test_quant_suite_accuracy_sees_a_wrong_kernel(monkeypatch):
    """The accuracy column compares every output with the reference's: a wrong scale shows."""

    case = next(c for c in quant.cases(None, True, None) if c.op == "rowwise" and c.pass_ == "quantize")
    gen = torch.Generator().manual_seed(0)
    inputs = quant.make_inputs(case, "cpu", gen)
    refs = quant.reference(case, inputs)
    q, s = quant.torch_provider(case, False)(inputs)()
    assert _max_rel_err([q, s], refs) == 0.0
    assert _max_rel_err([q, s * 1.01], refs) > 5e-3


def test_quick_host_suite_times_every_op_beside_its_torch_call(tmp_path):
    out = tmp_path / "h.json"
    assert main(["bench", "host", "--quick", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    from turbo_core.bench.suites import host

    assert [(r["op"], r["provider"]) for r in rows] == [(c.op, p) for c in host.CASES for p in ("torch", "turbo:auto")]
    served = {"gemm": "gemm", "gemm_fp8": "gemm_fp8", "flash_attn_func": "attention_fwd", "grouped_gemm": "grouped_gemm",
              "rmsnorm": "rmsnorm_fwd", "rmsnorm_residual": "rmsnorm_fwd", "swiglu": "swiglu_fwd",
              "quantize_fp8": "quantize_fp8", "moe_routing": "moe_routing_fwd", "moe_permute": "moe_permute",
              "linear": "gemm", "linear_fp8": "gemm_fp8"}
    primitive_calls = {"gemm_fp8": 3, "linear": 3, "linear_fp8": 6}  # quantizations and the backward's GEMMs
    for r in rows:
        assert r["status"] == "ok", r
        assert r["us_per_call"] == pytest.approx(r["median_ms"] * 1e3) and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["calls"] == host.QUICK_CALLS and r["tokens"] == host.TOKENS
        if r["provider"] == "torch":
            assert r["ratio"] == 1.0 and r["max_rel_err"] == 0.0
        else:  # the same result as torch's call on the same inputs (bf16 rounding; FP8 quantization alike)
            assert r["max_rel_err"] < 0.05, r
            assert f"{served[r['op']]}:TORCH" in r["kernels"].split(", "), r
            assert r["primitive_calls"] == primitive_calls.get(r["op"], r["primitive_calls"]) >= 1, r
            parts = host.split(r)  # the layers add up to the call, each a time
            assert parts["backend"] > 0 and r["us_dispatch"] > 0
            assert sum(parts.values()) == pytest.approx(r["us_per_call"])
    step = next(r for r in rows if r["op"] == "linear_fp8" and r["provider"] == "turbo:auto")
    assert "gemm_fp8:TORCH" in step["kernels"] and step["pass"] == "fwd+bwd"
    # a step case also times its forward alone, on both sides; the other cases have no such part
    for r in rows:
        if r["pass"] == "fwd+bwd":
            assert 0 < r["us_forward"], r
        else:
            assert "us_forward" not in r, r


def test_host_profile_top_ranks_the_functions_a_turbo_call_spends_its_time_in(tmp_path, capsys):
    out = tmp_path / "h.json"
    assert main(["bench", "host", "--quick", "--providers", "turbo:auto", "--profile-top", "5",
                 "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    gemm_row = next(r for r in rows if r["op"] == "gemm")
    prof = gemm_row["host_profile"]
    assert len(prof) == 5 and all(isinstance(label, str) and us > 0 for label, us in prof)
    assert [us for _l, us in prof] == sorted((us for _l, us in prof), reverse=True)
    # the TORCH reference kernel of the gemm primitive is among the functions a CPU call spends time in
    every = {label for r in rows for label, _us in r["host_profile"]}
    assert any(label.startswith("turbo_core/") for label in every), every
    # with callees: the op's own entry point is where a call spends (nearly) all of it
    cum = gemm_row["host_profile_cumulative"]
    assert len(cum) == 5 and [us for _l, us in cum] == sorted((us for _l, us in cum), reverse=True)
    assert any(label.startswith("turbo_core/ops/gemm.py") for label, _us in cum), cum
    assert not any("suites/host.py" in label for r in rows for label, _us in r["host_profile_cumulative"])
    printed = capsys.readouterr().out
    assert "under cProfile" in printed and "time with callees" in printed
    assert main(["bench", "host", "--quick", "--profile-top", "0"]) == 2
    assert "--profile-top: expected a count >= 1, got 0" in capsys.readouterr().err


def test_profile_top_belongs_to_the_host_and_train_suites(capsys):
    assert main(["bench", "norm", "--quick", "--profile-top", "3"]) == 2
    assert "--profile-top applies to host, train, not to norm" in capsys.readouterr().err


def test_quick_linear_fp8_suite_times_a_training_step_per_recipe(tmp_path):
    from turbo_core.bench.suites import linear_fp8

    out = tmp_path / "l.json"
    assert main(["bench", "linear-fp8", "--quick", "--iters", "2", "--warmup", "1",
                 "--providers", "torch", "turbo:bf16", "turbo:fp8-tensorwise", "turbo:fp8-rowwise",
                 "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["provider"] for r in rows] == ["torch", "turbo:bf16", "turbo:fp8-tensorwise", "turbo:fp8-rowwise"]
    (t, k, n), = linear_fp8.QUICK_SHAPES
    for r in rows:
        assert r["status"] == "ok", r
        assert (r["m"], r["k"], r["n"], r["pass"], r["timing"]) == (t, k, n, "step", "wall clock")
        assert r["tflops"] == pytest.approx(6 * t * k * n / (r["median_ms"] * 1e-3) / 1e12)
        assert r["ratio"] == pytest.approx(rows[0]["median_ms"] / r["median_ms"])
    # the same layer's forward: bf16 rounding for turbo's Linear, E4M3 quantization for FP8
    assert rows[0]["max_rel_err"] == 0.0 and rows[1]["max_rel_err"] < 1e-2
    assert all(0 < r["max_rel_err"] < 0.1 for r in rows[2:])


def test_linear_fp8_step_updates_the_weight_every_step():
    """A step is forward, backward and an SGD update, an in-place write of the weight each step (so
    FP8 layers quantize a changed weight each step, as in training; at lr 1e-6 a bf16 weight's values
    may round back to themselves, its version still moves)."""
    from turbo_core.bench.suites import linear_fp8

    torch.manual_seed(0)
    ref = torch.nn.Linear(16, 32, bias=False, dtype=torch.bfloat16)
    mod = linear_fp8.PROVIDERS["turbo:fp8-tensorwise"][1](ref)
    x, dy = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(8, 32, dtype=torch.bfloat16)
    step, forward = linear_fp8._step(mod, x, dy)
    before = mod.weight.detach().clone()
    version = mod.weight._version
    step()
    assert mod.weight._version > version and mod.weight.grad is None
    assert torch.equal(ref.weight, before)  # the reference layer itself is untouched
    assert mod.weight is not ref.weight


@pytest.mark.parametrize("mode", ["off", "on"])
def test_autograd_threads_option_holds_for_the_run_and_is_recorded(tmp_path, monkeypatch, mode):
    """``--autograd-threads`` sets torch's multithreaded-backward switch for the whole suite run, puts
    it back afterwards, and every row names it; the rows' command line carries it."""
    from turbo_core.bench.suites import linear_fp8

    seen = []
    real_run = linear_fp8.run

    def spy(**kw):
        seen.append(torch.autograd.is_multithreading_enabled())
        return real_run(**kw)

    monkeypatch.setattr(linear_fp8, "run", spy)
    before = torch.autograd.is_multithreading_enabled()
    out = tmp_path / "l.json"
    assert main(["bench", "linear-fp8", "--quick", "--iters", "1", "--warmup", "1", "--providers", "torch",
                 "--autograd-threads", mode, "--record", str(tmp_path / "data"), "--out", str(out)]) == 0
    assert seen == [mode == "on"]
    assert torch.autograd.is_multithreading_enabled() == before
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["autograd_threads"] == mode for r in rows)
    lines = (tmp_path / "data" / "linear-fp8.jsonl").read_text().splitlines()
    assert lines and all(f"--autograd-threads {mode}" in json.loads(line)["command"] for line in lines)
