"""What apply_turbo replaces and keeps: the report's counts (from the unpatched model's own modules),
exclusion, switches, a second call, unsupported architectures and bad arguments (nothing patched),
the state_dict, save_pretrained -> plain transformers, AutoTurboModelForCausalLM."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5")

from hf_tiny import ARCHS, build, tokens  # noqa: E402

from turbo_core.integrations.hf.loss import causal_lm_loss  # noqa: E402
from turbo_core.integrations.transformers import (  # noqa: E402
    ARCHITECTURES,
    AutoTurboModelForCausalLM,
    apply_turbo,
    attention_fallbacks,
    experts_fallbacks,
    turbo_report,
)
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity  # noqa: E402
from turbo_core.modules import Float8Linear, Linear, RMSNorm  # noqa: E402

EXCLUDED = "module excluded from turbo"
EXCLUDED_EXPERTS = "module excluded from turbo or of a layout turbo does not compute"


def _by_class(model: torch.nn.Module) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, m in model.named_modules():
        out.setdefault(type(m).__name__, []).append(name)
    return out


def _snapshot(model: torch.nn.Module) -> tuple:
    """Every module's class, the attention/experts implementations and the state_dict values."""
    return ([(n, type(m)) for n, m in model.named_modules()], model.config._attn_implementation,
            model.config._experts_implementation, {k: v.clone() for k, v in model.state_dict().items()})


def _same(a: tuple, b: tuple) -> bool:
    return a[:3] == b[:3] and a[3].keys() == b[3].keys() and all(torch.equal(a[3][k], b[3][k]) for k in a[3])


@pytest.mark.parametrize("arch", ARCHS)
def test_report_counts_every_module_of_each_kind(arch):
    model = build(arch)
    spec = ARCHITECTURES[arch]
    classes = _by_class(model)
    linears = [n for n in classes["Linear"] if n != "lm_head"]
    report = apply_turbo(model)
    assert report.count("linear") == len(linears)
    assert report.count("rmsnorm") == sum(len(classes.get(c, [])) for c in spec.norms)
    assert report.count("gated_mlp") == sum(len(classes.get(c, [])) for c in spec.mlps)
    assert report.count("attention") == sum(len(classes.get(c, [])) for c in spec.attentions)
    assert report.count("experts") == sum(len(classes.get(c, [])) for c in spec.experts)
    assert report.count("router") == sum(len(classes.get(c, [])) for c in spec.routers)
    kept = [(s.name, s.kind) for s in report.left_alone]
    assert ("lm_head", "linear") in kept
    for cls, _reason in spec.kept_routers:
        assert all((n, "router") in kept for n in classes[cls])
    assert report.count("loss") == 1 and model.loss_function is causal_lm_loss
    assert type(model.lm_head) is torch.nn.Linear
    assert all(type(dict(model.named_modules())[n]) is Linear for n in linears)
    assert all(type(dict(model.named_modules())[n]) is RMSNorm for c in spec.norms for n in classes.get(c, []))
    assert report.attn_implementation == model.config._attn_implementation == "turbo"
    if spec.experts:
        assert report.experts_implementation == model.config._experts_implementation == "turbo"
    text = str(report)
    assert type(model).__name__ in text and "attention" in text and "lm_head" in text
    assert turbo_report(model) is report


def test_rmsnorm_keeps_weight_and_eps():
    model = build("qwen3")
    norm = model.model.layers[0].self_attn.q_norm
    weight, eps = norm.weight, norm.variance_epsilon
    apply_turbo(model)
    new = model.model.layers[0].self_attn.q_norm
    assert isinstance(new, RMSNorm) and new.weight is weight and new.eps == eps


def test_second_call_changes_nothing():
    model = build("qwen3_moe")
    first = apply_turbo(model)
    before = _snapshot(model)
    again = apply_turbo(model, fp8=Float8QuantConfig())
    assert again.already_applied and not first.already_applied
    assert again.replaced == first.replaced
    assert "already applied" in str(again)
    assert _same(before, _snapshot(model))
    assert not any(isinstance(m, Float8Linear) for m in model.modules())


def test_unsupported_architecture_names_the_supported_and_patches_nothing():
    cfg = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=16)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    before = _snapshot(model)
    with pytest.raises(ValueError, match="GPT2LMHeadModel") as err:
        apply_turbo(model)
    for spec in ARCHITECTURES.values():
        assert spec.causal_lm in str(err.value)
    assert _same(before, _snapshot(model))


@pytest.mark.parametrize("kwargs, match", [
    ({"fp8": "tensorwise"}, "fp8: expected None or a turbo_core.low_precision.Float8QuantConfig"),
    ({"norm": 1}, "norm: expected a bool"),
    ({"exclude": "lm_head"}, "exclude: expected a tuple"),
    ({"exclude": ("",)}, "exclude: expected a tuple"),
])
def test_bad_arguments_name_the_argument_and_patch_nothing(kwargs, match):
    model = build("llama")
    before = _snapshot(model)
    with pytest.raises(TypeError, match=match):
        apply_turbo(model, **kwargs)
    assert _same(before, _snapshot(model))
    with pytest.raises(TypeError, match="model: expected a transformers PreTrainedModel"):
        apply_turbo(torch.nn.Linear(4, 4))


@pytest.mark.filterwarnings("ignore:turbo (attention|experts)")
def test_excluded_modules_stay_untouched():
    model = build("mixtral")
    layer1 = model.model.layers[1]
    kept = {n: type(m) for n, m in layer1.named_modules(prefix="model.layers.1")}
    q0 = model.model.layers[0].self_attn.q_proj
    report = apply_turbo(model, exclude=("lm_head", "self_attn.q_proj", "model.layers.1"))
    assert type(q0) is torch.nn.Linear and type(model.model.layers[0].self_attn.k_proj) is Linear
    assert {n: type(m) for n, m in layer1.named_modules(prefix="model.layers.1")} == kept
    assert not hasattr(layer1.self_attn, "_turbo_attention") and not hasattr(layer1.mlp.experts, "_turbo_experts")
    excluded = {s.name for s in report.left_alone if s.reason.startswith("excluded")}
    assert {"lm_head", "model.layers.0.self_attn.q_proj", "model.layers.1.self_attn", "model.layers.1.mlp.experts",
            "model.layers.1.input_layernorm"} <= excluded
    # the excluded layer still computes what it did, through transformers' sdpa / grouped_mm
    ids = tokens()
    ref = build("mixtral")
    ref.set_experts_implementation("grouped_mm")
    before = attention_fallbacks().get(EXCLUDED, 0), experts_fallbacks().get(EXCLUDED_EXPERTS, 0)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=1e-4, atol=1e-5)
    assert attention_fallbacks()[EXCLUDED] == before[0] + 1
    assert experts_fallbacks()[EXCLUDED_EXPERTS] == before[1] + 1


def test_switches_turn_kinds_off():
    model = build("qwen3_moe")
    report = apply_turbo(model, linear=False, norm=False, attention=False, mlp=True, moe=False, loss=False)
    assert report.count("linear") == report.count("rmsnorm") == report.count("attention") == report.count("loss") == 0
    assert {s.reason for s in report.skipped("loss")} == {"loss=False"} and "_loss_function" not in vars(model)
    assert report.count("experts") == report.count("router") == 0 and report.count("gated_mlp") == 1
    assert model.config._attn_implementation == "sdpa" and model.config._experts_implementation == "eager"
    assert {s.reason for s in report.skipped("rmsnorm")} == {"norm=False"}
    assert all(type(m) is not Linear for m in model.modules())


def test_fp8_converts_fitting_linears_and_keeps_others_in_their_dtype():
    cfg = build("llama").config
    cfg.intermediate_size = 40  # not a multiple of 16: the MLP projections stay turbo Linear
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    recipe = Float8QuantConfig(granularity=ScalingGranularity.ROWWISE)
    report = apply_turbo(model, fp8=recipe)
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_proj, Float8Linear) and attn.q_proj.config == recipe
    assert type(model.model.layers[0].mlp.up_proj) is Linear
    assert report.count("float8_linear") == 8 and report.count("linear") == 6
    assert {s.name for s in report.skipped("float8_linear")} >= {"model.layers.0.mlp.down_proj"}
    assert "FP8 rowwise" in str(report)


def test_state_dict_round_trip():
    model = build("deepseek_v3")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    apply_turbo(model)
    after = model.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], state[k]) for k in state)
    other = build("deepseek_v3", seed=5)
    apply_turbo(other)
    other.load_state_dict(state, strict=True)
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(other(ids).logits, model(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe"])
def test_save_pretrained_loads_in_plain_transformers(arch, tmp_path):
    model = build(arch)
    apply_turbo(model)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "turbo" not in json.dumps(saved)
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert plain.config._attn_implementation != "turbo"
    assert not any(type(m).__module__.startswith("turbo_core") for m in plain.modules())
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-5)
    patched = AutoTurboModelForCausalLM.from_pretrained(tmp_path, exclude=())
    report = turbo_report(patched)
    linears = sum(type(m) is torch.nn.Linear for m in plain.modules())
    assert report is not None and report.count("linear") == linears and type(patched.lm_head) is Linear
    with torch.no_grad():
        torch.testing.assert_close(patched(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-5)


def test_importing_turbo_core_imports_no_transformers():
    code = ("import sys, turbo_core, turbo_core.integrations, turbo_core.modules, turbo_core.ops; "
            "assert 'transformers' not in sys.modules, 'transformers imported'; "
            "import turbo_core.integrations.transformers; assert 'transformers' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_causal_lm_loss_follows_transformers_contract():
    """``causal_lm_loss`` against transformers' own ``ForCausalLMLoss`` (fp32 math in both): the shift, ignored
    labels, ``num_items_in_batch`` (the summed loss over it) and given ``shift_labels``; and the
    gradient of the logits."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 7, 11, generator=gen)
    labels = torch.randint(0, 11, (2, 7), generator=gen)
    labels[0, 2] = labels[1, 5] = -100
    shifted = torch.randint(0, 11, (2, 7), generator=gen)
    for kwargs in ({}, {"num_items_in_batch": torch.tensor(9)}, {"num_items_in_batch": 4},
                   {"shift_labels": shifted}):
        got_x = logits.clone().requires_grad_(True)
        want_x = logits.clone().requires_grad_(True)
        got = causal_lm_loss(got_x, labels, 11, **kwargs)
        want = ForCausalLMLoss(want_x, labels, 11, **kwargs)
        got.backward()
        want.backward()
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got_x.grad, want_x.grad, rtol=1e-5, atol=1e-7)


def test_a_model_with_its_own_loss_function_keeps_it():
    model = build("llama")

    def own(logits, labels, vocab_size, **kwargs):
        return logits.float().mean()

    model.loss_function = own
    report = apply_turbo(model)
    assert report.count("loss") == 0 and model.loss_function is own
    assert [s.reason for s in report.skipped("loss")] == ["the model already carries its own loss_function"]
