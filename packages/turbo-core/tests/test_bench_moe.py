"""``turbo bench moe``: the case list and its byte counts worked out by hand, a quick CPU run
(TORCH; TRITON under the interpreter when turbo-triton is there) giving ok rows whose outputs
match float64 math, the accuracy check seeing a wrong output, and the report of the rows (the
index ops' wall-clock rows in tables of their own, with the device time beside)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from turbo_core.bench import dataset
from turbo_core.bench.suites import moe
from turbo_core.bench.suites.norm import _max_rel_err
from turbo_core.cli import main


def _case(cs, op, pass_, model, tokens):
    found = [c for c in cs if (c.op, c.pass_, c.model, c.tokens) == (op, pass_, model, tokens)]
    assert len(found) == 1, (op, pass_, model, tokens)
    return found[0]


def test_case_list_and_bytes_by_hand():
    cs = moe.cases(None, False, None)
    # 2 token counts x 3 models x ((routing, permute, unpermute) x (fwd, bwd) + 4 index ops), and the
    # 4 index ops at 1, 16 and 128 tokens x 3 models
    assert len(cs) == 2 * 3 * 10 + 3 * 3 * 4 and {c.tokens for c in cs} == {1, 16, 128, 4096, 16384}
    assert {c.model for c in cs} == {"deepseek-v3", "qwen3-235b-a22b", "mixtral-8x7b"}
    assert len({c.label for c in cs}) == len(cs)
    assert {(c.op, c.pass_) for c in cs if c.tokens < 4096} == set(moe.INDEX_OPS)
    assert all((c.fields.get("timing") == moe.WALL) == ((c.op, c.pass_) in moe.INDEX_OPS) for c in cs)

    # DeepSeek-V3, 4096 tokens: E=256, K=8, H=7168, N=32768 permuted rows; row map 4 * (1 + 2 * 8) per token
    c = _case(cs, "moe_routing", "fwd", "deepseek-v3", 4096)
    assert (c.hidden, c.dtype) == (256, torch.float32)
    assert c.bytes == 4096 * 256 * 4 + 2 * 4096 * 256 * 4 + 4096 * 256  # logits; scores, probs; bool map
    assert c.fields == {"experts": 256, "topk": 8, "expert_groups": 8, "selected_groups": 4,
                        "score_function": "sigmoid"}
    c = _case(cs, "moe_routing", "bwd", "deepseek-v3", 4096)
    assert c.bytes == 3 * 4096 * 256 * 4 + 4096 * 256 + 4096 * 256 * 4  # logits, 2 grads; map; grad_logits
    c = _case(cs, "moe_permute", "fwd", "deepseek-v3", 4096)
    assert (c.hidden, c.dtype) == (7168, torch.bfloat16)
    assert c.bytes == 4096 * 7168 * 2 + 4096 * 68 + 4096 * 8 * 4 + 32768 * 7168 * 2 + 32768 * 4 == 529_022_976
    c = _case(cs, "moe_unpermute", "bwd", "deepseek-v3", 4096)
    # read grad [T, H], permuted [N, H], map, K probs per token; write grad_permuted [N, H], dense grad probs [T, E]
    assert c.bytes == 4096 * 7168 * 2 + 32768 * 7168 * 2 + 4096 * 68 + 4096 * 32 + 32768 * 7168 * 2 + 4096 * 256 * 4

    # Mixtral, 16384 tokens: E=8, K=2, H=4096, N=32768; row map 4 * (1 + 4) = 20 B per token
    c = _case(cs, "moe_permute", "bwd", "mixtral-8x7b", 16384)
    assert c.bytes == 32768 * 4096 * 2 + 32768 * 4 + 16384 * 20 + 16384 * 4096 * 2 + 16384 * 8 * 4
    c = _case(cs, "moe_unpermute", "fwd", "mixtral-8x7b", 16384)
    assert c.bytes == 32768 * 4096 * 2 + 16384 * 20 + 16384 * 2 * 4 + 16384 * 4096 * 2
    c = _case(cs, "moe_routing", "fwd", "qwen3-235b-a22b", 16384)
    assert c.bytes == 16384 * 128 * 13 and c.fields["score_function"] == "softmax"

    # index ops, DeepSeek-V3 at 4096 tokens: int32 ids and fp32 probs [T, K]; bool map and fp32 probs [T, E]
    c = _case(cs, "indices_to_multihot", "fwd", "deepseek-v3", 4096)
    assert (c.hidden, c.dtype) == (256, torch.float32)
    assert c.bytes == 4096 * 8 * 4 * 2 + 4096 * 256 * (1 + 4)
    assert _case(cs, "indices_to_multihot", "bwd", "deepseek-v3", 4096).bytes == 3 * 4096 * 8 * 4  # ids, gathered, out
    assert _case(cs, "tokens_per_expert_to_mask", "fwd", "deepseek-v3", 4096).bytes == 256 * 4 + 4096 * 8 * 8
    c = _case(cs, "moe_permute_preprocess", "fwd", "mixtral-8x7b", 1)  # bool map; row map [1, 17]; counts; flags
    assert (c.dtype, c.bytes) == (torch.bool, 8 + 4 * 17 + 8 * 8 + 8)

    assert {c.tokens for c in moe.cases(8192, False, ["mixtral-8x7b"])} == {8192}
    assert len(moe.cases(8192, False, ["mixtral-8x7b"])) == 10
    assert {c.model for c in moe.cases(None, False, ["mixtral-8x7b"])} == {"mixtral-8x7b"}
    assert len(moe.cases(None, True, None)) == 2 * 10 + 2 * 4  # quick: 2 tiny models at 24 tokens, index ops at 1


def test_reference_layout_and_accuracy_check_sees_a_wrong_output():
    """The float64 reference follows the spec's layout (expert segments, tokens in order inside),
    from the routing map alone; a provider that swaps two permuted rows gets a large error."""
    gen = torch.Generator().manual_seed(1)
    case = _case(moe.cases(None, True, ["tiny"]), "moe_permute", "fwd", "tiny", 24)
    inputs = moe.make_inputs(case, "cpu", gen)
    tokens, row_id_map, probs, routing_map = inputs
    assert routing_map.sum(1).eq(2).all() and row_id_map.shape == (24, 17)
    permuted, pprobs = moe.reference(case, inputs)
    expected = [(e, t) for e in range(8) for t in range(24) if routing_map[t, e]]  # by hand: expert-major
    assert len(expected) == 48
    for row, (e, t) in enumerate(expected):
        assert torch.equal(permuted[row], tokens[t]) and pprobs[row].item() == probs[t, e].item()
    outs = moe.torch_provider(case, False)(inputs)()
    assert _max_rel_err(outs, [permuted, pprobs]) == 0.0
    outs[0] = outs[0][torch.tensor([1, 0, *range(2, 48)])]
    assert _max_rel_err(outs, [permuted, pprobs]) > 0.1


def test_index_references_by_hand_and_a_wrong_output_seen():
    """The float64 references of the index ops, worked out by hand on a 3-token map; the row map
    agrees with the reference backend's at the quick shapes, and a wrong output shows."""
    m = moe.MoeModel(4, 2, 8)
    routing_map = torch.tensor([[1, 0, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    # expert-major rows: e0 (t0, t2) -> 0, 1; e1 (t1) -> 2; e2 (t0, t1) -> 3, 4
    row_id_map, counts, overflow, dispatched = moe._preprocess_reference(routing_map)
    assert row_id_map.tolist() == [[0, 3, -1, -1, 0, 2, -1, -1, 2], [2, 4, -1, -1, 1, 2, -1, -1, 2],
                                   [1, -1, -1, -1, 0, -1, -1, -1, 1]]
    assert counts.tolist() == [2, 1, 2, 0] and overflow.tolist() == [0] and dispatched.tolist() == [3]

    indices = torch.tensor([[2, -1], [0, 3]], dtype=torch.int32)
    probs = torch.tensor([[0.5, 0.25], [0.125, 1.0]])
    fwd = moe._case("indices_to_multihot", "fwd", "hand", 2, m)
    got_map, got_probs = moe.reference(fwd, (indices, probs))
    assert got_map.tolist() == [[0, 0, 1, 0], [1, 0, 0, 1]]
    assert got_probs.tolist() == [[0, 0, 0.5, 0], [0.125, 0, 0, 1.0]]
    grad = torch.arange(8.0).reshape(2, 4)
    assert moe.reference(moe._case("indices_to_multihot", "bwd", "hand", 2, m), (grad, indices))[0].tolist() == [
        [2.0, 0.0], [4.0, 7.0]]
    mask = moe._case("tokens_per_expert_to_mask", "fwd", "hand", 2, m)  # T K = 4 positions, 3 tokens routed
    assert moe.reference(mask, (torch.tensor([1, 0, 2, 0], dtype=torch.int32),))[0].tolist() == [1, 1, 1, 0]

    gen = torch.Generator().manual_seed(2)
    for case in (c for c in moe.cases(None, True, None) if (c.op, c.pass_) in moe.INDEX_OPS):
        inputs = moe.make_inputs(case, "cpu", gen)
        refs = moe.reference(case, inputs)
        outs = moe.torch_provider(case, False)(inputs)()
        assert _max_rel_err(outs, refs) == 0.0, case.label
        first = outs[0].view(-1)
        first[0] = ~first[0] if first.dtype == torch.bool else first[0] + 3
        assert _max_rel_err(outs, refs) > 0, case.label


def test_quick_cli_run_and_report(tmp_path):
    data = tmp_path / "data"
    assert main(["bench", "moe", "--quick", "--include-reference", "--providers", "torch", "turbo:TORCH",
                 "--record", str(data)]) == 0
    rows = [r for r in dataset.load(data) if r["op"] != "fused_mega_moe"]  # test_bench_moe_mega.py checks those
    assert len(rows) == 2 * 28 and {r["provider"] for r in rows} == {"torch", "turbo:TORCH"}
    by_case = {c.label: c for c in moe.cases(None, True, None)}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["bytes"] == by_case[r["case"]].bytes and r["experts"] in (8, 16)
        assert r["gbps"] == pytest.approx(r["bytes"] / r["median_ms"] / 1e6)
        if (r["op"], r["pass"]) in moe.INDEX_OPS:  # the wall clock per eager call, the device time beside it
            assert r["timing"] == moe.WALL and r["calls"] == moe.QUICK_CALLS and r["device_ms"] > 0
            assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] and r["device_p10_ms"] <= r["device_p90_ms"]
            assert r["max_rel_err"] == 0.0, r  # index ops: exact
        else:
            assert "timing" not in r and "device_ms" not in r
            assert r["max_rel_err"] < (1e-6 if r["op"] == "moe_routing" else 1e-2), r  # fp32 router, bf16 sums

    page_path = tmp_path / "perf.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page_path), "--no-plots"]) == 0
    page = page_path.read_text()
    assert "#### fwd" in page and "#### bwd" in page and "`turbo:TORCH` vs `torch`" in page
    for label in ("tiny moe_routing 24x8", "tiny-grouped moe_permute 24x48", "tiny moe_unpermute 24x40"):
        assert f"| {label} |" in page
    # the index ops: tables of their own under each pass, headlined apart from the device-time tables
    assert page.count("##### wall clock") == 2 and "| fwd · wall clock | `turbo:TORCH` | `torch` | 12 |" in page
    assert "Cells: GB/s · median wall clock per eager call · median device time" in page
    r = next(r for r in rows if r["op"] == "moe_permute_preprocess" and r["provider"] == "torch" and r["tokens"] == 1
             and r["model"] == "tiny")
    cell = f"{r['gbps']:.4g} · {r['median_ms']:.3g} ms · device {r['device_ms']:.3g} ms · {r['copy_fraction']:.0%}"
    assert f"| tiny moe_permute_preprocess 1x8 | {cell} |" in page
    assert "device" not in page.split("##### wall clock")[0].split("#### fwd")[1]  # device-time rows: as before


# A fresh process: the interpreter must be on before triton (and triton.language) is first imported.
TRITON_RUN = """
import json
from turbo_core.bench.suites import moe
rows = moe.run(quick=True, tokens=None, models=["tiny"], providers=["turbo:TRITON"], include_reference=False,
               warmup=0, iters=1, device="cpu")
print("ROWS" + json.dumps(rows))
"""


def test_quick_triton_rows_under_the_interpreter(tmp_path):
    pytest.importorskip("turbo_triton", reason="turbo-triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TURBO_PLUGINS": "turbo_triton.plugin"}
    done = subprocess.run([sys.executable, "-c", TRITON_RUN], env=env, capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("ROWS"))[4:])
    assert len(rows) == 6 + 2 * 4  # the 6 ops at 24 tokens; the 4 index ops at 1 and 24
    for r in rows:
        assert r["provider"] == "turbo:TRITON" and r["status"] == "ok", r
        assert r["max_rel_err"] < (1e-6 if r["op"] == "moe_routing" else 1e-2), r
        if (r["op"], r["pass"]) in moe.INDEX_OPS:
            assert r["max_rel_err"] == 0.0 and r["device_ms"] > 0 and r["timing"] == moe.WALL, r
