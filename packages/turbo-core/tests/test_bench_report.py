"""``turbo bench report``: markdown tables and geomeans from small synthetic suite rows, checked
against ratios worked out by hand from the rows' times; plots written when matplotlib is
installed, and a clear skip message when it is not."""

from __future__ import annotations

import json
import math
import sys

import pytest

from turbo_core.bench import markdown, report
from turbo_core.cli import main


def _row(suite, case, pass_, provider, ms, *, role=None, baseline=None, **extra):
    r = {"suite": suite, "case": case, "pass": pass_, "provider": provider, "status": "ok", "median_ms": ms,
         "p10_ms": ms, "p90_ms": ms}
    if role:
        r["role"] = role
    if baseline:
        r["baseline"] = baseline
    r.update(extra)
    return r


def _gemm_rows():
    """Two fwd cases and one dgrad case; torch.matmul-like baseline, two turbo providers, one of
    which declines the second fwd case. TFLOP/s for a 2*M*N*K of 2e9 FLOPs: 2 / ms."""
    rows = []
    shapes = {"c1": (1000, 1000, 1000), "c2": (1000, 1000, 1000), "c3": (500, 2000, 1000)}
    times = [  # (case, pass, provider, ms)
        ("c1", "fwd", "torch", 2.0), ("c1", "fwd", "turbo:A", 1.0), ("c1", "fwd", "turbo:B", 4.0),
        ("c2", "fwd", "torch", 1.0), ("c2", "fwd", "turbo:A", 4.0),
        ("c3", "dgrad", "torch", 3.0), ("c3", "dgrad", "turbo:A", 2.0), ("c3", "dgrad", "turbo:B", 3.0),
    ]
    base = {(c, p): ms for c, p, prov, ms in times if prov == "torch"}
    for case, pass_, prov, ms in times:
        m, n, k = shapes[case]
        tflops = 2 * m * n * k / ms / 1e9
        rows.append(_row("gemm", f"model/{case}/{pass_} {m}x{n}x{k}", pass_, prov, ms, model="model", layer=case,
                         m=m, n=n, k=k, tflops=tflops, ratio=base[(case, pass_)] / ms, peak_fraction=tflops / 8.0))
    rows.append({"suite": "gemm", "case": "model/c2/fwd 1000x1000x1000", "pass": "fwd", "provider": "turbo:B",
                 "model": "model", "layer": "c2", "m": 1000, "n": 1000, "k": 1000,
                 "status": "declined: K not a multiple of 16 | too small"})
    return rows


def _line(text: str, start: str) -> str:
    found = [ln for ln in text.splitlines() if ln.startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


def test_gemm_tables_and_geomean_against_hand_ratios(tmp_path):
    src = tmp_path / "gemm.json"
    src.write_text(json.dumps({"environment": {"gpu": "Fake GPU", "torch": "9.9"}, "rows": _gemm_rows()}))
    written = markdown.write_report([src], tmp_path / "out", plots=False)
    assert written.plots_skipped == "turned off (--no-plots)"
    page = (tmp_path / "out" / "gemm.md").read_text()
    assert "## fwd" in page and "## dgrad" in page and "Fake GPU" in page
    head = _cells(_line(page.split("## dgrad")[0], "| case |"))
    assert head == ["case", "`torch`", "`turbo:A`", "`turbo:B`", "`turbo:A` vs `torch`", "`turbo:B` vs `torch`"]
    # c1: torch 2 ms -> 1 TFLOP/s, 12.5% of the 8 TFLOP/s peak; turbo:A 1 ms = 2x; turbo:B 4 ms = 0.5x
    c1 = _cells(_line(page, "| model c1 "))
    assert c1 == ["model c1 1000x1000x1000", "1 · 2 ms · 12%", "2 · 1 ms · 25%", "0.5 · 4 ms · 6%",
                  "**2.00x**", "0.50x"]
    c2 = _cells(_line(page, "| model c2 "))  # turbo:A 4 ms against 1 ms = 0.25x; turbo:B declined
    assert c2[2] == "0.5 · 4 ms · 6%" and c2[4] == "0.25x" and c2[5] == "-"
    assert c2[3].startswith("declined: K not a multiple of 16 \\|")  # the pipe escaped
    assert "- `turbo:B`: declined: K not a multiple of 16 \\| too small (1 case)" in page
    c3 = _cells(_line(page, "| model c3 "))  # 3 ms / 2 ms = 1.5x; equal times = 1.00x (bold: parity)
    assert c3[4:] == ["**1.50x**", "**1.00x**"]
    # geomean of turbo:A on fwd: sqrt(2 * 0.25); min 0.25, max 2; median fraction of peak (25%+6.25%)/2
    fwd_a = _cells(_line(page, "| fwd | `turbo:A` | `torch` |"))
    assert fwd_a[3:] == ["2", f"{math.sqrt(2.0 * 0.25):.2f}x", "0.25x", "2.00x", f"{(0.25 + 0.0625) / 2:.0%}"]
    assert fwd_a[4] == "0.71x"
    fwd_b = _cells(_line(page, "| fwd | `turbo:B` | `torch` |"))
    assert fwd_b[3:5] == ["1", "0.50x"]
    # the same geomeans as the rows' own summary (their ratio field, against the same baseline)
    by_key = {(s["provider"], s["pass"]): s["geomean_ratio"] for s in report.summary(_gemm_rows())}
    for comp in (c for g in written.sections[0].groups for c in markdown.comparisons(g)):
        assert comp.geomean == pytest.approx(by_key[(comp.provider, comp.group.pass_)], rel=1e-12)
    index = (tmp_path / "out" / "README.md").read_text()
    assert "[`gemm`](gemm.md)" in index and "(../gemm.json)" in index
    assert "Plots skipped: turned off" in index


def _norm_rows():
    """Eager torch, torch.compile, one turbo provider; GB/s and fraction of a 100 GB/s copy."""
    rows = []
    for case, ms in (("a", (4.0, 1.0, 0.5)), ("b", (8.0, 1.0, 2.0))):
        for prov, t in zip(("torch", "torch.compile", "turbo:T"), ms, strict=True):
            gbps = 100.0 / t
            rows.append(_row("norm", f"rmsnorm/fwd {case} 16x8", "fwd", prov, t, op="rmsnorm", model=case,
                             tokens=16, hidden=8, gbps=gbps, copy_gbps=100.0, copy_fraction=gbps / 100.0,
                             ratio=ms[0] / t))
    return rows


def test_headline_is_the_fastest_reference(tmp_path):
    src = tmp_path / "norm.json"
    src.write_text(json.dumps({"environment": {}, "bench": _norm_rows()}))  # the scripts' "bench" key
    markdown.write_report([src], tmp_path / "out", plots=False)
    page = (tmp_path / "out" / "norm.md").read_text()
    assert "Copy bandwidth measured in the same run: 100 GB/s." in page and "GB/s · median time" in page
    # a: vs torch 4/0.5 = 8x, vs compile 1/0.5 = 2x; b: vs torch 8/2 = 4x, vs compile 1/2 = 0.5x
    assert _cells(_line(page, "| a rmsnorm 16x8 |"))[4:] == ["**8.00x**", "**2.00x**"]
    assert _cells(_line(page, "| b rmsnorm 16x8 |"))[4:] == ["**4.00x**", "0.50x"]
    # geomeans: vs torch sqrt(32) = 5.66, vs torch.compile sqrt(1) = 1.00: the headline is torch.compile
    index = (tmp_path / "out" / "README.md").read_text()
    headline = index.split("## Headline")[1].split("## Every comparison")[0]
    assert _cells(_line(headline, "| norm | fwd |"))[2:5] == ["`turbo:T`", "`torch.compile`", "2"]
    assert _cells(_line(headline, "| norm | fwd |"))[5] == "**1.00x**"
    every = index.split("## Every comparison")[1]
    assert _cells(_line(every, "| norm | fwd | `turbo:T` | `torch` |"))[5] == f"**{math.sqrt(32):.2f}x**"


def test_fp8_granularities_get_their_own_tables(tmp_path):
    """bf16 reference (role bf16) and a per-granularity baseline; ratios against both."""
    rows = []
    for gran, (bf16_ms, base_ms, turbo_ms) in {"TENSORWISE": (4.0, 2.0, 2.5), "BLOCKWISE": (4.0, 3.0, 2.0)}.items():
        name = "torch._scaled_mm" if gran == "TENSORWISE" else "F.scaled_mm"
        for prov, role, ms in (("bf16:torch.matmul", "bf16", bf16_ms), (name, "baseline", base_ms),
                               ("turbo:T", "turbo", turbo_ms)):
            rows.append(_row("gemm_fp8", f"m/qkv/fwd 64x64x64 {gran.lower()}", "fwd", prov, ms, role=role, baseline=name,
                             granularity=gran, model="m", layer="qkv", m=64, n=64, k=64, tflops=1.0 / ms))
    src = tmp_path / "fp8.json"
    src.write_text(json.dumps({"rows": rows}))
    markdown.write_report([src], tmp_path / "out", plots=False)
    page = (tmp_path / "out" / "gemm_fp8.md").read_text()
    tw, bw = page.split("## Geomean")[0].split("### TENSORWISE")[1].split("### BLOCKWISE")
    assert "F.scaled_mm" not in tw and "torch._scaled_mm" not in bw
    # the bf16 reference first, then the baseline: TENSORWISE 4/2.5 = 1.6x, 2/2.5 = 0.8x
    assert _cells(_line(tw, "| case |"))[1:3] == ["`bf16:torch.matmul`", "`torch._scaled_mm`"]
    assert _cells(_line(tw, "| m qkv 64x64x64 |"))[4:] == ["**1.60x**", "0.80x"]
    assert _cells(_line(bw, "| m qkv 64x64x64 |"))[4:] == ["**2.00x**", "**1.50x**"]
    assert "| fwd · TENSORWISE | `turbo:T` | `torch._scaled_mm` | 1 | 0.80x |" in page


def test_colliding_short_labels_fall_back_to_the_case_name():
    rows = [_row("gemm", "m/l/fwd NT 2x2x2", "fwd", "torch", 1.0, model="m", layer="l", m=2, n=2, k=2),
            _row("gemm", "m/l/fwd TN 2x2x2", "fwd", "torch", 1.0, model="m", layer="l", m=2, n=2, k=2)]
    (group,) = markdown.groups(rows)
    assert markdown.case_labels(group) == {"m/l/fwd NT 2x2x2": "m/l/fwd NT 2x2x2", "m/l/fwd TN 2x2x2": "m/l/fwd TN 2x2x2"}


def test_files_without_suite_rows_are_skipped_with_the_reason(tmp_path):
    bad = tmp_path / "sweep.json"
    bad.write_text(json.dumps({"rows": [{"m": 1, "ms": 0.1}]}))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert markdown.load(bad).skipped.startswith("no suite rows")
    assert markdown.load(broken).skipped.startswith("not readable as JSON")
    with pytest.raises(ValueError, match="paths: no suite rows"):
        markdown.write_report([bad, broken], tmp_path / "out")
    good = tmp_path / "gemm.json"
    good.write_text(json.dumps({"rows": _gemm_rows()}))
    markdown.write_report([bad, good], tmp_path / "out", plots=False)
    assert "skipped, no suite rows" in (tmp_path / "out" / "README.md").read_text()


def test_cli_without_matplotlib_writes_markdown_and_says_why(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    src = tmp_path / "gemm.json"
    src.write_text(json.dumps({"rows": _gemm_rows()}))
    out = tmp_path / "out"
    assert main(["bench", "report", str(src), "--out-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "plots skipped: matplotlib is not installed" in err and "turbo-core[report]" in err
    assert (out / "gemm.md").exists() and not list(out.glob("*.png"))
    assert "Plots skipped: matplotlib is not installed" in (out / "README.md").read_text()


def test_cli_errors(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    assert main(["bench", "report", str(bad), "--out-dir", str(tmp_path / "o")]) == 2
    assert "no suite rows" in capsys.readouterr().err
    assert main(["bench", "gemm", str(bad)]) == 2  # files belong to the report only
    assert "unexpected arguments" in capsys.readouterr().err


def test_plots_written_and_not_blank(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    gemm, norm = tmp_path / "gemm.json", tmp_path / "norm.json"
    gemm.write_text(json.dumps({"rows": _gemm_rows()}))
    norm.write_text(json.dumps({"rows": _norm_rows()}))
    out = tmp_path / "out"
    assert main(["bench", "report", str(gemm), str(norm), "--out-dir", str(out)]) == 0
    assert "plots skipped" not in capsys.readouterr().err
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["gemm-dgrad.png", "gemm-fwd.png", "norm-fwd.png", "summary.png"]
    for name in pngs:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        img = matplotlib.image.imread(out / name)
        assert img.shape[0] > 200 and img.shape[1] > 300 and img[..., :3].std() > 0.05  # drawn, not blank
    page = (out / "gemm.md").read_text()
    assert "![gemm fwd](gemm-fwd.png)" in page and "![gemm dgrad](gemm-dgrad.png)" in page
    assert "![geomean ratio to the fastest reference](summary.png)" in (out / "README.md").read_text()
