"""Dense GEMM suite: each model layer's forward (NT), dgrad (NN) and wgrad (TN) GEMM, bf16.

Providers: ``torch`` (``torch.matmul``: cuBLAS/hipBLASLt) and ``turbo:<BACKEND>`` for every
available backend with a ``gemm`` kernel that accepts the case (the reference TORCH backend only
with ``--include-reference``). Accuracy: max relative error against float64 math.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from turbo_core.bench.models import DENSE, QUICK
from turbo_core.bench.runner import Provider, available_backends, run_cases, tensor_bytes
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.platform import platform_of


@dataclass
class GemmCase:
    model: str
    layer: str
    pass_: str  # fwd | dgrad | wgrad
    layout: str
    m: int
    n: int
    k: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def label(self) -> str:
        return f"{self.model}/{self.layer}/{self.pass_} {self.layout} {self.m}x{self.n}x{self.k}"


def cases(tokens: int, quick: bool, models: list[str] | None) -> Iterator[GemmCase]:
    table = QUICK if quick else DENSE
    for model, layers in table.items():
        if models and model not in models:
            continue
        for layer, out_f, in_f in layers:
            yield GemmCase(model, layer, "fwd", "NT", tokens, out_f, in_f)
            yield GemmCase(model, layer, "dgrad", "NN", tokens, in_f, out_f)
            yield GemmCase(model, layer, "wgrad", "TN", out_f, in_f, tokens)


def make_inputs(case: GemmCase, device: str, dtype: torch.dtype, generator: torch.Generator):
    ta, tb = case.layout[0] == "T", case.layout[1] == "T"
    a = torch.randn(*((case.k, case.m) if ta else (case.m, case.k)), device=device, generator=generator).to(dtype)
    b = torch.randn(*((case.n, case.k) if tb else (case.k, case.n)), device=device, generator=generator).to(dtype)
    return a, b, ta, tb


def torch_provider(a, b, ta, tb):
    return torch.matmul(a.t() if ta else a, b.t() if tb else b)


def turbo_provider(backend: str):
    def run(a, b, ta, tb):
        with use_backend(backend):
            return call("gemm", GemmArgs(a, b, ta, tb))

    return run


def reference(a, b, ta, tb) -> torch.Tensor:
    x, y = a.double(), b.double()
    return (x.t() if ta else x) @ (y.t() if tb else y)


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every provider on every case (:func:`turbo_core.bench.runner.run_cases`)."""
    dtype = torch.bfloat16
    prim = get_primitive("gemm")
    backends = available_backends("gemm", include_reference=include_reference)

    def case_providers(case, first) -> list[Provider]:
        out = [Provider("torch", lambda s: lambda: torch_provider(*s), role="baseline")]
        for b in backends:
            a, bm, ta, tb = first
            reason = decline_reason(prim, b, GemmArgs(a, bm, ta, tb), platform_of(a.device))
            if reason:
                out.append(Provider(f"turbo:{b}", status=f"declined: {reason}"))
            else:
                fn = turbo_provider(b)
                out.append(Provider(f"turbo:{b}", lambda s, fn=fn: lambda: fn(*s)))
        return out

    return run_cases(
        "gemm", list(cases(tokens or (32 if quick else 8192), quick, models)),
        row=lambda c: {"case": c.label, "model": c.model, "layer": c.layer, "pass": c.pass_, "layout": c.layout,
                       "m": c.m, "n": c.n, "k": c.k, "dtype": "bf16"},
        flops=lambda c: c.flops,
        make_inputs=lambda c, gen: make_inputs(c, device, dtype, gen),
        timed_bytes=lambda s: tensor_bytes(s[:2]),
        providers=case_providers,
        reference=lambda c, s, oracle: reference(*s),
        keep=providers, warmup=warmup, iters=iters, device=device, progress=progress)
