"""``TurboReport``: what :func:`~turbo_core.integrations.transformers.apply_turbo` replaced in a
model, counted by kind, and what it left alone, each with the reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["KINDS", "LeftAlone", "TurboReport"]

#: The kinds of replacement, in report order:
#:
#: * ``linear``: ``torch.nn.Linear`` -> turbo ``Linear`` (``gemm``);
#: * ``float8_linear``: ``torch.nn.Linear`` -> ``Float8Linear`` (``gemm_fp8`` with the recipe);
#: * ``rmsnorm``: the architecture's RMSNorm -> turbo ``RMSNorm`` (``rmsnorm``);
#: * ``gated_mlp``: a SiLU-gated MLP block -> one GEMM over ``[gate | up]``, ``swiglu_with_probs``,
#:   the down projection;
#: * ``router``: a softmax top-k router -> ``fused_group_topk_routing_with_aux_score``;
#: * ``experts``: an experts module -> the ``"turbo"`` experts implementation (``moe_permute``,
#:   grouped GEMMs over the stored 3-D weights, ``swiglu_with_probs``, ``moe_unpermute``);
#: * ``attention``: an attention module -> the ``"turbo"`` attention implementation
#:   (``flash_attn_func``);
#: * ``loss``: a causal LM's ``loss_function`` -> turbo's fused ``cross_entropy`` (the logits read
#:   once forward and once backward in their dtype, no fp32 copy).
KINDS = ("linear", "float8_linear", "rmsnorm", "gated_mlp", "router", "experts", "attention", "loss")


@dataclass(frozen=True)
class LeftAlone:
    """One module not replaced: its name in ``model.named_modules()``, the kind it would have
    been replaced as, and why it was not."""

    name: str
    kind: str
    reason: str


@dataclass
class TurboReport:
    """What one ``apply_turbo`` call did to a model.

    Attributes:
        architecture: the model's class name (e.g. ``LlamaForCausalLM``).
        replaced: kind (:data:`KINDS`) -> the number of modules replaced as that kind.
        left_alone: the modules of a replaceable kind that were kept as they are, with the reason
            (excluded by name, switched off by an argument, dims unfit for FP8, routing semantics
            turbo's router does not compute, a module carrying its own instance ``forward``, ...).
        attn_implementation: the model's ``config._attn_implementation`` after the call.
        experts_implementation: the model's ``config._experts_implementation`` after the call
            (``None`` for a model without experts).
        fp8: the recipe given (a ``Float8QuantConfig``) or ``None``.
        already_applied: True when the model had been patched before: the call changed nothing
            and this report repeats the first call's counts.
    """

    architecture: str
    replaced: Counter = field(default_factory=Counter)
    left_alone: list[LeftAlone] = field(default_factory=list)
    attn_implementation: str | None = None
    experts_implementation: str | None = None
    fp8: object | None = None
    already_applied: bool = False

    def count(self, kind: str) -> int:
        """Modules replaced as ``kind`` (0 when none)."""
        return self.replaced.get(kind, 0)

    def skipped(self, kind: str | None = None) -> list[LeftAlone]:
        """The modules left alone, all of them or those of one kind."""
        return [s for s in self.left_alone if kind is None or s.kind == kind]

    def __str__(self) -> str:
        head = f"turbo on {self.architecture}"
        if self.fp8 is not None:
            gran = getattr(getattr(self.fp8, "granularity", None), "value", str(self.fp8))
            head += f" (FP8 {gran.lower()})"
        if self.already_applied:
            head += ": already applied, nothing changed"
        lines = [head + ":"]
        counts = [f"{self.replaced[k]} {k}" for k in KINDS if self.replaced.get(k)]
        lines.append("  replaced: " + (", ".join(counts) if counts else "nothing"))
        lines.append(f"  attention implementation: {self.attn_implementation}")
        if self.experts_implementation is not None:
            lines.append(f"  experts implementation: {self.experts_implementation}")
        groups: dict[tuple[str, str], list[str]] = {}
        for s in self.left_alone:
            groups.setdefault((s.kind, s.reason), []).append(s.name)
        if groups:
            lines.append("  left alone:")
        for (kind, reason), names in groups.items():
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            lines.append(f"    {kind} {shown}: {reason}")
        return "\n".join(lines)
