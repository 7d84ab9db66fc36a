"""``turbo bench moe``: the case list and its byte counts worked out by hand, a quick CPU run
(TORCH; TRITON under the interpreter when turbo-triton is there) giving ok rows whose outputs
match float64 math, the accuracy check seeing a wrong output, and the report of the rows."""

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
    # 2 token counts x 3 models x (routing, permute, unpermute) x (fwd, bwd)
    assert len(cs) == 36 and {c.tokens for c in cs} == {4096, 16384}
    assert {c.model for c in cs} == {"deepseek-v3", "qwen3-235b-a22b", "mixtral-8x7b"}
    assert len({c.label for c in cs}) == 36

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

    assert {c.tokens for c in moe.cases(8192, False, ["mixtral-8x7b"])} == {8192}
    assert {c.model for c in moe.cases(None, False, ["mixtral-8x7b"])} == {"mixtral-8x7b"}
    assert len(moe.cases(None, True, None)) == 12  # quick: 2 tiny models x 6, 24 tokens


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


def test_quick_cli_run_and_report(tmp_path):
    data = tmp_path / "data"
    assert main(["bench", "moe", "--quick", "--include-reference", "--providers", "torch", "turbo:TORCH",
                 "--record", str(data)]) == 0
    rows = dataset.load(data)
    assert len(rows) == 24 and {r["provider"] for r in rows} == {"torch", "turbo:TORCH"}
    by_case = {c.label: c for c in moe.cases(None, True, None)}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["bytes"] == by_case[r["case"]].bytes and r["experts"] in (8, 16)
        assert r["gbps"] == pytest.approx(r["bytes"] / r["median_ms"] / 1e6)
        assert r["max_rel_err"] < (1e-6 if r["op"] == "moe_routing" else 1e-2), r  # fp32 router, bf16 sums

    page_path = tmp_path / "perf.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page_path), "--no-plots"]) == 0
    page = page_path.read_text()
    assert "#### fwd" in page and "#### bwd" in page and "`turbo:TORCH` vs `torch`" in page
    for label in ("tiny moe_routing 24x8", "tiny-grouped moe_permute 24x48", "tiny moe_unpermute 24x40"):
        assert f"| {label} |" in page


# A fresh process: the interpreter must be on before triton (and triton.language) is first imported.
TRITON_RUN = """
import json
from turbo_core.bench.suites import moe
from turbo_core.bench.suites.norm import run_bandwidth
rows = run_bandwidth(moe, moe.cases(None, True, ["tiny"]), providers=["turbo:TRITON"], include_reference=False,
                     warmup=0, iters=1, device="cpu", copy_gbps=1.0)
print("ROWS" + json.dumps(rows))
"""


def test_quick_triton_rows_under_the_interpreter(tmp_path):
    pytest.importorskip("turbo_triton", reason="turbo-triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TURBO_PLUGINS": "turbo_triton.plugin"}
    done = subprocess.run([sys.executable, "-c", TRITON_RUN], env=env, capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("ROWS"))[4:])
    assert len(rows) == 6
    for r in rows:
        assert r["provider"] == "turbo:TRITON" and r["status"] == "ok", r
        assert r["max_rel_err"] < (1e-6 if r["op"] == "moe_routing" else 1e-2), r
