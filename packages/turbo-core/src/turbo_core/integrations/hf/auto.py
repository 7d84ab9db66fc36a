"""``AutoTurboModelForCausalLM``: transformers' ``AutoModelForCausalLM`` followed by ``apply_turbo``."""

from __future__ import annotations

from transformers import AutoModelForCausalLM, PreTrainedModel

from turbo_core.integrations.hf.patch import REPORT_ATTR, apply_turbo
from turbo_core.integrations.hf.report import TurboReport

__all__ = ["AutoTurboModelForCausalLM", "turbo_report"]

_TURBO_KWARGS = ("fp8", "linear", "norm", "attention", "mlp", "moe", "exclude")


def turbo_report(model: PreTrainedModel) -> TurboReport | None:
    """The report of the ``apply_turbo`` call that patched ``model`` (``None``: not patched)."""
    report = getattr(model, REPORT_ATTR, None)
    return report if isinstance(report, TurboReport) else None


class AutoTurboModelForCausalLM:
    """``from_pretrained`` / ``from_config`` as ``AutoModelForCausalLM``'s, then ``apply_turbo`` on the
    model. The keyword arguments of ``apply_turbo`` (``fp8``, ``linear``, ``norm``, ``attention``,
    ``mlp``, ``moe``, ``exclude``) go to it, every other argument to transformers. The report is
    :func:`turbo_report` of the returned model."""

    def __init__(self) -> None:
        raise OSError("AutoTurboModelForCausalLM is built by from_pretrained(...) or from_config(...)")

    @staticmethod
    def _split(kwargs: dict) -> tuple[dict, dict]:
        turbo = {k: kwargs.pop(k) for k in _TURBO_KWARGS if k in kwargs}
        return turbo, kwargs

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs) -> PreTrainedModel:
        turbo, rest = cls._split(dict(kwargs))
        model = AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path, *args, **rest)
        apply_turbo(model, **turbo)
        return model

    @classmethod
    def from_config(cls, config, **kwargs) -> PreTrainedModel:
        turbo, rest = cls._split(dict(kwargs))
        model = AutoModelForCausalLM.from_config(config, **rest)
        apply_turbo(model, **turbo)
        return model
