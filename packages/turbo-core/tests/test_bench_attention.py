"""``turbo bench attention``: the case list and its FLOPs (counted by hand), the float64 oracle
against autograd on naive float64 attention, the quick CPU run (TORCH and, under the Triton
interpreter, TRITON; SDPA declines with its reason) and the report's rendering of attention rows
(ratios worked out by hand from the rows' times)."""

from __future__ import annotations

import pytest
import torch
from triton_here import triton_interpretable

from turbo_core.bench import compare, dataset, markdown
from turbo_core.bench.suites import attention as suite
from turbo_core.cli import main

# ---- cases and FLOPs --------------------------------------------------------------------------------


def test_fa3_sizing_and_model_cases():
    cases = list(suite.cases(16384, False, None))
    fa3 = [c for c in cases if c.model.startswith("fa3-")]
    # 3 head dims x 6 seqs x causal/not x fwd/bwd
    assert len(fa3) == 3 * 6 * 2 * 2
    for c in fa3:
        assert c.h_q == c.h_kv == 2048 // c.d_qk and c.d_v == c.d_qk  # hidden 2048
        assert c.batch * c.seq_q == 16384 and c.seq_kv == c.seq_q
    assert sorted({c.seq_q for c in fa3}) == [512, 1024, 2048, 4096, 8192, 16384]
    by_model = {c.model: c for c in cases}
    assert (by_model["llama3.1-8b"].h_q, by_model["llama3.1-8b"].h_kv, by_model["llama3.1-8b"].d_qk) == (32, 8, 128)
    assert (by_model["llama3.1-70b"].h_q, by_model["llama3.1-70b"].h_kv) == (64, 8)
    ds = by_model["deepseek-v3"]
    assert (ds.h_q, ds.h_kv, ds.d_qk, ds.d_v, ds.causal) == (128, 128, 192, 128, True)
    oss = [c for c in cases if c.model == "gpt-oss-20b"]
    assert {c.layer for c in oss} == {"sliding", "full"} and all(c.sink and c.h_q == 64 and c.h_kv == 8 for c in oss)
    assert {c.window for c in oss if c.layer == "sliding"} == {(127, 0)}
    assert {c.mask for c in oss} == {"window (127, 0)", "causal"}
    # filters
    only = list(suite.cases(16384, False, ["llama3.1-8b"], ["bwd"]))
    assert len(only) == 3 and all(c.pass_ == "bwd" and c.model == "llama3.1-8b" for c in only)
    with pytest.raises(ValueError, match="passes: unknown dgrad"):
        list(suite.cases(16384, False, None, ["dgrad"]))


def test_flops_by_hand():
    # causal, square: half of 4*B*H*S*S*D (the FlashAttention papers' convention); backward 2.5x
    c = suite.AttnCase("fa3-d128", None, "fwd", 4, 4096, 4096, 16, 16, 128, 128, True)
    assert c.flops == 4 * 4 * 16 * 4096 * 4096 * 128 // 2
    bwd = suite.AttnCase("fa3-d128", None, "bwd", 4, 4096, 4096, 16, 16, 128, 128, False)
    assert bwd.flops == 4 * 4 * 16 * 4096 * 4096 * 128 * 5 // 2
    # MLA: 2*B*H*S*S*(d_qk + d_v) = 2*1*128*S*S*320, halved (causal)
    mla = suite.AttnCase("deepseek-v3", None, "fwd", 1, 1000, 1000, 128, 128, 192, 128, True)
    assert mla.flops == 128 * 1000 * 1000 * 320
    # window (2, 0), s = 8: rows 0, 1 see 1 and 2 keys, rows 2..7 see 3 each -> 1 + 2 + 18 = 21 pairs
    w = suite.AttnCase("m", None, "fwd", 3, 8, 8, 2, 1, 16, 16, True, (2, 0))
    assert suite.visible_pairs(8, 8, True, (2, 0)) == 21
    assert w.flops == 2 * 3 * 2 * 21 * 32
    # GPT-OSS sliding window 128 (left 127), s = 4096: rows 0..127 see 1..128 keys, the others 128
    assert suite.visible_pairs(4096, 4096, True, (127, 0)) == 128 * 129 // 2 + (4096 - 128) * 128
    # bottom-right causal with s_q=2, s_kv=4 (exact: rows see keys 0..2 and 0..3) and a two-sided window
    assert suite.visible_pairs(2, 4, True, (-1, -1)) == 3 + 4
    assert suite.visible_pairs(5, 5, False, (1, 1)) == 2 + 3 + 3 + 3 + 2
    assert suite.visible_pairs(5, 7, False, (-1, -1)) == 35
    assert [suite.mask_name(*m) for m in ((False, (-1, -1)), (True, (-1, -1)), (True, (127, 5)), (False, (1, 1)))] \
        == ["full", "causal", "window (127, 0)", "window (1, 1)"]


# ---- the oracle ----------------------------------------------------------------------------------------


def _naive(q, k, v, sink, causal, window):
    """Full-matrix float64 attention over [b, s, h, d] (GQA by repeat), differentiable."""
    g = q.shape[2] // k.shape[2]
    kk, vv = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * q.shape[-1] ** -0.5
    sq, sk = q.shape[1], k.shape[1]
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    left, right = window
    right = 0 if causal else right
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    s = s.masked_fill(~ok, float("-inf"))
    if sink is not None:
        col = sink.double()[None, :, None, None].expand(s.shape[0], -1, sq, 1)
        p = torch.softmax(torch.cat([s, col], -1), -1)[..., :-1]
    else:
        p = torch.softmax(s, -1)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


@pytest.mark.parametrize("case", [
    # GQA 4/2 with a window and sinks: the slice is kv head 0 and query heads 0-1
    suite.AttnCase("t", None, "bwd", 2, 19, 19, 4, 2, 16, 16, True, (5, 0), True),
    # split head dims (MLA), no mask, a row block smaller than the sequence (budget below)
    suite.AttnCase("t", None, "bwd", 1, 23, 23, 2, 2, 24, 8, False),
    suite.AttnCase("t", None, "fwd", 1, 17, 17, 3, 1, 8, 8, True),
], ids=["gqa-window-sink", "mla-blocks", "mqa-fwd"])
def test_reference_slice_matches_autograd_of_naive_float64(case):
    gen = torch.Generator().manual_seed(3)
    inp = suite.make_inputs(case, "cpu", torch.float64, gen)
    refs = suite.reference_slice(case, inp, budget=2 * 8 * case.seq_kv)  # blocks of a few rows
    q, k, v = (inp[x].clone().requires_grad_() for x in ("q", "k", "v"))
    out = _naive(q, k, v, inp["sink"], case.causal, case.window)
    g = case.group
    if case.pass_ == "fwd":
        torch.testing.assert_close(refs[0], out[0, :, :g].detach(), rtol=1e-12, atol=1e-12)
        return
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), inp["dout"])
    want = [dq[0, :, :g], dk[0, :, :1], dv[0, :, :1]]
    for got, exp in zip(refs, want, strict=True):
        assert got.shape == exp.shape
        torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-12)


def test_result_and_reference_give_the_worst_relative_error():
    # dq off by 1% of its max, dk and dv exact: max_rel_err = 0.01 (per tensor, not overall)
    from turbo_core.bench.runner import max_rel_err

    case = suite.AttnCase("t", None, "bwd", 1, 8, 8, 2, 1, 8, 8, False)
    inp = suite.make_inputs(case, "cpu", torch.float64, torch.Generator().manual_seed(0))
    refs = suite.reference_slice(case, inp)
    full = [torch.zeros(1, 8, 2, 8, dtype=torch.float64), torch.zeros(1, 8, 1, 8, dtype=torch.float64),
            torch.zeros(1, 8, 1, 8, dtype=torch.float64)]
    full[0][0, :, :2] = refs[0]
    full[1][0, :, :1], full[2][0, :, :1] = refs[1], refs[2]
    full[0][0, 3, 1, 2] += 0.01 * refs[0].abs().max()
    oracle = suite.reference(case, inp)
    assert max_rel_err(suite.Result(tuple(full), inp, (2, 1, 1)), oracle) == pytest.approx(0.01, rel=1e-9)


# ---- the quick run on the CPU, then its report ------------------------------------------------------


def test_quick_run_on_cpu_and_its_report(tmp_path, monkeypatch, use_plugins, capsys):
    no_triton = triton_interpretable()
    if no_triton is None:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        use_plugins("turbo_triton.plugin")
    data = tmp_path / "data"
    assert main(["bench", "attention", "--quick", "--record", str(data)]) == 0
    rows = dataset.load(data)
    cases = list(suite.cases(32, True, None))
    assert len({r["case"] for r in rows}) == len(cases) == 6  # 3 tiny layers x fwd/bwd
    flops = {c.label: c.flops for c in cases}
    tol = suite.tolerance_of(torch.bfloat16)
    assert tol == pytest.approx(2 * 2**-7 + 1e-2)
    for r in rows:
        assert r["suite"] == "attention" and r["flops"] == flops[r["case"]] and r["tolerance"] == tol
        if r["provider"].startswith("sdpa:"):  # no SDPA flash/cuDNN on the CPU; sinks never
            want = "SDPA has no attention-sink" if r["sink"] else "backend runs on CUDA GPUs only"
            assert r["status"].startswith("declined: ") and want in r["status"], r
            continue
        assert r["status"] == "ok", r
        assert 0 < r["max_rel_err"] < tol and r["tflops"] == pytest.approx(r["flops"] / r["median_ms"] / 1e9)
        assert r["checked"].startswith("batch 0, kv head 0")
    providers = {r["provider"] for r in rows}
    assert "turbo:TORCH" in providers  # the reference is always there on the CPU
    if no_triton is None:
        assert {"turbo:TRITON", "turbo:TRITON:deterministic"} <= providers
        det = [r for r in rows if r["provider"] == "turbo:TRITON:deterministic"]
        assert len(det) == 3 and all(r["pass"] == "bwd" and r["compare_to"] == "turbo:TRITON" for r in det)
        for r in det:
            base = next(b for b in rows if b["case"] == r["case"] and b["provider"] == "turbo:TRITON")
            assert r["nondet_ratio"] == pytest.approx(base["median_ms"] / r["median_ms"])
    assert "sdpa:cudnn: declined: SDPA's cudnn backend runs on CUDA GPUs only (this run is on cpu)" \
        in capsys.readouterr().out

    # the report of these rows: tables per pass and mask, attention's short labels
    page_path = tmp_path / "perf.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page_path), "--no-plots"]) == 0
    page = page_path.read_text()
    for heading in ("#### fwd", "#### bwd", "##### causal", "##### window (7, 0)", "##### full"):
        assert heading in page
    assert "| tiny mha b1 s32 h2 d32 |" in page and "| tiny gqa-window-sink b1 s32 h2/1 d32 sink |" in page
    assert "| tiny mla b1 s32 h1 d48/32 |" in page
    if no_triton is None:
        assert "`turbo:TRITON:deterministic` vs `turbo:TRITON`" in page


def _attn_row(provider, ms, *, pass_="bwd", seq=4096, role=None, **extra):
    r = {"suite": "attention", "case": f"m/{pass_} s{seq}", "model": "m", "pass": pass_, "mask": "causal",
         "batch": 4, "seq_q": seq, "seq_kv": seq, "h_q": 32, "h_kv": 8, "d_qk": 128, "d_v": 128, "sink": False,
         "provider": provider, "status": "ok", "median_ms": ms, "tflops": 10.0 / ms}
    if role:
        r["role"] = role
    r.update(extra)
    return r


def _page(tmp_path, rows, *, plots_wanted: bool) -> str:
    """The performance page of one recorded run of ``rows`` (plots under ``tmp_path/perf``)."""
    run = {"run": "r", "commit": "c", "dirty": False, "date": "2026-01-01T00:00:00+00:00", "device": "Fake",
           "driver": None, "versions": {}, "command": "turbo bench attention"}
    dataset.append(rows, run, tmp_path / "data")
    written = markdown.write_performance(tmp_path / "data", tmp_path / "perf.md", plots_wanted=plots_wanted)
    assert written.plots_skipped == (None if plots_wanted else "turned off (--no-plots)")
    return (tmp_path / "perf.md").read_text()


def test_report_ratios_and_the_deterministic_pair_by_hand(tmp_path):
    rows = []
    for seq, (cudnn, flash, triton, det) in {4096: (2.0, 4.0, 2.5, 5.0), 8192: (4.0, 8.0, 2.0, 8.0)}.items():
        rows += [_attn_row("sdpa:cudnn", cudnn, seq=seq, role="baseline"),
                 _attn_row("sdpa:flash", flash, seq=seq, role="reference"),
                 _attn_row("turbo:TRITON", triton, seq=seq),
                 _attn_row("turbo:TRITON:deterministic", det, seq=seq, compare_to="turbo:TRITON")]
    declined = _attn_row("sdpa:flash", 1.0, seq=2048, role="reference",
                         status="declined: SDPA's flash backend cannot run this case: head dims differ")
    rows.append({k: v for k, v in declined.items() if k not in ("median_ms", "tflops")})
    page = _page(tmp_path, rows, plots_wanted=False)
    head = [c.strip() for c in next(ln for ln in page.splitlines() if ln.startswith("| case |")).strip("|").split(" | ")]
    assert head[1:5] == ["`sdpa:cudnn`", "`sdpa:flash`", "`turbo:TRITON`", "`turbo:TRITON:deterministic`"]
    assert head[-1] == "`turbo:TRITON:deterministic` vs `turbo:TRITON`"
    line = next(ln for ln in page.splitlines() if ln.startswith("| m b4 s4096 h32/8 d128 |"))
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    # TRITON 2.5 ms: vs cuDNN 2/2.5 = 0.80x, vs flash 4/2.5 = 1.60x; deterministic 5 ms: 0.40x, 0.80x; vs TRITON 0.50x
    assert cells[5:] == ["0.80x", "**1.60x**", "0.40x", "0.80x", "0.50x"]
    assert "- `sdpa:flash`: declined: SDPA's flash backend cannot run this case: head dims differ (1 case)" in page
    # geomean of the deterministic pair: sqrt(0.5 * 0.25); the headline of the deterministic
    # provider is cuDNN (geomean sqrt(0.4 * 0.5)), never the turbo pair, although that is lower
    geo = next(ln for ln in page.splitlines() if ln.startswith("| bwd · causal | `turbo:TRITON:deterministic` | `turbo:TRITON`"))
    assert f"{(0.5 * 0.25) ** 0.5:.2f}x" in geo
    heads = compare.headline([c for g in compare.groups(rows) for c in compare.comparisons(g)])
    assert {(c.provider, c.reference) for c in heads} == {("turbo:TRITON", "sdpa:cudnn"),
                                                          ("turbo:TRITON:deterministic", "sdpa:cudnn")}


def test_cli_pass_options(capsys):
    def err():
        return " ".join(capsys.readouterr().err.split())

    assert main(["bench", "attention", "--quick", "--passes", "dgrad"]) == 2
    assert "--passes: attention has no pass dgrad (it has fwd, bwd)" in err()
    assert main(["bench", "gemm-fp8", "--quick", "--passes", "bwd"]) == 2
    assert "--passes: gemm-fp8 has no pass bwd" in err()
    assert main(["bench", "attention", "--quick", "--granularities", "rowwise"]) == 2
    assert "--granularities applies to gemm-fp8, grouped-gemm-fp8, not to attention" in err()


def test_attention_plots_written(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_attn_row(p, ms, pass_=pass_, seq=seq, role=role, **({"compare_to": "turbo:TRITON"} if "det" in p else {}))
            for pass_ in ("fwd", "bwd") for seq in (4096, 8192)
            for p, ms, role in (("sdpa:cudnn", 2.0, "baseline"), ("sdpa:flash", 3.0, "reference"),
                                ("turbo:TRITON", 2.5, None), ("turbo:TRITON:deterministic", 4.0, None))
            if pass_ == "bwd" or "det" not in p]
    _page(tmp_path, rows, plots_wanted=True)
    for name in ("attention-fake-r-fwd.png", "attention-fake-r-bwd.png", "summary.png"):
        assert (tmp_path / "perf" / name).stat().st_size > 1000


def test_sdpa_providers_through_the_math_backend_on_cpu(monkeypatch):
    # The SDPA providers' plumbing ([b, h, s, d] views, enable_gqa, the backward on the retained
    # graph, the checked slice) on the CPU: both columns run SDPA's math backend here.
    real = suite.sdpa_decline

    def decline(name, case, inputs):
        reason = real(name, case, inputs)
        return None if reason and "runs on CUDA GPUs only" in reason else reason

    monkeypatch.setattr(suite, "sdpa_decline", decline)
    monkeypatch.setitem(suite._SDPA, "sdpa:cudnn", "MATH")
    monkeypatch.setitem(suite._SDPA, "sdpa:flash", "MATH")
    gqa = ("gqa", 4, 2, 16, 16, True, (-1, -1), False, (24,))
    monkeypatch.setitem(suite.QUICK, "tiny", [*suite.QUICK["tiny"], gqa])
    rows = suite.run(quick=True, tokens=48, models=None, providers=["sdpa:cudnn", "sdpa:flash"],
                     include_reference=False, warmup=0, iters=1, device="cpu")
    assert len(rows) == 2 * 2 * 4  # 2 providers x fwd/bwd x 4 layers
    for r in rows:
        if r["sink"]:
            assert r["status"] == "declined: SDPA has no attention-sink logit (GPT-OSS sinks)", r
            continue
        assert r["status"] == "ok" and r["max_rel_err"] < r["tolerance"], r
        assert r["batch"] == 48 // r["seq_q"]
    assert {r["ratio"] for r in rows if r["provider"] == "sdpa:cudnn" and r["status"] == "ok"} == {1.0}
