"""``turbo accuracy``: the quick CPU run passes on the reference backend, the JSON/markdown carry the
documented fields, a wrong backend fails its rows (and the exit status), a declining backend gets
``declined: <reason>`` rows, and the metrics are right on hand-made numbers."""

from __future__ import annotations

import json
import math

import pytest
import torch

from turbo_core.accuracy.cases import AccCase, build_cases
from turbo_core.accuracy.runner import score
from turbo_core.cli import main
from turbo_core.testing.numerics import (
    SNR_DB,
    TOLERANCES,
    error_stats,
    normwise_gate,
    snr_gate,
    tolerance_gate,
    within_normwise,
    within_tolerance,
)

FIELDS = {"family", "primitive", "precision", "granularity", "format", "shape", "output", "backend", "status",
          "snr_db", "max_abs", "max_rel", "gate", "passed"}


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps table cells at the terminal width


def _json(path) -> dict:
    with open(path) as fh:
        return json.load(fh)


# Every family, tiny shapes, the reference TORCH only (conftest limits discovery to turbo-core's plugin).
def test_quick_run_passes_and_writes_json_and_markdown(tmp_path, capsys):
    out, md = tmp_path / "acc.json", tmp_path / "acc.md"
    rc = main(["accuracy", "--quick", "--include-reference", "--out", str(out), "--markdown", str(md)])
    assert rc == 0
    data = _json(out)
    rows = data["rows"]
    assert {r["family"] for r in rows} == {"gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8", "rmsnorm",
                                           "activation", "quantize", "attention", "cross_entropy"}
    assert all(FIELDS <= set(r) for r in rows)
    assert all(r["backend"] == "TORCH" and r["status"] == "ok" and r["passed"] is True for r in rows)
    assert data["summary"] == {"rows": len(rows), "passed": len(rows), "failed": 0, "declined": 0}
    precisions = {r["precision"] for r in rows}
    assert {"bf16", "fp16", "fp32"} <= precisions
    for gran in ("tensorwise", "rowwise", "blockwise"):
        for fmt in ("E4M3", "E5M2", "HYBRID"):
            assert f"fp8 {gran} {fmt}" in precisions
    # FP8 GEMM rows carry the end-to-end SNR against the unquantized product, above the format's floor
    fp8 = [r for r in rows if r["family"] == "gemm_fp8"]
    assert all(r["snr_e2e_db"] >= SNR_DB[r["format"]] for r in fp8)
    # the gates are the tests' own numbers
    rtol, atol = TOLERANCES[torch.bfloat16]
    gemm = next(r for r in rows if r["precision"] == "bf16" and r["family"] == "gemm")
    assert gemm["gate"] == f"rtol={rtol:g} atol={atol:g}*max(1,max|ref|) (bfloat16, normwise)"
    norm = next(r for r in rows if r["precision"] == "bf16" and r["family"] == "rmsnorm")
    assert norm["gate"] == f"rtol={rtol:g} atol={atol:g} (bfloat16)"
    text = md.read_text()
    assert text.splitlines()[0].startswith("| family | primitive | precision | shape |")
    assert text.count("| pass |") == len(rows)
    assert "FAIL" not in capsys.readouterr().out


@pytest.fixture
def wrong_fake(use_plugins, fakekit, monkeypatch):
    """FAKEA's gemm kernel returns the right product plus 5% of its largest magnitude."""
    def impl_for(name):
        def impl(args):
            a = args.a.t() if args.trans_a else args.a
            b = args.b.t() if args.trans_b else args.b
            res = a.double() @ b.double()
            return (res + 0.05 * res.abs().max()).to(args.result_dtype)
        return impl

    monkeypatch.setattr(fakekit, "impl_for", impl_for)
    use_plugins("fake_a")
    return fakekit


def test_wrong_backend_fails_its_rows_and_the_exit_status(wrong_fake, tmp_path, capsys):
    out, md = tmp_path / "acc.json", tmp_path / "acc.md"
    rc = main(["accuracy", "--quick", "--include-reference", "--families", "gemm", "--out", str(out),
               "--markdown", str(md)])
    assert rc == 1
    rows = _json(out)["rows"]
    fake = [r for r in rows if r["backend"] == "FAKEA"]
    ref = [r for r in rows if r["backend"] == "TORCH"]
    assert fake and ref and len(fake) == len(ref)
    assert all(r["passed"] is False and r["status"] == "ok" for r in fake)
    assert all(r["passed"] is True for r in ref)
    # an offset of 5% of max|ref| (after rounding to the dtype): max_rel ~ 0.05, SNR ~ 10log10(E[ref^2]/offset^2)
    assert all(0.045 < r["max_rel"] < 0.055 for r in fake)
    assert _json(out)["summary"]["failed"] == len(fake)
    assert md.read_text().count("| FAIL |") == len(fake)
    assert "FAIL" in capsys.readouterr().out


def test_declining_backend_gives_declined_rows(use_plugins, fakekit, tmp_path, capsys):
    fakekit.cfg("FAKEA")["decline"] = "FAKEA is resting"
    use_plugins("fake_a")
    out = tmp_path / "acc.json"
    rc = main(["accuracy", "--quick", "--families", "gemm", "--out", str(out)])
    assert rc == 1  # no backend ran a case
    rows = _json(out)["rows"]
    assert rows and all(r["backend"] == "FAKEA" for r in rows)  # TORCH is left out without --include-reference
    assert all(r["status"] == "declined: FAKEA is resting" and r["passed"] is None for r in rows)
    assert _json(out)["summary"]["declined"] == len(rows)
    captured = capsys.readouterr()
    assert "declined: FAKEA is resting" in captured.out  # each row says why it did not run
    assert ("turbo accuracy: no turbo backend ran a case (FAKEA can run here but served none of these cases)"
            in captured.err)
    # declining is not failing: with the reference backend running the cases the exit status is 0
    assert main(["accuracy", "--quick", "--families", "gemm", "--include-reference"]) == 0


def test_no_runnable_backend_says_why_and_exits_1(use_plugins, fakekit, capsys):
    fakekit.cfg("FAKEB")["unavailable"] = "no GPU (set TRITON_INTERPRET=1 to run the kernels on the CPU)"
    use_plugins("fake_b")
    assert main(["accuracy", "--quick", "--families", "gemm"]) == 1
    err = capsys.readouterr().err
    assert "turbo accuracy: no turbo backend ran a case: these cannot run here:" in err
    assert "  FAKEB: no GPU (set TRITON_INTERPRET=1 to run the kernels on the CPU)" in err


def test_table_is_readable_at_80_columns_in_a_pipe(tmp_path):
    from rich.console import Console

    from turbo_core.accuracy.report import print_table

    rows = [{"family": "gemm_fp8", "primitive": "gemm_fp8", "precision": "fp8 rowwise E4M3", "shape": "s/qkv/fwd 8x8x8",
             "output": "out", "backend": "HIPBLASLT", "status": "ok", "snr_db": 49.71, "snr_e2e_db": 28.44,
             "max_abs": 0.1243, "max_rel": 0.0039, "gate": "rtol=0.01 (bfloat16)", "passed": True},
            {"family": "gemm_fp8", "primitive": "gemm_fp8", "precision": "fp8 rowwise E4M3", "shape": "s/qkv/fwd 8x8x8",
             "output": "out", "backend": "CK", "status": "declined: not on this arch", "snr_db": None,
             "max_abs": None, "max_rel": None, "gate": "rtol=0.01 (bfloat16)", "passed": None},
            {"family": "rmsnorm", "primitive": "rmsnorm_fwd", "precision": "bf16", "shape": "rmsnorm/fwd 32x96",
             "output": "y", "backend": "TRITON", "status": "ok", "snr_db": 55.4, "max_abs": 0.0078, "max_rel": 0.0019,
             "gate": "rtol=0.01 atol=0.01 (bfloat16)", "passed": False}]
    path = tmp_path / "out.txt"
    with open(path, "w") as fh:  # a file, like a pipe: no terminal, rich's default width of 80
        print_table(rows, Console(file=fh))
    lines = path.read_text().splitlines()
    assert "\u2026" not in path.read_text()  # nothing cut
    # every line fits but a row that did not run, whose reason follows its shape, the last column
    assert all(len(line) <= 80 for line in lines if "(declined:" not in line)
    assert lines[1].split() == ["backend", "output", "SNR", "dB", "max", "abs", "max", "rel", "result", "shape"]
    assert lines[2] == "gemm_fp8 / fp8 rowwise E4M3: gate rtol=0.01 (bfloat16)"
    assert lines[3].split() == ["HIPBLASLT", "out", "49.7", "(28.4", "e2e)", "0.124", "0.0039", "pass",
                                "s/qkv/fwd", "8x8x8"]
    assert lines[4].split() == ["CK", "out", "-", "-", "-", "-", "s/qkv/fwd", "8x8x8", "(declined:", "not", "on",
                                "this", "arch)"]
    assert lines[5] == "rmsnorm / rmsnorm_fwd / bf16: gate rtol=0.01 atol=0.01 (bfloat16)"
    assert lines[6].split()[5] == "FAIL"
    # the numeric columns line up under their headers
    assert lines[3].index("0.124") + len("0.124") == lines[1].index("max abs") + len("max abs")
    assert lines[-1] == "3 rows: 1 passed, 1 failed, 1 declined"


def test_bad_options_exit_2(capsys):
    assert main(["accuracy", "--quick", "--tokens", "0"]) == 2
    with pytest.raises(ValueError, match="families"):
        build_cases(quick=True, families=["conv"])
    with pytest.raises(ValueError, match="formats"):
        build_cases(quick=True, formats=["E3M4"])


# -- the metrics, on numbers worked by hand --------------------------------------------------------------


def test_error_stats_hand_made():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    got = torch.tensor([3.0, 3.0])
    s = error_stats(ref, got)
    assert s["snr_db"] == pytest.approx(10 * math.log10(25 / 1))  # |ref|^2 = 25, |err|^2 = 1: 13.98 dB
    assert s["max_abs"] == 1.0
    assert s["max_rel"] == pytest.approx(1 / 4)
    exact = error_stats(ref, ref.float())
    assert exact == {"snr_db": math.inf, "max_abs": 0.0, "max_rel": 0.0}
    nan = error_stats(ref, torch.tensor([3.0, float("nan")]))
    assert math.isnan(nan["max_abs"]) and math.isnan(nan["snr_db"])


def test_gates_hand_made():
    ref = torch.tensor([1.0, 100.0], dtype=torch.float64)
    rtol, atol = TOLERANCES[torch.bfloat16]
    edge = atol + rtol * 100.0
    assert within_tolerance(torch.tensor([1.0, 100.0 + 0.99 * edge]), ref, torch.bfloat16)
    assert not within_tolerance(torch.tensor([1.0, 100.0 + 1.01 * edge]), ref, torch.bfloat16)
    assert not within_tolerance(torch.tensor([1.0]), ref, torch.bfloat16)
    assert tolerance_gate(torch.float32).check(ref, ref.float() + 0.5 * TOLERANCES[torch.float32][1])
    assert not tolerance_gate(torch.float32).check(ref, ref.float() + 0.02)
    # 1% noise energy is 20 dB: passes E5M2's 20 dB floor... just, fails E4M3's 25 dB
    sig = torch.tensor([10.0, 0.0], dtype=torch.float64)
    noisy = torch.tensor([10.0, 0.999])  # err^2 = 0.998 < 1: SNR just above 20 dB
    assert snr_gate("E5M2").check(sig, noisy) and not snr_gate("E4M3").check(sig, noisy)
    with pytest.raises(ValueError, match="fmt"):
        snr_gate("E9M9")


def test_normwise_gate_scales_the_absolute_tolerance_by_the_largest_reference():
    """An element near zero of a large result: the elementwise gate rejects an error of 0.02, the
    normwise one allows up to max(atol, 2 eps) * max|ref| (bf16: 2 * 2^-7 * 300 = 4.69), no more."""
    ref = torch.tensor([0.0, 300.0], dtype=torch.float64)
    near_zero_err = torch.tensor([0.02, 300.0])
    assert not tolerance_gate(torch.bfloat16).check(ref, near_zero_err)
    assert normwise_gate(torch.bfloat16).check(ref, near_zero_err)
    assert within_normwise(torch.tensor([4.6, 300.0]), ref, torch.bfloat16)
    assert not within_normwise(torch.tensor([4.8, 300.0]), ref, torch.bfloat16)
    assert not within_normwise(torch.tensor([0.0]), ref, torch.bfloat16)
    assert "normwise" in normwise_gate(torch.float32).describe()


def test_score_fills_the_row_and_the_end_to_end_gate():
    case = AccCase("gemm_fp8", "gemm_fp8", "fp8 tensorwise E4M3", "hand", ("out",), tolerance_gate(torch.bfloat16),
                   build=None, e2e_gate=snr_gate("E4M3"))
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    row = score(case, {}, ref, ref.to(torch.bfloat16), ideal=torch.tensor([3.0, 4.1], dtype=torch.float64))
    assert row["passed"] is True and row["max_abs"] == 0.0
    assert row["snr_e2e_db"] == pytest.approx(10 * math.log10((9 + 4.1**2) / 0.1**2))
    # exact against the dequantized product, but 13.98 dB end to end: fails E4M3's 25 dB
    row = score(case, {}, ref, ref.to(torch.bfloat16), ideal=torch.tensor([3.0, 3.0], dtype=torch.float64))
    assert row["passed"] is False
    row = score(case, {}, ref, torch.ones(3))
    assert row["passed"] is False and row["status"].startswith("error: shape")
