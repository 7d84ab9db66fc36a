"""Selecting the turbo converter the ways TorchTitan selects its own (a model registry's
``converters``; ``--override.imports`` by name on its command line), what it refuses, and what
importing turbo_core costs."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

if os.environ.get("TURBO_TORCHTITAN_TESTS") == "1":
    import torchtitan  # noqa: F401  (nox -s integrations-torchtitan: missing is an error, not a skip)
else:
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (nox -s integrations-torchtitan runs this)")

import torchtitan_tiny as tiny  # noqa: E402
from torchtitan.config import ConfigManager, Configurable  # noqa: E402
from torchtitan.config.override import apply_overrides  # noqa: E402
from torchtitan.models import deepseek_v3, gpt_oss, llama3, qwen3  # noqa: E402
from torchtitan.models.common.linear import Linear  # noqa: E402
from torchtitan.models.common.moe import MoE  # noqa: E402

from turbo_core.integrations.torchtitan import TurboConverter  # noqa: E402
from turbo_core.integrations.torchtitan_layers import (  # noqa: E402
    TurboDocumentAttention,
    TurboFloat8Linear,
    TurboLinear,
    TurboRMSNorm,
)
from turbo_core.integrations.torchtitan_moe import TurboMoE  # noqa: E402

_TURBO_CLASSES = (TurboLinear, TurboFloat8Linear, TurboRMSNorm, TurboDocumentAttention, TurboMoE)


def _kinds(model: torch.nn.Module) -> set[str]:
    return {type(m).__name__ for m in model.modules() if isinstance(m, _TURBO_CLASSES)}


@pytest.mark.parametrize("registry,flavor", [(llama3, "debugmodel"), (qwen3, "debugmodel_moe"),
                                             (deepseek_v3, "debugmodel")], ids=["llama3", "qwen3", "deepseek_v3"])
def test_model_registry_converters_list(registry, flavor):
    """``model_registry(flavor, converters=[TurboConverter.Config()])``: TorchTitan builds the
    converter from its config and applies it, as it does its float8 converter; the model builds (on
    the meta device, as the trainer builds it) and satisfies TorchTitan's module protocol."""
    spec = registry.model_registry(flavor, converters=[TurboConverter.Config()])
    with torch.device("meta"):
        model = spec.model.build()
    model.verify_module_protocol()
    moe = registry is not llama3
    want = {"TurboLinear", "TurboRMSNorm", "TurboDocumentAttention"} | ({"TurboMoE"} if moe else set())
    assert _kinds(model) == want
    stock = registry.model_registry(flavor)
    with torch.device("meta"):
        assert model.state_dict().keys() == stock.model.build().state_dict().keys()


def test_override_by_name_on_torchtitans_command_line():
    """``--override.imports turbo_core.integrations.torchtitan.turbo=<options>``, parsed by
    TorchTitan's ConfigManager and applied as its trainer applies overrides, before the build: the
    trainer's own model config object is converted in place."""
    target = 'turbo_core.integrations.torchtitan.turbo={"fp8": "rowwise", "filter_fqns": ["lm_head"]}'
    config = ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel",
                                         "--override.imports", target])
    model_config = config.model_spec.model
    lines = apply_overrides(config.override, config)
    assert len(lines) == 1 and "turbo_core.integrations.torchtitan.turbo: model_spec.model" in lines[0]
    assert config.model_spec.model is model_config
    assert type(model_config.lm_head) is Linear.Config
    layer = model_config.layers[0]
    assert isinstance(layer.feed_forward.w1, TurboFloat8Linear.Config) and layer.feed_forward.w1.recipe == "rowwise"
    assert isinstance(layer.attention.inner_attention, TurboDocumentAttention.Config)
    with torch.device("meta"):
        model = model_config.build()
    assert _kinds(model) == {"TurboFloat8Linear", "TurboRMSNorm", "TurboDocumentAttention"}


def _snapshot(config) -> tuple[str, list[str]]:
    nodes = config.traverse(Configurable.Config, recurse=True)
    return repr(config.to_dict()), [f"{fqn}:{type(c).__qualname__}" for fqn, c, _, _ in nodes]


def test_unsupported_model_is_refused_with_nothing_changed():
    config = gpt_oss.model_registry("debugmodel").model
    before = _snapshot(config)
    with pytest.raises(TypeError, match=r"model_config: the turbo converter supports Llama3Model.Config "
                                        r"\(torchtitan.models.llama3\), Qwen3Model.Config .*DeepSeekV3Model.Config"
                                        r".*got GptOssModel.Config. Nothing was converted"):
        TurboConverter.Config().build().convert(config)
    assert _snapshot(config) == before


@pytest.mark.parametrize("options,error,match", [
    ({"fp8": "fp4"}, ValueError, "fp8: expected one of tensorwise, rowwise, blockwise or None, got 'fp4'"),
    ({"moe": "yes"}, TypeError, "moe: expected a bool"),
    ({"filter_fqns": "lm_head"}, TypeError, "filter_fqns: expected a list of str"),
])
def test_bad_options_are_named(options, error, match):
    with pytest.raises(error, match=match):
        TurboConverter.Config(**options).build()


def test_filter_and_switches_leave_modules_alone_and_say_why():
    converter = TurboConverter.Config(moe=False, filter_fqns=["lm_head", "ffn_norm"]).build()
    config = converter.convert(tiny.qwen3("sdpa"))
    report = converter.report
    assert type(config.lm_head) is Linear.Config and report.left["lm_head"] == "filter_fqns"
    assert report.left["layers.0.ffn_norm"] == "filter_fqns" and report.left["layers.1.ffn_norm"] == "filter_fqns"
    assert type(config.layers[1].moe) is MoE.Config
    assert "moe" not in report.counts()
    assert report.left["layers.1.moe.router.gate"] == "MoE router gate: TorchTitan computes its logits in fp32"
    assert "layers.1.moe.router.gate" not in str(report.replaced)
    assert str(report).startswith("turbo converter: replaced ")
    with pytest.raises(ValueError, match="filter_fqns: keeps some attention layers and not others"):
        TurboConverter.Config(filter_fqns=["layers.0.attention"]).build().convert(tiny.llama3("flex"))


def test_converting_twice_changes_nothing_more():
    once = TurboConverter.Config().build().convert(tiny.deepseek_v3_tiny("flex"))
    snapshot = _snapshot(once)
    assert any(":TurboMoE.Config" in node for node in snapshot[1])
    twice = TurboConverter.Config().build()
    assert twice.convert(once) is once
    assert twice.report.counts() == {}
    assert _snapshot(once) == snapshot


def test_importing_turbo_core_does_not_import_torchtitan():
    code = ("import sys, turbo_core, turbo_core.integrations, turbo_core.modules, turbo_core.ops; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torchtitan'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_state_dict_loads_into_the_stock_model():
    stock_cfg = tiny.deepseek_v3_tiny("sdpa")
    turbo_model = tiny.build(TurboConverter.Config().build().convert(copy.deepcopy(stock_cfg)), seed=3)
    stock = tiny.build(stock_cfg, seed=4)
    stock.load_state_dict(turbo_model.state_dict(), strict=True)
    for (name, a), (_, b) in zip(stock.state_dict().items(), turbo_model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
