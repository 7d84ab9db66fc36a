"""tools/check_history.py: catches each kind of session/run narration planted in a file, leaves the
legitimate look-alikes of code and docstrings alone, reports ``file:line`` with exit status 1, and passes
on the repository's own ``packages/``. Run: ``python -m pytest tools/test_check_history.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("check_history", HERE / "check_history.py")
check_history = importlib.util.module_from_spec(_spec)
sys.modules["check_history"] = check_history
_spec.loader.exec_module(check_history)

# Lines the check must reject, with the kind it reports.
PLANTED = [
    ("# the Session 18 probe put 128 slots on 4 warps first", "session"),
    ("the session-10 sweep: 74-80% -> 88-93% of the copy bandwidth", "session"),
    ("#: (H200 sweep, session 10).", "session"),
    ("#: the Session-15 sweep on the H200", "session"),
    ("# both on the old tile (the dense kernel's 8 warps were slower, S18)", "run tag"),
    ("faster in two S17 runs and slower in two", "run tag"),
    ("results/attention-sweep-s9-mla-d256.json", "run tag"),
    ("``benchmarks/results/grouped-quant-fast-s17*-h200.json``", "run tag"),
    ("bad = fault(flops, 96.8)  # what run8 reported", "run tag"),
    ("Run 2's one failure, gemm_fp8-BLOCKWISE", "run tag"),
    ("| run_1: `--quick` |", "run tag"),
    ("# d=128 from the sweep of 2026-11-30", "date"),
    ("PyPI, read on 2025-01-07:", "date"),
    ("benchmarks/issue5-targets.md", "issue"),
    ("(see issue 29)", "issue"),
    ("dispatch 0.82x (was 0.74x), FP8 0.798x (was 0.65x)", "delta"),
    ("the fused path, was 0.15-0.66x the baseline", "delta"),
    ("whole-row tile spilled (66% -> 78% of the copy bandwidth)", "delta"),
    ("dequantize 9-15 us → 2.7-5.0 us", "delta"),
    ("4 warps (mx-col 1799 vs 1078 GB/s for 32 x 256 x 8 warps)", "delta"),
    ("(305 vs 286 TFLOP/s)", "delta"),
    ("4.3-4.5 us against 5.8-5.9 at T = 4096", "delta"),
    ("3209 GB/s against 3107 for the earlier tile", "delta"),
    ("the scatter (39.6 vs 38.1 us)", "delta"),
    ("fast accumulation: ~1.4x faster, 2-3x the rounding error", "delta"),
    ("a Triton dot on M-major FP8 tiles runs ~5x slower", "delta"),
]

# Lines the check must accept: shapes, annotations, versions, arch names, hex, PTX, the determinism
# helper's wording, tile shapes with an x, bandwidth as a unit in prose.
LEGIT = [
    "def gemm(a: torch.Tensor, b: torch.Tensor) -> None:",
    "    ``a`` [M, K] -> ``out`` [M, N] (bf16 -> fp32 accumulate -> bf16)",
    "head-dim bucket -> kernel -> tile",
    "ties to even: 0.25->0, 0.75->2 (1.0), 1.25->2, 1.75->4 (2.0)",
    "GQA 4->2 and 3->1",
    "# sm90 (H100/H200: 228 KB shared memory, wgmma on 64-row warpgroup tiles)",
    'requires = ["torch>=2.4", "triton==3.6.0"]',
    "version = \"0.1.0\"",
    "mask = 0x3F803F80",
    "sub.s32 c, s, p;",
    "s0, s1 = x.stride()",
    "y64, rstd64, s64, ds64, dg64 = _expected(x, residual, gamma)",
    "B4 H16 S4096, causal and not",
    "for s0 in range(0, n, BLOCK):",
    "the outputs of run 0 are compared with run 1 and run 2",
    'f"output {where} differs between run 0 and run {run}"',
    "128x256x64 tiles, 3 stages, 8 warps",
    "TFLOP/s from 2MNK, GB/s from an explicit byte count",
    "the ratio to the baseline (x) and to the device peak (%)",
    "gfx942 FNUZ, gfx950 OCP; sm89/sm90 accumulate FP8 at reduced precision",
    "K a multiple of 128; BLOCKWISE 1x128 x 128x128",
    "# torch 2 ms -> 1 TFLOP/s, 12.5% of the 8 TFLOP/s peak",
    "`turbo bench --suite norm` measures this tile (16384 tokens, bf16)",
    "a lookup that returns at once: about 1 us",
    "S = 512..16384 and d in (64, 128, 256)",
    "the issue tracker of the upstream project",
    'run = {"run": "r", "commit": "c", "date": "2026-01-01T00:00:00+00:00", "device": "cpu"}',
]


@pytest.mark.parametrize("line,kind", PLANTED)
def test_planted_history_is_caught(line, kind):
    assert kind in check_history.line_hits(line), line


@pytest.mark.parametrize("line", LEGIT)
def test_code_and_docstrings_pass(line):
    assert check_history.line_hits(line) == []


def test_waiver_silences_a_line():
    assert check_history.line_hits("# Session 18  check-history: ignore") == []


def test_main_lists_file_and_line_and_fails(tmp_path, capsys):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text('"""Tiles for sm90 (the `norm` suite measures them)."""\nX = 1  # -> None\n')
    (pkg / "bad.py").write_text("X = 1\n# tuned in Session 12: 66% -> 78%\n")
    (pkg / "README.md").write_text("# pkg\n\nMeasured on 2026-11-30.\n")
    (pkg / "data.json").write_text('{"note": "Session 3"}\n')  # not a scanned suffix
    assert check_history.main([str(pkg)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.endswith("bad.py:2: [delta, session] # tuned in Session 12: 66% -> 78%") for line in out)
    assert any("README.md:3: [date]" in line for line in out)
    assert not any("ok.py" in line or "data.json" in line for line in out)
    assert out[-1].startswith("check_history: 2 line(s) in 2 of 3 files")


def test_dates_in_python_count_in_comments_and_docstrings_only(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text('"""Tiles read on 2026-11-30."""\n'
                   'HEADING = "### `gemm` on Fake GPU, 2026-04-01"  # a report heading of test data\n'
                   'def f():\n'
                   '    """Tuned on 2026-12-01."""\n'
                   '    return {"date": "2026-01-01"}  # swept 2026-12-02\n')
    assert [(number, names) for number, names, _ in check_history.scan(src)] == [
        (1, ["date"]), (4, ["date"]), (5, ["date"])]
    md = tmp_path / "README.md"
    md.write_text('HEADING = "2026-04-01"\n')  # outside Python every line is prose
    assert [number for number, _, _ in check_history.scan(md)] == [1]


def test_main_passes_a_clean_folder(tmp_path, capsys):
    (tmp_path / "ok.py").write_text("def f() -> None:\n    pass\n")
    assert check_history.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "check_history: no session or run history in 1 files"


def test_repository_packages_are_clean(capsys):
    code = check_history.main([])
    assert code == 0, capsys.readouterr().out[-4000:]
