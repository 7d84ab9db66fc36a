"""``turbo bench train --hf --quick``: the tiny Hugging Face models on the CPU (reference backend),
through the CLI and through ``run``: rows with every field, the turbo rows' losses beside the
unpatched model's, Liger's row skipped with the reason where liger-kernel is absent, the MoE
model's eager-experts row, the rows recorded and rendered by ``turbo bench report``, and bad
options refused."""

from __future__ import annotations

import importlib.util
import json
import math
import re

import pytest
import torch

pytest.importorskip("transformers", minversion="5")

from turbo_core.bench import hf_train  # noqa: E402
from turbo_core.bench.hf_models import HF_MODELS, QUICK_HF_MODELS  # noqa: E402
from turbo_core.bench.suites.train import QUICK_LOSS_STEPS  # noqa: E402
from turbo_core.cli import main  # noqa: E402

# bf16 models whose ops round at different places give logits about one bf16 unit (2^-8) apart;
# the fp32 cross-entropy differs by at most about that much relative to the loss (the train suite's
# band). FP8 recipes: the train suite's FP8 band.
BF16_LOSS_RTOL = 2.0**-8
FP8_LOSS_RTOL = 1e-2
HAVE_LIGER = importlib.util.find_spec("liger_kernel") is not None


def _check_common(r: dict, name: str) -> None:
    model = QUICK_HF_MODELS[name]
    cfg = model.config()
    assert (r["suite"], r["mode"], r["model"], r["pass"], r["timing"], r["baseline"]) == (
        "train", "hf", name, "step", "wall clock", "hf")
    assert (r["batch"], r["seq"], r["tokens"], r["hidden"], r["layers"]) == (
        1, model.seq, model.tokens, cfg.hidden_size, cfg.num_hidden_layers)
    with torch.device("meta"):
        import transformers

        params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    assert r["params"] == params
    assert r["role"] == hf_train.HF_PROVIDERS[r["provider"]]


def test_quick_cli_run_gives_rows_with_every_field(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "train.json"
    assert main(["bench", "train", "--hf", "--quick", "--models", "llama3.1-8b", "--providers", "hf",
                 "hf:eager-experts", "liger", "turbo:bf16", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert "turbo bench train --quick" in doc["run"]["command"] and doc["run"]["command"].endswith("--hf")
    rows = {r["provider"]: r for r in doc["rows"]}
    assert list(rows) == ["hf", "hf:eager-experts", "liger", "turbo:bf16"]
    for r in rows.values():
        _check_common(r, "llama3.1-8b")
    assert rows["hf:eager-experts"]["status"] == "skipped: the model has no experts"
    if not HAVE_LIGER:
        assert rows["liger"]["status"].startswith("skipped: liger-kernel is not importable")
    hf, turbo = rows["hf"], rows["turbo:bf16"]
    for r in (hf, turbo):
        assert r["status"] == "ok", r
        assert [f for f in hf_train.OK_FIELDS if f not in r] == []
        assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / (r["median_ms"] * 1e-3))
        assert r["peak_bytes"] is None and r["loss_steps"] == QUICK_LOSS_STEPS
        assert math.isfinite(r["loss"]) and r["hf_loss"] == hf["loss"]
        assert r["loss"] < r["init_loss"]  # the steps lowered the held-out loss
    assert hf["loss_diff"] == 0.0 and hf["ratio"] == 1.0 and hf["vs"] is None
    assert abs(turbo["loss_diff"]) <= BF16_LOSS_RTOL * hf["loss"]
    assert turbo["ratio"] == pytest.approx(hf["median_ms"] / turbo["median_ms"])
    assert turbo["vs"] == ["hf"] + (["liger"] if rows["liger"]["status"] == "ok" else [])
    assert turbo["note"].startswith("apply_turbo: ") and "attention" in turbo["note"]
    table = capsys.readouterr().out
    assert f"turbo bench train --hf {hf['case']}: ms per training step" in table


def _quick_rows(name: str, providers: list[str]) -> tuple[list[dict], dict[str, dict]]:
    """One quick CPU run of ``providers`` on model ``name``: its rows (each ok, with the common
    fields checked) and the same by provider."""
    rows = hf_train.run(quick=True, tokens=None, models=[name], providers=providers, include_reference=False,
                        warmup=0, iters=1, device="cpu")
    assert [r["status"] for r in rows] == ["ok"] * len(providers), rows
    for r in rows:
        _check_common(r, name)
    return rows, {r["provider"]: r for r in rows}


def test_moe_model_rows_and_report(tmp_path):
    rows, by = _quick_rows("qwen3-30b-a3b", ["hf", "hf:eager-experts", "turbo:fp8-rowwise"])
    for r in rows:
        assert (r["experts"], r["topk"]) == (16, 4)
    hf = by["hf"]["loss"]
    assert abs(by["hf:eager-experts"]["loss_diff"]) <= BF16_LOSS_RTOL * hf
    assert abs(by["turbo:fp8-rowwise"]["loss_diff"]) <= FP8_LOSS_RTOL * hf
    assert by["turbo:fp8-rowwise"]["vs"] == ["hf", "hf:eager-experts"]
    assert "experts" in by["turbo:fp8-rowwise"]["note"] and "float8_linear" in by["turbo:fp8-rowwise"]["note"]
    # recorded beside the train suite's rows, the report renders them as a table of their own
    from turbo_core.bench import dataset

    dataset.append(rows, dataset.provenance("cpu", ["turbo", "bench", "train", "--hf", "--quick"]), tmp_path)
    page = tmp_path / "performance.md"
    assert main(["bench", "report", "--data", str(tmp_path), "--out", str(page), "--no-plots"]) == 0
    text = page.read_text()
    assert "step · hf · wall clock" in text and "`turbo:fp8-rowwise`" in text


def test_head_providers_put_the_output_projection_in_fp8_too():
    _rows, by = _quick_rows("llama3.1-8b", ["hf", "turbo:fp8-tensorwise", "turbo:fp8-tensorwise+head"])

    def fp8_linears(note: str) -> int:
        return int(re.search(r"(\d+) float8_linear", note).group(1))

    plain, head = by["turbo:fp8-tensorwise"], by["turbo:fp8-tensorwise+head"]
    assert fp8_linears(head["note"]) == fp8_linears(plain["note"]) + 1  # lm_head
    assert abs(head["loss_diff"]) <= FP8_LOSS_RTOL * by["hf"]["loss"]
    assert head["vs"] == ["hf"]


def test_bad_options_are_refused(capsys):
    assert main(["bench", "gemm", "--hf", "--quick"]) == 2
    assert "--hf applies to train, not to gemm" in capsys.readouterr().err
    with pytest.raises(ValueError, match="train --hf has no provider torch.compile"):
        hf_train.run(quick=True, tokens=None, models=None, providers=["torch.compile"], include_reference=False,
                     warmup=0, iters=1, device="cpu")
    with pytest.raises(ValueError, match="train --hf has no model mixtral"):
        hf_train.run(quick=True, tokens=None, models=["mixtral"], providers=None, include_reference=False,
                     warmup=0, iters=1, device="cpu")


def test_real_widths_have_the_model_cards_sizes():
    import transformers

    counts = {}
    for name, model in HF_MODELS.items():
        with torch.device("meta"):
            net = transformers.AutoModelForCausalLM.from_config(model.config())
        counts[name] = sum(p.numel() for p in net.parameters())
    h, f, v = 4096, 14336, 128256
    llama_layer = h * (32 * 128) * 2 + h * (8 * 128) * 2 + 3 * h * f + 2 * h
    assert counts["llama3.1-8b"] == 2 * v * h + 2 * llama_layer + h
    h, e, i, v = 2048, 128, 768, 151936
    qwen_layer = h * (32 * 128) * 2 + h * (4 * 128) * 2 + 2 * 128 + e * 3 * h * i + e * h + 2 * h
    assert counts["qwen3-30b-a3b"] == 2 * v * h + 2 * qwen_layer + h


def test_micro_batches_accumulate_before_each_step(tmp_path, capsys, monkeypatch):
    """``--hf --micro-batches 2``: the train suite's accumulation loop (tested there against the mean
    loss's step), with the rows' accumulation fields and turbo FP8's loss beside the unpatched model's."""
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "train.json"
    assert main(["bench", "train", "--hf", "--quick", "--models", "qwen3-30b-a3b", "--providers", "hf",
                 "turbo:fp8-rowwise", "--micro-batches", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["run"]["command"].endswith("--hf --micro-batches 2")
    rows = {r["provider"]: r for r in doc["rows"]}
    for r in rows.values():
        _check_common(r, "qwen3-30b-a3b")
        assert r["status"] == "ok", r
        assert (r["micro_batches"], r["accumulation"]) == (2, "2 micro-batches") and r["case"].endswith(" x2")
        assert r["tokens_per_s"] == pytest.approx(2 * r["tokens"] / (r["median_ms"] * 1e-3))
    assert abs(rows["turbo:fp8-rowwise"]["loss_diff"]) <= FP8_LOSS_RTOL * rows["hf"]["loss"]
