"""Grouped GEMM suite (mixture-of-experts layers): each model's expert layers, forward, dgrad and
wgrad, bf16, with balanced and skewed token counts per expert.

Layer convention (a GroupedLinear): ``x [M, in]``, weights ``w [G, out, in]``, ``dy [M, out]``;
forward ``y_g = x_g @ w[g]^T`` (``trans_b=True``), dgrad ``dx_g = dy_g @ w[g]`` (``trans_b=False``),
wgrad ``dw[g] = dy_g^T @ x_g`` (the variable-K primitive with ``trans_c=True``). ``M`` is the rows
routed to the ``G`` local experts: ``tokens x top-k / experts`` each when balanced; skewed lengths
keep the same total with shares falling by 0.75x per expert and the last expert empty (unaligned
lengths and a zero-size group, as real routing gives).

Providers: ``torch`` (``torch._grouped_mm``: CUTLASS on sm90 for bf16; offsets are the int32
cumulative group ends; wgrad as ``_grouped_mm(dy.t(), x, offs)``) and ``turbo:<BACKEND>`` for every
available backend with both grouped primitives (the reference TORCH backend only with
``--include-reference``). FLOPs ``2 * M * out * in``; accuracy: max relative error against
float64 math per group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from turbo_core.bench.runner import Provider, run_cases, tensor_bytes
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.platform import platform_of
from turbo_core.plugins.host import get_host

#: MoE expert layers: routed experts, top-k, local experts per GPU (expert parallelism), and the
#: (name, out_features, in_features) of one expert's layers.
MOE = {
    "deepseek-v3": {"experts": 256, "topk": 8, "local": 8,
                    "layers": [("gate_up", 4096, 7168), ("down", 7168, 2048)]},
    "qwen3-30b-a3b": {"experts": 128, "topk": 8, "local": 8,
                      "layers": [("gate_up", 1536, 2048), ("down", 2048, 768)]},
    "mixtral-8x7b": {"experts": 8, "topk": 2, "local": 8,
                     "layers": [("gate_up", 28672, 4096), ("down", 4096, 14336)]},
}

#: Tiny shapes for --quick (CPU smoke runs).
QUICK = {"tiny": {"experts": 4, "topk": 2, "local": 4, "layers": [("gate_up", 96, 64), ("down", 64, 48)]}}

BALANCES = ("balanced", "skewed")
PASSES = ("fwd", "dgrad", "wgrad")


@dataclass
class GroupedCase:
    model: str
    layer: str
    pass_: str  # fwd | dgrad | wgrad
    balance: str  # balanced | skewed
    lens: tuple[int, ...]
    out_f: int
    in_f: int

    @property
    def m(self) -> int:
        return sum(self.lens)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.out_f * self.in_f

    @property
    def layout(self) -> str:
        return {"fwd": "NT", "dgrad": "NN", "wgrad": "TN"}[self.pass_]

    @property
    def label(self) -> str:
        return (f"{self.model}/{self.layer}/{self.pass_} {self.balance} G{len(self.lens)} "
                f"{self.m}x{self.out_f}x{self.in_f}")


def group_lens(tokens: int, spec: dict, balance: str) -> tuple[int, ...]:
    """Rows per local expert: ``tokens * topk / experts`` each, or the same total skewed."""
    per = tokens * spec["topk"] // spec["experts"]
    groups = spec["local"]
    if balance == "balanced":
        return (per,) * groups
    total = per * groups
    weights = [0.75**i for i in range(groups - 1)] + [0.0]
    lens = [int(total * w / sum(weights)) for w in weights]
    lens[0] += total - sum(lens)
    return tuple(lens)


def cases(tokens: int, quick: bool, models: list[str] | None) -> Iterator[GroupedCase]:
    table = QUICK if quick else MOE
    for model, spec in table.items():
        if models and model not in models:
            continue
        for layer, out_f, in_f in spec["layers"]:
            for balance in BALANCES:
                lens = group_lens(tokens, spec, balance)
                for pass_ in PASSES:
                    yield GroupedCase(model, layer, pass_, balance, lens, out_f, in_f)


def make_inputs(case: GroupedCase, device: str, dtype: torch.dtype, generator: torch.Generator):
    """``(p, q, group_lens int64, group_offs int64, group ends int32)``; ``(p, q)`` is ``(x, w)``
    forward, ``(dy, w)`` dgrad, ``(x, dy)`` wgrad."""
    g, m = len(case.lens), case.m

    def rand(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(dtype)

    if case.pass_ == "fwd":
        p, q = rand(m, case.in_f), rand(g, case.out_f, case.in_f)
    elif case.pass_ == "dgrad":
        p, q = rand(m, case.out_f), rand(g, case.out_f, case.in_f)
    else:
        p, q = rand(m, case.in_f), rand(m, case.out_f)
    lens = torch.tensor(case.lens, dtype=torch.int64, device=device)
    offs = torch.zeros(g + 1, dtype=torch.int64, device=device)
    offs[1:] = torch.cumsum(lens, 0)
    return p, q, lens, offs, offs[1:].to(torch.int32)


def torch_provider(pass_: str):
    def run(p, q, lens, offs, ends):
        if pass_ == "fwd":
            return torch._grouped_mm(p, q.transpose(-2, -1), offs=ends)
        if pass_ == "dgrad":
            return torch._grouped_mm(p, q, offs=ends)
        return torch._grouped_mm(q.t(), p, offs=ends)

    return run


def turbo_args(pass_: str, p, q, lens, offs):
    if pass_ == "wgrad":
        return GroupedGemmVariableKArgs(p, q, lens, offs, trans_c=True)
    return GroupedGemmArgs(p, q, lens, offs, trans_b=pass_ == "fwd")


def primitive_of(pass_: str) -> str:
    return "grouped_gemm_variable_k" if pass_ == "wgrad" else "grouped_gemm"


def turbo_provider(backend: str, pass_: str):
    prim = primitive_of(pass_)

    def run(p, q, lens, offs, ends):
        with use_backend(backend):
            return call(prim, turbo_args(pass_, p, q, lens, offs))

    return run


def reference(case: GroupedCase, p, q) -> torch.Tensor:
    """float64 result of the case, one GEMM per group on its rows (host-known lengths)."""
    x, y = p.double(), q.double()
    if case.pass_ == "wgrad":
        mats, start = [], 0
        for n in case.lens:
            mats.append(y[start:start + n].t() @ x[start:start + n])
            start += n
        return torch.stack(mats)
    pieces, start = [], 0
    for g, n in enumerate(case.lens):
        pieces.append(x[start:start + n] @ (y[g].t() if case.pass_ == "fwd" else y[g]))
        start += n
    return torch.cat(pieces)


def backends(include_reference: bool) -> list[str]:
    """Available backends with a kernel for both grouped primitives."""
    registry = get_host().registry
    names = []
    for kernel in registry.kernels_for("grouped_gemm"):
        name = kernel.backend
        if registry.kernel("grouped_gemm_variable_k", name) is None:
            continue
        if registry.backend(name).unavailable_reason() is None and (include_reference or name != "TORCH"):
            names.append(name)
    return names


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every provider on every case, side by side; rows as in ``turbo_core.bench.runner`` plus
    ``balance``, ``groups`` and ``group_lens``. ``tokens`` defaults to 8192 (32 with ``quick``)."""
    names = backends(include_reference)

    def case_providers(case, first):
        fn = torch_provider(case.pass_)
        out = [Provider("torch", lambda s: (lambda: fn(*s)), role="baseline")]
        prim = get_primitive(primitive_of(case.pass_))
        for b in names:
            reason = decline_reason(prim, b, turbo_args(case.pass_, *first[:4]), platform_of(first[0].device))
            tfn = turbo_provider(b, case.pass_)
            out.append(Provider(f"turbo:{b}", status=f"declined: {reason}") if reason
                       else Provider(f"turbo:{b}", lambda s, tfn=tfn: (lambda: tfn(*s))))
        return out

    return run_cases(
        "grouped_gemm", list(cases(tokens or (32 if quick else 8192), quick, models)),
        row=lambda c: {"case": c.label, "model": c.model, "layer": c.layer, "pass": c.pass_, "balance": c.balance,
                       "layout": c.layout, "groups": len(c.lens), "group_lens": list(c.lens), "m": c.m,
                       "n": c.out_f, "k": c.in_f, "dtype": "bf16"},
        flops=lambda c: c.flops, make_inputs=lambda c, gen: make_inputs(c, device, torch.bfloat16, gen),
        timed_bytes=lambda s: tensor_bytes(s[:2]), providers=case_providers,
        reference=lambda c, s, oracle: reference(c, s[0], s[1]),
        keep=providers, warmup=warmup, iters=iters, device=device, progress=progress)
