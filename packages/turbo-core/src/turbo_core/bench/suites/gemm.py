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
from turbo_core.dispatch.specs.gemm import GemmArgs


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
    from turbo_core.dispatch.dispatcher import call
    from turbo_core.dispatch.manager import use_backend

    def run(a, b, ta, tb):
        with use_backend(backend):
            return call("gemm", GemmArgs(a, b, ta, tb))

    return run


def reference(a, b, ta, tb) -> torch.Tensor:
    x, y = a.double(), b.double()
    return (x.t() if ta else x) @ (y.t() if tb else y)


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """Every provider on every case (see :func:`turbo_core.bench.runner.run_gemm`)."""
    from turbo_core.bench.runner import run_gemm

    return run_gemm(quick=quick, tokens=tokens or (32 if quick else 8192), models=models, providers=providers,
                    include_reference=include_reference, warmup=warmup, iters=iters, device=device,
                    progress=progress)
