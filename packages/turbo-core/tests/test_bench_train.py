"""``turbo bench train``: quick CPU runs through the CLI (TORCH reference backend) giving rows with
every field and turbo bf16's loss beside plain PyTorch's; every provider once on the tiny Llama
with the rows recorded and rendered by ``turbo bench report``; a failing provider reported while
the suite goes on; and each model's config honored: the real widths' parameter counts by hand,
grouped-query attention reaching the attention call and matching a float64 hand computation, the
MoE routing (DeepSeek-V3's groups, sigmoid, scale and local experts dropping other ranks' copies;
Mixtral/Qwen3's renormalized softmax) against a float64 token-by-token computation.
"""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch
import torch.nn.functional as F

from turbo_core.bench import dataset, train_loop
from turbo_core.bench.suites import train
from turbo_core.bench.train_loop import step_fn
from turbo_core.bench.train_models import MODELS, QUICK_MODELS
from turbo_core.cli import main
from turbo_core.demo import DemoConfig, PlainDecoder, TurboDecoder
from turbo_core.demo import model as demo_model
from turbo_core.demo.model import MoEFFN, SelfAttention
from turbo_core.demo.plain import _Attention, _MoE
from turbo_core.modules import GroupedLinear

# Two bf16 models whose ops round to bf16 at different places (the reference backend's fused SwiGLU
# with probs and fp32 unpermute sum vs eager silu * up and index_add) give logits that differ by
# about one bf16 rounding unit (2^-8 relative), and the fp32 cross-entropy over them differs by at
# most about that much relative to the loss. Measured on the four tiny models after the quick
# steps: |turbo bf16 - torch| <= 1e-3 on losses near 5 (2e-4 relative).
BF16_LOSS_RTOL = 2.0**-8
# FP8 recipes (E4M3 operands on every projection and expert) against plain bf16: measured up to
# 1e-2 absolute on losses near 5 after the quick steps.
FP8_LOSS_RTOL = 1e-2


def _check_rows(rows: list[dict], name: str, steps_timed: int) -> None:
    """Rows of torch and turbo:bf16 on quick model ``name``: every field, consistent with each other."""
    model = QUICK_MODELS[name]
    cfg = model.config
    assert [r["provider"] for r in rows] == ["torch", "turbo:bf16"]
    with torch.device("meta"):
        params = sum(p.numel() for p in TurboDecoder(cfg).parameters())
    torch_ms, turbo_ms = rows[0]["median_ms"], rows[1]["median_ms"]
    for r in rows:
        assert r["status"] == "ok", r
        assert [f for f in train.OK_FIELDS if f not in r] == [], r
        assert (r["suite"], r["model"], r["pass"], r["timing"], r["baseline"]) == (
            "train", name, "step", "wall clock", "torch.compile")
        assert (r["batch"], r["seq"], r["tokens"], r["hidden"], r["layers"], r["params"]) == (
            1, model.seq, model.tokens, cfg.d_model, cfg.layers, params)
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["tokens_per_s"] == pytest.approx(model.tokens / (r["median_ms"] * 1e-3))
        assert r["peak_bytes"] is None  # the CPU has no allocator statistics
        assert math.isfinite(r["loss"]) and math.isfinite(r["init_loss"]) and r["loss_steps"] == train.QUICK_LOSS_STEPS
        assert r["torch_loss"] == rows[0]["loss"]
        assert r["ratio"] is None  # torch.compile did not run
        assert r["bf16_ratio"] == pytest.approx(turbo_ms / r["median_ms"])
    assert rows[0]["loss_diff"] == 0.0 and rows[0]["vs"] is None
    assert rows[1]["vs"] is None  # neither torch.compile nor another turbo provider ran: every reference
    assert abs(rows[1]["loss_diff"]) <= BF16_LOSS_RTOL * rows[0]["loss"], rows[1]
    assert rows[0]["bf16_ratio"] == pytest.approx(turbo_ms / torch_ms)


def test_quick_cli_run_gives_rows_with_every_field(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: the table's cells unfolded
    out = tmp_path / "train.json"
    assert main(["bench", "train", "--quick", "--models", "llama3.1-8b", "--providers", "torch", "turbo:bf16",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["run"]["command"].endswith("turbo bench train --quick --out " + str(out) + " --models llama3.1-8b "
                                          "--providers torch turbo:bf16")
    _check_rows(doc["rows"], "llama3.1-8b", 3)
    table = capsys.readouterr().out
    assert f"turbo bench train {doc['rows'][0]['case']}: ms per training step" in table
    line = next(line for line in table.splitlines() if "│ torch " in line)
    assert f"{doc['rows'][0]['median_ms']:.2f}" in line and f"{doc['rows'][0]['bf16_ratio']:.2f}x" in line


# The other three models through the suite's run() (one timed step each: the loss run is what is
# compared), one test per model.
@pytest.mark.parametrize("name", [n for n in QUICK_MODELS if n != "llama3.1-8b"])
def test_turbo_bf16_loss_matches_plain_pytorch(name):
    rows = train.run(quick=True, tokens=None, models=[name], providers=["torch", "turbo:bf16"],
                     include_reference=False, warmup=0, iters=1, device="cpu")
    _check_rows(rows, name, 1)


# Every provider kind once, in three runs (each with turbo:bf16 beside it, for bf16_ratio):
# torch.compile through dynamo with the eager backend (CI has no C++ compiler for inductor), the FP8
# recipes on the reference backend, torchao's eager recipes (skipped rows, with the reason, where
# torchao is not installed; its "+compile" rows wrap the converted model in the torch.compile call of
# the first run, and tracing torchao's float8 tensors costs seconds a model on the CPU).
PROVIDER_GROUPS = {
    "compile": ["torch.compile", "turbo:bf16"],
    "turbo-fp8": ["turbo:bf16", "turbo:fp8-tensorwise", "turbo:fp8-rowwise", "turbo:fp8-blockwise"],
    "torchao": ["turbo:bf16", "torchao:fp8-tensorwise", "torchao:fp8-rowwise"],
}


@pytest.mark.parametrize("group", list(PROVIDER_GROUPS))
def test_every_provider_runs_on_the_tiny_llama(group, monkeypatch):
    monkeypatch.setattr(train, "COMPILE_OPTIONS", {"backend": "eager"})
    names = PROVIDER_GROUPS[group]
    rows = train.run(quick=True, tokens=None, models=["llama3.1-8b"], providers=names, include_reference=False,
                     warmup=0, iters=1, device="cpu")
    assert [r["provider"] for r in rows] == [p for p in train.PROVIDERS if p in names]
    have_torchao = importlib.util.find_spec("torchao") is not None
    by = {r["provider"]: r for r in rows}
    for p, r in by.items():
        if p.startswith("torchao:") and not have_torchao:
            assert r["status"] == "skipped: torchao is not importable (pip install torchao)", r
            continue
        assert r["status"] == "ok", r
        assert r["bf16_ratio"] == pytest.approx(by["turbo:bf16"]["median_ms"] / r["median_ms"])
        assert r["ratio"] == (pytest.approx(by["torch.compile"]["median_ms"] / r["median_ms"])
                              if "torch.compile" in by else None)
        rtol = FP8_LOSS_RTOL if "fp8" in p else BF16_LOSS_RTOL
        assert abs(r["loss_diff"]) <= rtol * r["torch_loss"], r
        if p.startswith("torchao:"):
            assert "routers excepted" in r["note"], r


def test_report_compares_each_turbo_provider_with_compile_bf16_and_torchao(tmp_path, monkeypatch):
    """The rows' ratios and ``vs`` lists, and the performance page drawn from them: each turbo
    provider against torch.compile, turbo:bf16 and torchao's compiled recipe of its name, never
    against plain torch. Each provider's measurement is replaced by a fixed one (the page, not the
    training, is under test here)."""
    ms = {p: 10.0 + i for i, p in enumerate(train.PROVIDERS)}

    def measure(provider, model, state, batches, *, timed, **_kw):
        out = {"status": "ok", "loss": 5.0 + ms[provider] / 1000}
        if timed:
            out.update(median_ms=ms[provider], p10_ms=ms[provider] - 1, p90_ms=ms[provider] + 1,
                       tokens_per_s=model.tokens / (ms[provider] * 1e-3), peak_bytes=None)
        return out

    monkeypatch.setattr(train, "_measure", measure)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, real=importlib.util.find_spec:
                        object() if name == "torchao" else real(name, *a))
    rows = train.run(quick=True, tokens=None, models=["llama3.1-8b", "deepseek-v3-ep8"], providers=None,
                     include_reference=False, warmup=0, iters=1, device="cpu")
    assert len(rows) == 2 * len(train.PROVIDERS)
    for r in rows:  # the bf16-wgrad variants need experts: skipped on the dense llama
        dense_variant = r["model"] == "llama3.1-8b" and r["provider"].endswith(train.HP_WGRAD)
        assert r["status"].startswith("skipped: llama3.1-8b has no experts") if dense_variant else r["status"] == "ok"
    moe = {r["provider"]: r for r in rows if r["model"] == "deepseek-v3-ep8"}
    assert moe["turbo:fp8-rowwise+bf16-wgrad"]["vs"] == ["torch.compile", "turbo:bf16", "turbo:fp8-rowwise",
                                                         "torchao:fp8-rowwise+compile"]
    by = {r["provider"]: r for r in rows if r["model"] == "llama3.1-8b"}
    assert by["turbo:fp8-rowwise"]["ratio"] == ms["torch.compile"] / ms["turbo:fp8-rowwise"]
    assert by["turbo:fp8-rowwise"]["bf16_ratio"] == ms["turbo:bf16"] / ms["turbo:fp8-rowwise"]
    assert by["turbo:fp8-rowwise"]["loss_diff"] == pytest.approx((ms["turbo:fp8-rowwise"] - ms["torch"]) / 1000)
    assert by["turbo:bf16"]["vs"] == ["torch.compile"]
    assert by["turbo:fp8-blockwise"]["vs"] == ["torch.compile", "turbo:bf16"]
    assert by["turbo:fp8-rowwise"]["vs"] == ["torch.compile", "turbo:bf16", "torchao:fp8-rowwise+compile"]
    assert by["torch"]["vs"] is None and by["torchao:fp8-rowwise"]["vs"] is None

    data = tmp_path / "data"
    dataset.append(rows, dataset.provenance("cpu", ["turbo", "bench", "train", "--quick"]), data)
    page = tmp_path / "performance.md"
    assert main(["bench", "report", "--data", str(data), "--out", str(page), "--no-plots"]) == 0
    text = page.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| case |") and "`turbo:bf16`" in line)
    pairs = [c.strip() for c in header.split("|") if " vs " in c]
    assert pairs == ["`turbo:bf16` vs `torch.compile`", "`turbo:fp8-tensorwise` vs `torch.compile`",
                     "`turbo:fp8-tensorwise` vs `turbo:bf16`", "`turbo:fp8-tensorwise` vs `torchao:fp8-tensorwise+compile`",
                     "`turbo:fp8-rowwise` vs `torch.compile`", "`turbo:fp8-rowwise` vs `turbo:bf16`",
                     "`turbo:fp8-rowwise` vs `torchao:fp8-rowwise+compile`", "`turbo:fp8-blockwise` vs `torch.compile`",
                     "`turbo:fp8-blockwise` vs `turbo:bf16`"] + [
        f"`turbo:fp8-{r}+bf16-wgrad` vs `{v}`" for r in ("tensorwise", "rowwise")
        for v in ("torch.compile", "turbo:bf16", f"turbo:fp8-{r}", f"torchao:fp8-{r}+compile")]
    assert "Cells: tokens/s · median wall clock" in text
    line = next(line for line in text.splitlines() if line.startswith("| llama3.1-8b "))
    tokens = QUICK_MODELS["llama3.1-8b"].tokens
    assert f"{tokens / (ms['turbo:bf16'] * 1e-3):.0f} · {ms['turbo:bf16']:.3g} ms" in line
    assert f"**{ms['torch.compile'] / ms['turbo:bf16']:.2f}x**" not in line  # turbo:bf16 is slower here
    assert f"{ms['torch.compile'] / ms['turbo:bf16']:.2f}x" in line


def test_a_failing_provider_is_reported_and_the_suite_goes_on(monkeypatch):
    real_build = train.build
    real_find_spec = importlib.util.find_spec

    def build(provider, model, state, device):
        if provider == "turbo:fp8-rowwise":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")
        return real_build(provider, model, state, device)

    monkeypatch.setattr(train, "build", build)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real_find_spec(name, *a))
    rows = train.run(quick=True, tokens=None, models=["deepseek-v3-ep8"],
                     providers=["turbo:fp8-rowwise", "turbo:bf16", "torchao:fp8-rowwise"], include_reference=False,
                     warmup=0, iters=1, device="cpu")
    assert [(r["provider"], r["status"]) for r in rows] == [
        ("turbo:bf16", "ok"), ("turbo:fp8-rowwise", "error: OutOfMemoryError: CUDA out of memory. Tried to allocate 1 TiB"),
        ("torchao:fp8-rowwise", "skipped: torchao is not importable (pip install torchao)")]
    assert math.isfinite(rows[0]["torch_loss"])  # plain PyTorch's loss run happens even when torch is not timed
    assert rows[0]["ratio"] is None and rows[0]["bf16_ratio"] == 1.0


def test_bad_models_and_providers_are_named():
    common = dict(quick=True, tokens=None, include_reference=False, warmup=0, iters=1, device="cpu")
    with pytest.raises(ValueError, match=r"--models: train has no model llama-9b \(it has llama3.1-8b"):
        train.run(models=["llama-9b"], providers=None, **common)
    with pytest.raises(ValueError, match=r"--providers: train has no provider turbo:fp4 \(it has torch, torch.compile"):
        train.run(models=None, providers=["turbo:fp4"], **common)


def test_tokens_set_the_sequence():
    (m,) = train._models(False, ["qwen3-30b-a3b"], 2048)
    assert (m.seq, m.batch, m.tokens, m.config) == (2048, 1, 2048, MODELS["qwen3-30b-a3b"].config)


# --- each model's config honored -----------------------------------------------------------------


def _params(cfg: DemoConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in TurboDecoder(cfg).parameters())


def test_real_widths_by_hand():
    """Parameter counts of the four configs from the model cards' numbers (see train_models)."""
    def dense_attn(d, h, g, hd):  # qkv, out, two norms
        return d * (h + 2 * g) * hd + h * hd * d + 2 * d

    def moe(d, e_router, e_local, f, shared=0):  # router, experts' gate_up and down, shared expert
        return d * e_router + e_local * 3 * d * f + 3 * d * shared

    def io(vocab, d):  # embedding, head, final norm
        return 2 * vocab * d + d

    llama = io(128256, 4096) + 2 * (dense_attn(4096, 32, 8, 128) + 3 * 4096 * 14336)
    mixtral = io(32000, 4096) + 2 * (dense_attn(4096, 32, 8, 128) + moe(4096, 8, 8, 14336))
    deepseek = io(256, 7168) + moe(7168, 256, 32, 2048, shared=2048) + 7168
    qwen = io(151936, 2048) + 2 * (dense_attn(2048, 32, 4, 128) + moe(2048, 128, 128, 768))
    got = {name: _params(m.config) for name, m in MODELS.items()}
    assert got == {"llama3.1-8b": llama, "mixtral-8x7b": mixtral, "deepseek-v3-ep8": deepseek, "qwen3-30b-a3b": qwen}
    assert {n: (m.seq, m.batch) for n, m in MODELS.items()} == {
        "llama3.1-8b": (8192, 1), "mixtral-8x7b": (4096, 1), "deepseek-v3-ep8": (4096, 1), "qwen3-30b-a3b": (4096, 1)}
    ds = MODELS["deepseek-v3-ep8"].config
    # per rank, on average as many expert rows as tokens: top-8 of 256 experts, 32 held
    assert ds.topk * ds.n_local_experts / ds.experts == 1.0 and not ds.attention


def _hand_attention(x, w_qkv, w_out, h, g, hd, group_of=lambda head, h, g: head // (h // g)):
    """Causal attention in float64, head by head: query head ``i`` reads key/value head ``group_of(i)``."""
    x = x.double()
    b, s, _ = x.shape
    qkv = x @ w_qkv.double().T
    q = qkv[..., :h * hd].view(b, s, h, hd)
    k = qkv[..., h * hd:(h + g) * hd].view(b, s, g, hd)
    v = qkv[..., (h + g) * hd:].view(b, s, g, hd)
    out = torch.zeros(b, s, h, hd, dtype=torch.float64)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    for head in range(h):
        kv = group_of(head, h, g)
        scores = (q[:, :, head] @ k[:, :, kv].transpose(1, 2)) / math.sqrt(hd)
        p = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        out[:, :, head] = p @ v[:, :, kv]
    return out.reshape(b, s, h * hd) @ w_out.double().T


@pytest.mark.parametrize("name", ["llama3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b"])
def test_grouped_query_heads_reach_the_attention_call(name, monkeypatch):
    cfg = QUICK_MODELS[name].config
    h, g, hd = cfg.heads, cfg.n_kv_heads, cfg.d_head
    assert g < h  # every quick model keeps its model's grouped-query ratio
    torch.manual_seed(0)
    turbo = SelfAttention(cfg, None)
    seen = []
    turbo.attn.register_forward_pre_hook(lambda _m, args: seen.append(tuple(t.shape for t in args)))
    x = torch.randn(2, 9, cfg.d_model)
    got = turbo(x)
    assert seen == [((2, 9, h, hd), (2, 9, g, hd), (2, 9, g, hd))]
    want = _hand_attention(x, turbo.qkv.weight, turbo.out.weight, h, g, hd)
    assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()
    # a different head grouping is a different result: the check above can tell them apart
    other = _hand_attention(x, turbo.qkv.weight, turbo.out.weight, h, g, hd, group_of=lambda i, h, g: i % g)
    assert (other - want).abs().max() > 1e-2 * want.abs().max()

    plain = _Attention(cfg).double()
    plain.load_state_dict(turbo.state_dict())
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def sdpa(q, k, v, **kw):
        calls.append((q.shape, k.shape, kw.get("enable_gqa")))
        return real_sdpa(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    got_plain = plain(x.double())
    assert calls == [((2, h, 9, hd), (2, g, 9, hd), True)]
    assert (got_plain - want).abs().max() <= 1e-12 * want.abs().max()


def _hand_moe(x, cfg, router, gate_up, down, shared=None):
    """The MoE block in float64, token by token: scores, group limit, top-k, probs; experts past the
    local ones skipped (another rank's); plus the shared expert. Also returns the number of local
    copies and the tokens with none."""
    x = x.double()
    e, f = cfg.experts, cfg.expert_ffn
    per = e // cfg.expert_groups
    out = torch.zeros_like(x)
    copies, no_local = 0, []
    for t in range(x.shape[0]):
        logits = (router.double() @ x[t]).tolist()
        if cfg.score_function == "sigmoid":
            s = [1 / (1 + math.exp(-v)) for v in logits]
        else:
            z = sum(math.exp(v) for v in logits)
            s = [math.exp(v) / z for v in logits]
        group_score = [sum(sorted(s[i * per:(i + 1) * per], reverse=True)[:cfg.topk // cfg.selected_groups])
                       for i in range(cfg.expert_groups)]
        kept = sorted(range(cfg.expert_groups), key=lambda i: -group_score[i])[:cfg.selected_groups]
        chosen = sorted((j for j in range(e) if j // per in kept), key=lambda j: -s[j])[:cfg.topk]
        total = sum(s[j] for j in chosen) if cfg.score_function == "sigmoid" or cfg.norm_topk else 1.0
        local = [j for j in chosen if j < cfg.n_local_experts]
        copies += len(local)
        if not local:
            no_local.append(t)
        for j in local:
            hgu = gate_up[j].double() @ x[t]
            out[t] += s[j] / total * cfg.route_scale * (down[j].double() @ (F.silu(hgu[:f]) * hgu[f:]))
        if shared is not None:
            hgu = shared.gate_up.weight.double() @ x[t]
            half = hgu.shape[0] // 2
            out[t] += shared.down.weight.double() @ (F.silu(hgu[:half]) * hgu[half:])
    return out, copies, no_local


# DeepSeek-V3's routing (sigmoid, 4 of 8 groups, top-8, x2.5, 4 of 32 experts held, a shared
# expert), Mixtral/Qwen3's softmax renormalized over the top-k, and the demo's raw softmax top-2.
MOE_CASES = {
    "deepseek-v3-ep8": QUICK_MODELS["deepseek-v3-ep8"].config,
    "qwen3-30b-a3b": QUICK_MODELS["qwen3-30b-a3b"].config,
    "demo": DemoConfig(),
}


@pytest.mark.parametrize("case", list(MOE_CASES))
def test_moe_block_against_float64_by_hand(case, monkeypatch):
    cfg = MOE_CASES[case]
    torch.manual_seed(1)
    turbo = MoEFFN(cfg, None)
    x = torch.randn(24, cfg.d_model)
    permuted = []
    real_permute = demo_model.moe_permute

    def spy(*args, **kw):
        res = real_permute(*args, **kw)
        permuted.append(res.tokens_per_expert)
        return res

    monkeypatch.setattr(demo_model, "moe_permute", spy)
    got = turbo(x)
    want, copies, no_local = _hand_moe(x, cfg, turbo.router.weight, turbo.gate_up.weight, turbo.down.weight,
                                       turbo.shared)
    assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()
    (lens,) = permuted
    assert lens.shape == (cfg.n_local_experts,) and int(lens.sum()) == copies  # only this rank's copies
    if cfg.n_local_experts < cfg.experts:
        assert no_local and copies < cfg.topk * x.shape[0]  # the case really drops other ranks' copies
        only_shared = turbo.shared(x[no_local])
        assert torch.allclose(got[no_local], only_shared, rtol=1e-6, atol=1e-6)

    plain = _MoE(cfg).double()
    plain.load_state_dict(turbo.state_dict())
    assert (plain(x.double()) - want).abs().max() <= 1e-12 * want.abs().max()


def test_plain_and_turbo_decoders_agree_on_every_quick_model():
    """The same weights give the same logits (turbo in fp32 on the reference backend, the plain twin
    in float64): the two twins implement one model per config."""
    for name, model in QUICK_MODELS.items():
        torch.manual_seed(0)
        turbo = TurboDecoder(model.config)
        plain = PlainDecoder(model.config).double()
        plain.load_state_dict(turbo.state_dict(), strict=True)
        tokens = torch.randint(0, model.config.vocab, (2, model.seq))
        got, want = turbo(tokens).double(), plain(tokens)
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), name


# -- gradient accumulation (--micro-batches) ---------------------------------------------------------

def test_micro_batches_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "train.json"
    assert main(["bench", "train", "--quick", "--models", "mixtral-8x7b", "--providers", "torch", "turbo:bf16",
                 "turbo:fp8-rowwise", "--micro-batches", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["run"]["command"].endswith("--micro-batches 2")
    model = QUICK_MODELS["mixtral-8x7b"]
    rows = doc["rows"]
    assert [r["provider"] for r in rows] == ["torch", "turbo:bf16", "turbo:fp8-rowwise"]
    for r in rows:
        assert r["status"] == "ok", r
        assert (r["micro_batches"], r["accumulation"], r["tokens"]) == (2, "2 micro-batches", model.tokens)
        assert r["case"].endswith(" x2")
        assert r["tokens_per_s"] == pytest.approx(2 * model.tokens / (r["median_ms"] * 1e-3))
        rtol = FP8_LOSS_RTOL if "fp8" in r["provider"] else BF16_LOSS_RTOL
        assert abs(r["loss_diff"]) <= rtol * r["torch_loss"], r
    # a step of one micro-batch keeps its rows as they were: no accumulation variant
    one = train.run(quick=True, tokens=None, models=["mixtral-8x7b"], providers=["turbo:bf16"], include_reference=False,
                    warmup=0, iters=1, device="cpu")
    assert one[0]["micro_batches"] == 1 and "accumulation" not in one[0] and not one[0]["case"].endswith(" x1")


@pytest.mark.parametrize("argv, message", [
    (["bench", "train", "--quick", "--micro-batches", "0"], "--micro-batches: expected a count >= 1, got 0"),
    (["bench", "gemm", "--quick", "--micro-batches", "2"], "--micro-batches applies to train, not to gemm"),
    (["bench", "host", "--quick", "--micro-batches", "2"], "--micro-batches applies to train, not to host"),
])
def test_micro_batches_refused_where_they_do_not_apply(argv, message, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^micro_batches: expected an int >= 1, got 0$"):
        train.run(quick=True, tokens=None, models=None, providers=None, include_reference=False, warmup=0, iters=1,
                  device="cpu", micro_batches=0)


def test_an_accumulated_step_is_the_step_of_the_mean_loss():
    """Two micro-batches, each loss halved, then one optimizer step: the parameters an SGD step on
    the mean of the two batches' losses gives."""
    cfg = QUICK_MODELS["llama3.1-8b"].config
    torch.manual_seed(0)
    a, b = PlainDecoder(cfg), PlainDecoder(cfg)
    b.load_state_dict(a.state_dict())
    batches = train._data(QUICK_MODELS["llama3.1-8b"], 2, "cpu")[:2]
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.5), torch.optim.SGD(b.parameters(), lr=0.5)
    step_fn(lambda batch: train._loss(a, *batch), opt_a)(batches)  # the loop both train modes run
    ((train._loss(b, *batches[0]) + train._loss(b, *batches[1])) / 2).backward()
    opt_b.step()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6, msg=name)
        assert pa.grad is None  # zero_grad(set_to_none=True) after the step


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_fp8_layers_quantize_each_weight_once_per_accumulated_step(recipe):
    """Every FP8 layer of the MoE decoder, dense (Float8Linear) and expert (GroupedLinear), reuses its
    weight's FP8 copies for the second micro-batch and quantizes again after the optimizer step."""
    from turbo_core.modules import Float8Linear, GroupedLinear

    model = QUICK_MODELS["mixtral-8x7b"]
    torch.manual_seed(0)
    net = TurboDecoder(model.config, demo_model.fp8_recipe(recipe))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    step = step_fn(lambda batch: train._loss(net, *batch, True), opt)
    batches = train._data(model, 2, "cpu")[:2]
    layers = [m for m in net.modules() if isinstance(m, (Float8Linear, GroupedLinear))]
    assert any(isinstance(m, GroupedLinear) for m in layers) and any(isinstance(m, Float8Linear) for m in layers)
    step(batches)
    assert [(m.weight_cache.misses, m.weight_cache.hits) for m in layers] == [(1, 1)] * len(layers)
    step(batches)  # the optimizer changed every weight: quantized again, then reused again
    assert [(m.weight_cache.misses, m.weight_cache.hits) for m in layers] == [(2, 2)] * len(layers)


def test_accumulated_rows_get_tables_of_their_own():
    from turbo_core.bench import compare

    base = {"suite": "train", "pass": "step", "timing": "wall clock", "status": "ok", "median_ms": 1.0}
    rows = [{**base, "case": "m b1x16", "provider": "torch.compile"},
            {**base, "case": "m b1x16 x4", "provider": "torch.compile", "accumulation": "4 micro-batches"},
            {**base, "case": "m b1x16", "provider": "turbo:bf16"},
            {**base, "case": "m b1x16 x4", "provider": "turbo:bf16", "accumulation": "4 micro-batches"}]
    groups = compare.groups(rows)
    assert [(g.title, g.cases) for g in groups] == [("step · wall clock", ["m b1x16"]),
                                                    ("step · wall clock · 4 micro-batches", ["m b1x16 x4"])]


def test_bf16_wgrad_provider_keeps_fp8_forward_and_bf16_expert_wgrads():
    """``turbo:fp8-rowwise+bf16-wgrad``: every expert layer with ``wgrad_fp8=False``, the projections as
    in ``turbo:fp8-rowwise``; its steps train (loss within the FP8 band of plain PyTorch's)."""
    model = QUICK_MODELS["mixtral-8x7b"]
    state = train._init_state(model, "cpu")
    net = train.build("turbo:fp8-rowwise+bf16-wgrad", model, state, "cpu")
    experts = [m for m in net.modules() if isinstance(m, GroupedLinear)]
    assert experts and all(m.wgrad_fp8 is False and m.config.granularity.value == "ROWWISE" for m in experts)
    plain = train.build("turbo:fp8-rowwise", model, state, "cpu")
    assert all(m.wgrad_fp8 for m in plain.modules() if isinstance(m, GroupedLinear))
    rows = train.run(quick=True, tokens=None, models=["mixtral-8x7b"],
                     providers=["turbo:bf16", "turbo:fp8-rowwise+bf16-wgrad"], include_reference=False,
                     warmup=0, iters=1, device="cpu")
    r = rows[-1]
    assert r["provider"] == "turbo:fp8-rowwise+bf16-wgrad" and r["status"] == "ok", r
    assert r["loss"] < r["init_loss"] and abs(r["loss_diff"]) <= FP8_LOSS_RTOL * r["torch_loss"], r


# -- --profile-top: one profiled step per provider -------------------------------------------------------

def test_profile_top_records_where_a_step_spends_its_time(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "train.json"
    assert main(["bench", "train", "--quick", "--models", "llama3.1-8b", "--providers", "torch", "turbo:bf16",
                 "--profile-top", "10000", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["profile_clock"] == "own CPU time per operator"
        entries = r["profile"]
        ms = [e[1] for e in entries]
        assert ms == sorted(ms, reverse=True) and ms[-1] > 0
        assert all(isinstance(e[0], str) and e[2] >= 1 for e in entries)
        assert r["profile_total_ms"] == pytest.approx(sum(ms), abs=1e-3 * len(ms))  # every entry listed
    # the turbo decoder's step runs turbo's ops (their profiler labels); plain PyTorch's does not
    assert any(e[0].startswith("turbo::") for e in rows[1]["profile"]), rows[1]["profile"]
    assert not any(e[0].startswith("turbo::") for e in rows[0]["profile"]), rows[0]["profile"]
    printed = capsys.readouterr()
    assert "one step's own CPU time per operator" in printed.out + printed.err


def test_profile_step_keeps_the_top_entries():
    x = torch.randn(64, 64)

    def step(micro):
        for _ in micro:
            (x @ x).relu().sum()

    got = train_loop.profile_step(step, [0, 1], device="cpu", top=2)
    assert len(got["profile"]) == 2
    assert got["profile"][0][1] >= got["profile"][1][1] > 0
    assert got["profile_total_ms"] >= got["profile"][0][1] + got["profile"][1][1] - 1e-3


def test_profile_top_is_checked_before_any_model_is_built():
    with pytest.raises(ValueError, match=r"^--profile-top: expected a count >= 1, got 0$"):
        train.run(quick=True, tokens=None, models=None, providers=None, include_reference=False, warmup=0, iters=1,
                  device="cpu", profile_top=0)
