"""``apply_turbo``: patch an instantiated Hugging Face Transformers model in place (see
:mod:`turbo_core.integrations.transformers` for the user-facing description)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from fnmatch import fnmatchcase

import torch
from transformers import PreTrainedModel

from turbo_core.integrations.hf import attention as hf_attention
from turbo_core.integrations.hf import experts as hf_experts
from turbo_core.integrations.hf.architectures import ARCHITECTURES, Architecture, supported_names
from turbo_core.integrations.hf.layers import TurboGatedMLP, TurboSoftmaxTopKRouter, swap_class
from turbo_core.integrations.hf.loss import causal_lm_loss
from turbo_core.integrations.hf.report import LeftAlone, TurboReport
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.modules.float8_convert import FP8_DIM_MULTIPLE
from turbo_core.modules.float8_linear import Float8Linear
from turbo_core.modules.linear import Linear
from turbo_core.modules.normalization import RMSNorm
from turbo_core.ops.gemm_fp8 import fp8_config
from turbo_core.ops.weight_cache import WeightQuantCache

__all__ = ["REPORT_ATTR", "apply_turbo", "architecture_of"]

#: The attribute holding the first call's report on a patched model (a second call returns it).
REPORT_ATTR = "_turbo_report"

_FLAG_OF = {"linear": "linear", "float8_linear": "linear", "rmsnorm": "norm", "attention": "attention",
            "gated_mlp": "mlp", "router": "moe", "experts": "moe", "loss": "loss"}
#: transformers' ``loss_type`` of the models whose loss ``loss=True`` replaces.
CAUSAL_LM = "ForCausalLM"


def architecture_of(model: object) -> Architecture:
    """The supported architecture of ``model``, or a ``ValueError`` naming the supported ones."""
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
    model_type = getattr(model.config, "model_type", None)
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise ValueError(f"model: turbo does not patch {type(model).__name__} (model_type {model_type!r}); "
                         f"supported: {supported_names()}")
    return arch


def _check_args(fp8, flags: dict[str, object], exclude) -> tuple[Float8QuantConfig | None, tuple[str, ...]]:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected a bool, got {value!r}")
    if fp8 is not None and not isinstance(fp8, Float8QuantConfig):
        raise TypeError(f"fp8: expected None or a turbo_core.low_precision.Float8QuantConfig, got {type(fp8).__name__}")
    if isinstance(exclude, str) or not isinstance(exclude, Sequence) \
            or not all(isinstance(p, str) and p for p in exclude):
        raise TypeError(f"exclude: expected a tuple of non-empty module-name patterns, got {exclude!r}")
    return (fp8_config(fp8) if fp8 is not None else None), tuple(exclude)


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or name.endswith("." + pattern) or fnmatchcase(name, pattern)


def _excluded_by(fqn: str, patterns: tuple[str, ...]) -> str | None:
    """The pattern excluding ``fqn`` (matching it or one of its ancestors), else None."""
    parts = fqn.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        for p in patterns:
            if _matches(prefix, p):
                return p
    return None


def _own_forward(module: torch.nn.Module) -> str | None:
    if "forward" in vars(module):
        return "carries its own instance forward (e.g. an accelerate hook), which a swap would bypass"
    return None


def _fits_fp8(*dims: int) -> bool:
    return all(d % FP8_DIM_MULTIPLE == 0 for d in dims)


def _norm_eps(module: torch.nn.Module) -> float | None:
    for attr in ("variance_epsilon", "eps"):
        value = getattr(module, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


class _Plan:
    """The changes one call makes, collected over the whole model before any is applied."""

    def __init__(self) -> None:
        self.actions: list = []
        self.replaced: Counter = Counter()
        self.left: list[LeftAlone] = []

    def leave(self, name: str, kind: str, reason: str) -> None:
        self.left.append(LeftAlone(name, kind, reason))

    def do(self, kind: str, action) -> None:
        self.replaced[kind] += 1
        self.actions.append(action)


def _plan_linear(plan: _Plan, fqn: str, m: torch.nn.Linear, fp8) -> None:
    if fp8 is not None and _fits_fp8(m.in_features, m.out_features):
        plan.do("float8_linear", lambda: Float8Linear.from_float(m, config=fp8, inplace=True))
        return
    if fp8 is not None:
        plan.leave(fqn, "float8_linear", f"in/out features {m.in_features}/{m.out_features} are not multiples of "
                   f"{FP8_DIM_MULTIPLE}: a turbo Linear in the weight's dtype")

    def swap():
        m.__class__ = Linear
    plan.do("linear", swap)


def _plan_norm(plan: _Plan, model: torch.nn.Module, fqn: str, m: torch.nn.Module) -> None:
    eps, weight = _norm_eps(m), getattr(m, "weight", None)
    if eps is None or not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1:
        plan.leave(fqn, "rmsnorm", "no 1-D weight parameter and epsilon (variance_epsilon / eps)")
        return
    parent_name, _, child = fqn.rpartition(".")
    parent = model.get_submodule(parent_name)

    def swap():
        with torch.device("meta"):
            new = RMSNorm(weight.shape[0], eps=eps)
        new.weight = weight  # the same Parameter: optimizer state and ties stay valid
        new.train(m.training)
        setattr(parent, child, new)
    plan.do("rmsnorm", swap)


def _plan_mlp(plan: _Plan, fqn: str, m: torch.nn.Module, patterns: tuple[str, ...]) -> None:
    parts = [getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    act = getattr(m, "act_fn", None)
    if not all(isinstance(p, torch.nn.Linear) for p in parts):
        plan.leave(fqn, "gated_mlp", "gate_proj / up_proj / down_proj are not all nn.Linear")
        return
    gate, up, _ = parts
    if (gate.in_features, gate.out_features) != (up.in_features, up.out_features):
        plan.leave(fqn, "gated_mlp", "gate_proj and up_proj differ in shape")
        return
    if not isinstance(act, torch.nn.SiLU) and type(act).__name__ != "SiLUActivation":
        plan.leave(fqn, "gated_mlp", f"activation {type(act).__name__} (turbo's fused gate is SiLU)")
        return
    for child in ("gate_proj", "up_proj", "down_proj"):
        pattern = _excluded_by(f"{fqn}.{child}", patterns)
        if pattern is not None:
            plan.leave(fqn, "gated_mlp", f"its {child} is excluded (by {pattern!r})")
            return
        if _own_forward(getattr(m, child)):
            plan.leave(fqn, "gated_mlp", f"its {child} {_own_forward(getattr(m, child))}")
            return
    plan.do("gated_mlp", lambda: swap_class(m, TurboGatedMLP))


def _plan_experts(plan: _Plan, fqn: str, m: torch.nn.Module, fp8) -> None:
    why = hf_experts.unsupported_layout(m)
    if why is not None:
        plan.leave(fqn, "experts", why)
        return
    _, two_i, hidden = m.gate_up_proj.shape
    use_fp8 = fp8 if fp8 is not None and _fits_fp8(hidden, two_i // 2) else None
    if fp8 is not None and use_fp8 is None:
        plan.leave(fqn, "experts", f"hidden {hidden} / expert width {two_i // 2} are not multiples of "
                   f"{FP8_DIM_MULTIPLE}: grouped GEMMs in the weights' dtype")
    caches = {n: WeightQuantCache() for n in ("gate_up_proj", "down_proj")} if use_fp8 is not None else {}
    plan.do("experts", lambda: setattr(m, hf_experts.MARK, hf_experts.ExpertsPlan(use_fp8, caches)))


def _plan_router(plan: _Plan, fqn: str, m: torch.nn.Module, arch: Architecture) -> None:
    if not all(hasattr(m, a) for a in ("top_k", "weight", "hidden_dim")):
        plan.leave(fqn, "router", "no top_k / weight / hidden_dim attributes")
        return
    plan.do("router", lambda: swap_class(m, TurboSoftmaxTopKRouter,
                                         turbo_weights_in_logits_dtype=arch.router_weights_in_logits_dtype))


def _kind(m: torch.nn.Module, arch: Architecture) -> str | None:
    if type(m) is torch.nn.Linear:
        return "linear"
    name = type(m).__name__
    if not type(m).__module__.startswith("transformers."):
        return None
    for kind, names in (("rmsnorm", arch.norms), ("gated_mlp", arch.mlps), ("attention", arch.attentions),
                        ("experts", arch.experts), ("router", arch.routers)):
        if name in names:
            return kind
    return None


def _plan_loss(plan: _Plan, model: PreTrainedModel, wanted: bool) -> None:
    loss_type = getattr(model, "loss_type", None)
    if loss_type != CAUSAL_LM:
        plan.leave("", "loss", f"loss_type {loss_type!r}: turbo replaces the {CAUSAL_LM} loss only")
    elif not wanted:
        plan.leave("", "loss", "loss=False")
    elif "_loss_function" in vars(model):
        plan.leave("", "loss", "the model already carries its own loss_function")
    else:
        plan.do("loss", lambda: setattr(model, "loss_function", causal_lm_loss))


def apply_turbo(model: PreTrainedModel, *, fp8: Float8QuantConfig | None = None, linear: bool = True,
                norm: bool = True, attention: bool = True, mlp: bool = True, moe: bool = True, loss: bool = True,
                exclude: Sequence[str] = ("lm_head",)) -> TurboReport:
    """See :func:`turbo_core.integrations.transformers.apply_turbo`."""
    flags = {"linear": linear, "norm": norm, "attention": attention, "mlp": mlp, "moe": moe, "loss": loss}
    fp8, patterns = _check_args(fp8, flags, exclude)
    arch = architecture_of(model)
    first = getattr(model, REPORT_ATTR, None)
    if isinstance(first, TurboReport):
        return replace(first, already_applied=True, replaced=Counter(first.replaced), left_alone=list(first.left_alone))
    hf_attention.register()
    hf_experts.register()
    plan = _Plan()
    kept_routers = dict(arch.kept_routers)
    for fqn, m in model.named_modules():
        if type(m).__name__ in kept_routers and type(m).__module__.startswith("transformers."):
            plan.leave(fqn, "router", kept_routers[type(m).__name__])
            continue
        kind = _kind(m, arch)
        if kind is None:
            continue
        flag = _FLAG_OF[kind]
        pattern = _excluded_by(fqn, patterns)
        if pattern is not None:
            plan.leave(fqn, kind, f"excluded (by {pattern!r})")
        elif not flags[flag]:
            plan.leave(fqn, kind, f"{flag}=False")
        elif kind != "attention" and _own_forward(m):
            plan.leave(fqn, kind, _own_forward(m))
        elif kind == "linear":
            _plan_linear(plan, fqn, m, fp8)
        elif kind == "rmsnorm":
            _plan_norm(plan, model, fqn, m)
        elif kind == "gated_mlp":
            _plan_mlp(plan, fqn, m, patterns)
        elif kind == "experts":
            _plan_experts(plan, fqn, m, fp8)
        elif kind == "router":
            _plan_router(plan, fqn, m, arch)
        else:
            plan.do("attention", lambda m=m: setattr(m, hf_attention.MARK, True))
    _plan_loss(plan, model, loss)
    for action in plan.actions:
        action()
    if plan.replaced["attention"]:
        model.set_attn_implementation(hf_attention.NAME)
    if plan.replaced["experts"]:
        model.set_experts_implementation(hf_experts.NAME)
    report = TurboReport(architecture=type(model).__name__, replaced=plan.replaced, left_alone=plan.left,
                         attn_implementation=model.config._attn_implementation,
                         experts_implementation=model.config._experts_implementation if arch.experts else None,
                         fp8=fp8)
    setattr(model, REPORT_ATTR, report)
    return report
