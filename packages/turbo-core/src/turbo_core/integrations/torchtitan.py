"""turbo in TorchTitan models: the ``turbo`` model converter (``pip install turbo-core[torchtitan]``).

TorchTitan (0.3, the release on the package index) converts a model's *config tree* before it
builds the model. Two of its mechanisms reach this module, and both apply :class:`TurboConverter`:

* **converters**: a ``ModelConfigConverter`` whose ``Config`` is listed in a model registry's
  ``converters`` (what TorchTitan's float8 converter uses), in a ``config_registry`` function::

      from turbo_core.integrations.torchtitan import TurboConverter
      config.model_spec = llama3.model_registry("8B", converters=[TurboConverter.Config(fp8="rowwise")])

* **overrides**, selected by name on the command line or in ``Trainer.Config.override``:
  ``--override.imports turbo_core.integrations.torchtitan.turbo`` (options as JSON:
  ``'turbo_core.integrations.torchtitan.turbo={"fp8": "rowwise"}'``). The trainer imports this
  module, which registers the :func:`turbo` factory with ``@override``, and applies it to the model
  config before building the model.

The converter swaps, in TorchTitan's Llama-3, Qwen3 and DeepSeek-V3 models (every layer, the
multi-token-prediction layers included): each ``Linear`` for a turbo GEMM (``TurboLinear``, or
``TurboFloat8Linear`` with an FP8 recipe), each ``RMSNorm`` for turbo's, the inner attention
(Flex/Varlen/SDPA) for turbo's flash attention (same causal and packed-document masking, grouped
query heads as they are), and each ``MoE`` for turbo's routing, permutation and grouped GEMMs. The
modules keep TorchTitan's parameters, names, state_dict, initialization and sharding configs
(``turbo_core.integrations.torchtitan_layers``, ``torchtitan_moe``). :attr:`TurboConverter.report`
(also logged) says what was replaced and what was left alone, and why.

With attention converted, run with ``--training.disable_cuda_graphs`` (TorchTitan's own varlen
configs set it): the masks are TorchTitan's varlen metadata, whose shape follows each batch's
documents, which TorchTitan's whole-step CUDA graph cannot replay.

TorchTitan's converter protocol has no optimizer hook: turbo's FP8 weight caches see every
optimizer step by themselves (``turbo_core.ops.weight_cache``), so there is nothing to do after
``optimizer.step()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchtitan.config import derive, override
from torchtitan.models.common.attention import (
    BaseAttention,
    FlexAttention,
    ScaledDotProductAttention,
    VarlenAttention,
)
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.moe import GroupedExperts, MoE, TokenChoiceTopKRouter
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher, LocalTokenDispatcher
from torchtitan.models.deepseek_v3.model import Attention as MLAttention
from torchtitan.models.deepseek_v3.model import DeepSeekV3Model
from torchtitan.models.llama3.model import Llama3Model
from torchtitan.models.qwen3.model import Qwen3Model
from torchtitan.protocols.model import BaseModel, ModelConfigConverter
from torchtitan.tools.logging import logger

from turbo_core.integrations.torchtitan_layers import (
    FP8_RECIPES,
    TurboCausalAttention,
    TurboDocumentAttention,
    TurboFloat8Linear,
    TurboLinear,
    TurboRMSNorm,
)
from turbo_core.integrations.torchtitan_moe import TurboMoE, routing_mismatch

__all__ = ["SUPPORTED_MODELS", "TurboConverter", "TurboReport", "turbo"]

#: The model configs the converter takes (their subclasses too), by TorchTitan module.
SUPPORTED_MODELS = {"llama3": Llama3Model.Config, "qwen3": Qwen3Model.Config, "deepseek_v3": DeepSeekV3Model.Config}

_TURBO_CONFIGS = (TurboLinear.Config, TurboFloat8Linear.Config, TurboRMSNorm.Config, TurboCausalAttention.Config,
                  TurboDocumentAttention.Config, TurboMoE.Config)
_DISPATCHERS = (LocalTokenDispatcher.Config, AllToAllTokenDispatcher.Config)
_FP8_MULTIPLE = 16


@dataclass
class TurboReport:
    """What a conversion did. ``replaced``: kind -> FQNs (kinds ``linear``, ``linear_fp8``,
    ``rmsnorm``, ``attention``, ``moe``, ``moe_routing``, ``moe_fp8``); ``left``: FQN -> why it was
    left as it was (or, for FP8, why it runs without FP8). FQNs are paths in the config tree: the
    module names the model will have (``layers.0.attention.wo``), except where one config builds two
    modules (``qkv_linear.wkv`` builds ``wk`` and ``wv``, ``attention.qk_norm`` ``q_norm`` and
    ``k_norm``)."""

    replaced: dict[str, list[str]] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, fqn: str) -> None:
        self.replaced.setdefault(kind, []).append(fqn)

    def counts(self) -> dict[str, int]:
        """Replacements per kind."""
        return {kind: len(fqns) for kind, fqns in self.replaced.items()}

    def __str__(self) -> str:
        done = ", ".join(f"{kind} {n}" for kind, n in self.counts().items()) or "nothing"
        lines = [f"turbo converter: replaced {done}"]
        lines += [f"  left {fqn}: {why}" for fqn, why in self.left.items()]
        return "\n".join(lines)


def _set(parent: object, attr: str | int, value: object) -> None:
    if isinstance(parent, list):
        parent[attr] = value
    else:
        setattr(parent, attr, value)


class TurboConverter(ModelConfigConverter):
    """A TorchTitan ``ModelConfigConverter`` putting turbo's kernels into the model config.

    ``convert(model_config)`` changes the tree in place and returns the same root config (the trainer
    builds the config object it holds). An unsupported model raises ``TypeError`` naming the supported
    ones before anything changes. Converting twice changes nothing more.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(ModelConfigConverter.Config):
        linear: bool = True
        """Linears -> turbo GEMMs (the MoE routers' gates stay TorchTitan's: they run in fp32)."""
        norm: bool = True
        """RMSNorm -> turbo's rmsnorm."""
        attention: bool = True
        """Inner attention (Flex, Varlen, SDPA) -> turbo's flash attention."""
        moe: bool = True
        """MoE -> turbo's routing, moe_permute, grouped GEMMs, moe_unpermute."""
        fp8: str | None = None
        """FP8 recipe of the linears and expert GEMMs: ``tensorwise``, ``rowwise``, ``blockwise``
        (E4M3; layers whose dims are not multiples of 16 run without FP8). ``None``: no FP8."""
        filter_fqns: list[str] = field(default_factory=list)
        """Modules whose FQN contains one of these strings are left as they are."""

    def __init__(self, config: Config):
        for name in ("linear", "norm", "attention", "moe"):
            if not isinstance(getattr(config, name), bool):
                raise TypeError(f"{name}: expected a bool, got {getattr(config, name)!r}")
        if config.fp8 is not None and config.fp8 not in FP8_RECIPES:
            raise ValueError(f"fp8: expected one of {', '.join(FP8_RECIPES)} or None, got {config.fp8!r}")
        if not isinstance(config.filter_fqns, list) or not all(isinstance(f, str) for f in config.filter_fqns):
            raise TypeError(f"filter_fqns: expected a list of str, got {config.filter_fqns!r}")
        self.config = config
        self.report: TurboReport | None = None

    def convert(self, model_config: BaseModel.Config) -> BaseModel.Config:
        if not isinstance(model_config, tuple(SUPPORTED_MODELS.values())):
            names = ", ".join(f"{cls.__qualname__} (torchtitan.models.{mod})" for mod, cls in SUPPORTED_MODELS.items())
            raise TypeError(f"model_config: the turbo converter supports {names}; got "
                            f"{type(model_config).__qualname__}. Nothing was converted.")
        report = TurboReport()
        cfg = self.config
        if cfg.moe:
            self._moe(model_config, report)
        if cfg.attention:
            self._attention(model_config, report)
        if cfg.norm:
            self._norms(model_config, report)
        if cfg.linear:
            self._linears(model_config, report)
        self.report = report
        logger.info(str(report))
        return model_config

    def _filtered(self, fqn: str) -> bool:
        return any(f in fqn for f in self.config.filter_fqns)

    def _moe(self, root, report: TurboReport) -> None:
        fp8 = self.config.fp8
        for fqn, moe, parent, attr in root.traverse(MoE.Config):
            why = self._moe_unsupported(fqn, moe)
            if why is not None:
                if not isinstance(moe, TurboMoE.Config):
                    report.left[fqn] = why
                continue
            experts = moe.routed_experts.inner_experts
            fits = experts.dim % _FP8_MULTIPLE == 0 and experts.hidden_dim % _FP8_MULTIPLE == 0
            mismatch = routing_mismatch(moe)
            _set(parent, attr, derive(moe, TurboMoE.Config, turbo_routing=mismatch is None,
                                      recipe=fp8 if fits else None))
            report.add("moe", fqn)
            if mismatch is None:
                report.add("moe_routing", f"{fqn}.router")
            else:
                report.left[f"{fqn}.router"] = f"TorchTitan's router kept: {mismatch}"
            if fp8 is not None:
                if fits:
                    report.add("moe_fp8", f"{fqn}.routed_experts.inner_experts")
                else:
                    report.left[f"{fqn}.routed_experts.inner_experts"] = (
                        f"no FP8: dim {experts.dim} / hidden_dim {experts.hidden_dim} not multiples of {_FP8_MULTIPLE}")

    def _moe_unsupported(self, fqn: str, moe: MoE.Config) -> str | None:
        if isinstance(moe, TurboMoE.Config):
            return "already turbo"
        if self._filtered(fqn):
            return "filter_fqns"
        if type(moe) is not MoE.Config:
            return f"{type(moe).__qualname__} keeps its own forward"
        routed = moe.routed_experts
        if type(routed.inner_experts) is not GroupedExperts.Config:
            return f"experts {type(routed.inner_experts).__qualname__} keep their own forward"
        if type(routed.token_dispatcher) not in _DISPATCHERS:
            return f"token dispatcher {type(routed.token_dispatcher).__qualname__} (turbo runs the local dispatch)"
        if type(moe.router) is not TokenChoiceTopKRouter.Config:
            return f"router {type(moe.router).__qualname__} keeps its own forward"
        return None

    def _attention(self, root, report: TurboReport) -> None:
        found = []
        for fqn, attn, _, _ in root.traverse(BaseAttention.Config):
            inner = attn.inner_attention
            new = None
            if type(inner) is FlexAttention.Config:
                new = TurboDocumentAttention.Config(window_size=(-1, 0))
            elif type(inner) is VarlenAttention.Config:
                new = TurboDocumentAttention.Config(window_size=tuple(inner.window_size))
            elif type(inner) is ScaledDotProductAttention.Config:
                new = TurboCausalAttention.Config()
            found.append((f"{fqn}.inner_attention", attn, inner, new))
        todo = [f for f in found if f[3] is not None and not self._filtered(f[0])]
        if todo and len(todo) != len([f for f in found if f[3] is not None]):
            raise ValueError("filter_fqns: keeps some attention layers and not others; TorchTitan builds one kind "
                             "of attention mask for every layer, so all convert or none (attention=False)")
        for fqn, attn, inner, new in found:
            if new is None:
                if not isinstance(inner, _TURBO_CONFIGS):
                    report.left[fqn] = f"{type(inner).__qualname__} keeps its own forward"
            elif self._filtered(fqn):
                report.left[fqn] = "filter_fqns"
            else:
                attn.inner_attention = new
                report.add("attention", fqn)
        if any(isinstance(f[3], TurboDocumentAttention.Config) for f in todo):
            logger.warning("turbo converter: attention now takes TorchTitan's varlen masks (cu_seqlens per batch); "
                           "set --training.disable_cuda_graphs, as TorchTitan's own varlen configs do")

    def _norms(self, root, report: TurboReport) -> None:
        unused = {id(a.q_norm) for _, a, _, _ in root.traverse(MLAttention.Config) if a.q_lora_rank == 0}
        for fqn, norm, parent, attr in root.traverse(RMSNorm.Config):
            if id(norm) in unused or isinstance(norm, TurboRMSNorm.Config):
                continue
            if self._filtered(fqn):
                report.left[fqn] = "filter_fqns"
            elif type(norm) is not RMSNorm.Config:
                report.left[fqn] = f"{type(norm).__qualname__} keeps its own forward"
            else:
                _set(parent, attr, derive(norm, TurboRMSNorm.Config))
                report.add("rmsnorm", fqn)

    def _linears(self, root, report: TurboReport) -> None:
        fp8 = self.config.fp8
        gates = {id(r.gate) for _, r, _, _ in root.traverse(TokenChoiceTopKRouter.Config)}
        for fqn, lin, parent, attr in root.traverse(Linear.Config):
            if isinstance(lin, (TurboLinear.Config, TurboFloat8Linear.Config)):
                continue
            if self._filtered(fqn):
                report.left[fqn] = "filter_fqns"
            elif id(lin) in gates:
                report.left[fqn] = "MoE router gate: TorchTitan computes its logits in fp32"
            elif type(lin) is not Linear.Config:
                report.left[fqn] = f"{type(lin).__qualname__} keeps its own forward"
            elif fp8 is not None and _fits_fp8(lin.in_features, lin.out_features):
                _set(parent, attr, derive(lin, TurboFloat8Linear.Config, recipe=fp8))
                report.add("linear_fp8", fqn)
            else:
                _set(parent, attr, derive(lin, TurboLinear.Config))
                report.add("linear", fqn)
                if fp8 is not None:
                    report.left[fqn] = (f"no FP8: {lin.in_features} -> {lin.out_features} not multiples of "
                                        f"{_FP8_MULTIPLE} (turbo Linear)")


def _fits_fp8(*dims: int) -> bool:
    return all(d % _FP8_MULTIPLE == 0 for d in dims)


@override(target=BaseModel.Config,
          description="turbo: linears, RMSNorm, attention and MoE on turbo's kernels (turbo_core.integrations)")
def turbo(config: BaseModel.Config, **options) -> BaseModel.Config:
    """The ``--override.imports turbo_core.integrations.torchtitan.turbo`` factory: the model config
    converted by ``TurboConverter.Config(**options)`` (options as that config's fields)."""
    return TurboConverter.Config(**options).build().convert(config)
