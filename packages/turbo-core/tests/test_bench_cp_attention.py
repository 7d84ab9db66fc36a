"""``turbo bench cp-attention`` and ``turbo bench --world``.

On the CPU: the quick suite over two gloo ranks (every provider's row complete and consistent, the
turbo methods' results within the gates against float64 attention over the whole sequence, torch's
context parallelism saying why it does not run here), the Ulysses 2 x ring 2 method over four gloo
ranks, the accuracy check failing on a wrong result, and ``--world`` reaching the suites that start
their own ranks. On two GPUs: the suite over NCCL with torch's context parallelism measured beside
the turbo methods (what the CPU cannot show).
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from ranks_harness import needs_two_gpus

from turbo_core.bench.suites import cp_attention, moe_dispatch
from turbo_core.bench.suites.attention import AttnCase, reference_slice, tolerance_of
from turbo_core.cli.main import main
from turbo_core.ops import usp_positions

BF16_TOL = tolerance_of(torch.bfloat16)


def _run(**kw):
    args = {"quick": True, "tokens": None, "models": None, "providers": None, "include_reference": False,
            "warmup": 1, "iters": 2, "device": "cpu"} | kw
    return cp_attention.run(**args)


def _check_measured(rows: list[dict]) -> None:
    """Every measured row: the throughput of its time, the ratio to the ideal of its case, the gates."""
    ideal = {r["case"]: r for r in rows if r["provider"] == cp_attention.IDEAL}
    for r in rows:
        if r["status"] != "ok":
            continue
        assert r["median_ms"] > 0 and r["p10_ms"] <= r["median_ms"] <= r["p90_ms"], r
        assert r["tflops"] == pytest.approx(r["flops"] / r["median_ms"] / 1e9)
        assert r["ratio"] == pytest.approx(ideal[r["case"]]["median_ms"] / r["median_ms"])
        if r["dtype"] == "bf16":
            assert 0 < r["max_rel_err"] <= BF16_TOL, r
        else:  # FP8: the attention spec's SNR gate against float64
            assert r["snr_db"] >= 20.0 and r["max_rel_err"] < 0.25, r


@pytest.mark.distributed
def test_quick_suite_over_two_gloo_ranks():
    rows = _run()
    assert len(rows) == 2 * 2 * 2 * len(cp_attention.PROVIDERS)  # seq 64, 128 x fwd, bwd x bf16, fp8
    assert {(r["seq_q"], r["pass"], r["dtype"]) for r in rows} == {
        (s, p, d) for s in (64, 128) for p in ("fwd", "bwd") for d in ("bf16", "fp8")}
    for r in rows:
        assert r["suite"] == "cp-attention" and r["world"] == 2 and r["mode"] == r["dtype"]
        assert r["causal"] and r["ring_layout"] == "zigzag" and (r["h_q"], r["h_kv"], r["d_qk"]) == (4, 2, 16)
        want_flops = AttnCase("quick", None, r["pass"], 1, r["seq_q"], r["seq_q"], 4, 2, 16, 16, True).flops
        assert r["flops"] == want_flops
        by = r["provider"]
        if by == cp_attention.IDEAL:
            assert r["status"] == "ok" and r["local_seq"] == r["seq_q"] // 2
            # the whole case at the single-GPU kernel's throughput on half the sequence, times 2
            assert r["median_ms"] == pytest.approx(2 * r["local_ms"]) and r["ratio"] == pytest.approx(1.0)
        elif by in ("turbo:ulysses", "turbo:ring"):
            assert r["status"] == "ok", r
            assert (r["ulysses_size"], r["ring_size"]) == ((2, 1) if by == "turbo:ulysses" else (1, 2))
            assert r["backend"] == "TORCH"  # the dispatcher's selection on the CPU
        elif by == "turbo:both":
            assert r["status"].startswith("skipped: both") and "needs an even world >= 4, got 2" in r["status"]
        elif r["dtype"] == "fp8":
            assert r["status"] == "skipped: torch's context_parallel runs SDPA, which has no FP8 attention"
        elif r["status"] != "ok":  # torch's CP over gloo: its reason, or numbers where a torch runs it
            assert r["status"].startswith("declined: torch's context_parallel failed on cpu: "), r
            assert "NotImplementedError" in r["status"]
    _check_measured(rows)
    torch_ran = [r for r in rows if r["provider"] == cp_attention.TORCH_CP and r["status"] == "ok"]
    for r in rows:
        if r["provider"].startswith("turbo:") and r["status"] == "ok":
            peer = [t for t in torch_ran if t["case"] == r["case"]]
            assert r["torch_cp_ratio"] == (pytest.approx(peer[0]["median_ms"] / r["median_ms"]) if peer else None)


@pytest.mark.distributed
def test_ulysses_inside_ring_outside_over_four_gloo_ranks():
    rows = _run(tokens=64, passes=["bwd"], providers=["turbo:both"], world=4)
    assert [(r["provider"], r["dtype"]) for r in rows] == [
        ("ideal", "bf16"), ("turbo:both", "bf16"), ("ideal", "fp8"), ("turbo:both", "fp8")]
    for r in rows:
        assert r["status"] == "ok", r
        if r["provider"] == "turbo:both":
            assert (r["ulysses_size"], r["ring_size"]) == (2, 2)
            assert r["note"] == "Ulysses 2 inside x ring 2 outside"
    _check_measured(rows)


def test_the_accuracy_check_sees_rows_out_of_place():
    """A rank's results checked at its own positions pass; the same results taken for another
    rank's positions (a layout mix-up) fail, and so does a result off by one ulp of bf16 too many."""
    g = torch.Generator().manual_seed(0)
    seq, case = 32, AttnCase("t", None, "fwd", 1, 32, 32, 4, 2, 16, 16, True)
    q, k, v = (torch.randn(1, seq, h, 16, generator=g).to(torch.bfloat16) for h in (4, 2, 2))
    (ref,) = reference_slice(case, {"q": q, "k": k, "v": v, "dout": None, "sink": None})
    full = torch.zeros(1, seq, 4, 16, dtype=torch.float64)
    full[0, :, :2] = ref
    mine = usp_positions(seq, ring_rank=0, ring_size=2, ring_layout="zigzag")
    other = usp_positions(seq, ring_rank=1, ring_size=2, ring_layout="zigzag")
    got = full[:, mine].to(torch.bfloat16)
    err, snr = cp_attention.local_error([got], [ref], mine)
    assert 0 < err < BF16_TOL and snr > 40
    err, snr = cp_attention.local_error([got], [ref], other)
    assert err > 10 * BF16_TOL and snr < 10
    off = got.double().clone()
    off[0, 3, 1] += 0.1 * ref.abs().max()
    assert cp_attention.local_error([off], [ref], mine)[0] == pytest.approx(0.1, abs=BF16_TOL)


def test_factorization_and_what_cannot_run():
    assert cp_attention.factorization("ulysses", 8) == (8, 1)
    assert cp_attention.factorization("ring", 8) == (1, 8)
    assert cp_attention.factorization("both", 8) == (2, 4)
    m = cp_attention.MODELS["llama3.1-70b"]
    assert cp_attention.method_skip("both", 8, m) is None and cp_attention.method_skip("ulysses", 8, m) is None
    assert cp_attention.method_skip("both", 6, m) is None  # Ulysses 2 x ring 3
    assert "got 3" in cp_attention.method_skip("both", 3, m)
    assert "do not split over a Ulysses group of 16" in cp_attention.method_skip("ulysses", 16, m)


def test_bad_settings_are_named_before_any_rank_starts():
    with pytest.raises(ValueError, match="tokens: a sequence of 30 .* must divide by 4"):
        _run(tokens=30)
    with pytest.raises(ValueError, match="models: unknown nope .*cp-attention has llama3.1-8b, llama3.1-70b"):
        _run(quick=False, models=["nope"])
    with pytest.raises(ValueError, match="providers: unknown turbo:TRITON"):
        _run(providers=["turbo:TRITON"])
    with pytest.raises(ValueError, match="passes: unknown dgrad"):
        _run(passes=["dgrad"])
    with pytest.raises(ValueError, match="world: expected a count of ranks >= 1, got 0"):
        _run(world=0)
    rows = _run(world=1)  # one rank: every row says why nothing ran
    assert rows and all(r["status"] == "skipped: needs 2 or more cpu devices (found 1)" for r in rows)


@pytest.mark.parametrize("suite,module", [("cp-attention", cp_attention), ("moe-dispatch", moe_dispatch)])
def test_world_reaches_the_rank_suites(suite, module, monkeypatch, tmp_path):
    seen = []

    @functools.wraps(module.run)  # the CLI reads the suite's options from this signature
    def fake_run(**kw):
        seen.append(kw)
        return []

    monkeypatch.setattr(module, "run", fake_run)
    out = tmp_path / "rows.json"
    assert main(["bench", suite, "--quick", "--world", "3", "--out", str(out)]) == 1  # no rows: no turbo ran
    assert [kw["world"] for kw in seen] == [3]
    assert "--world 3" in json.loads(out.read_text())["run"]["command"]


def test_world_is_refused_where_it_cannot_apply(capsys):
    def said() -> str:  # the console's message, its line wrapping undone
        return " ".join(capsys.readouterr().err.split())

    assert main(["bench", "gemm", "--quick", "--world", "2"]) == 2
    assert "--world applies to moe-dispatch, async-tp, cp-attention, not to gemm" in said()
    assert main(["bench", "cp-attention", "--quick", "--world", "0"]) == 2
    assert "--world 0: expected a count of ranks >= 1, got 0" in said()
    assert main(["bench", "cp-attention", "--device", "cuda", "--world", "999"]) == 2
    assert f"--world 999: 999 ranks need 999 GPUs (one a rank); {torch.cuda.device_count()} visible" in said()
    assert main(["bench", "moe-dispatch", "--quick", "--world", "3"]) == 2  # 16 experts over 3 ranks
    assert "world: 3 ranks do not split the experts of quick (16) evenly" in said()


@pytest.mark.gpu
@needs_two_gpus
def test_the_suite_over_nccl_with_torch_context_parallel():
    """Two GPUs, Llama-3.1-8B heads at sequence 4096: the turbo methods and torch's context
    parallelism (SDPA, its head-tail split, GQA) all measured and within the gates."""
    rows = _run(quick=False, tokens=4096, models=["llama3.1-8b"], device="cuda", world=2)
    for r in rows:
        if r["provider"] == "turbo:both" or (r["provider"] == cp_attention.TORCH_CP and r["dtype"] == "fp8"):
            assert r["status"].startswith("skipped: "), r
        else:
            assert r["status"] == "ok", r
    _check_measured(rows)
