"""SwiGLU / GeGLU with per-token probs (``turbo bench activation``), bf16, forward and backward.

Shapes: ``x [T, 2F]`` for the dense FFN widths F of Llama-3.1 8B (14336) and 70B (28672).
Bytes: forward reads ``x`` and ``probs`` and writes ``out [T, F]``; backward reads ``grad_out``,
``x``, ``probs`` and writes ``grad_x`` and ``grad_probs``. Providers and the runner are those of
the RMSNorm suite (:mod:`turbo_core.bench.suites.norm`): eager torch, ``torch.compile`` of the same
expression (fp32 math, one rounding), and the turbo backends through the primitives.

liger-kernel, when importable (:func:`peer_providers`): ``liger`` is ``LigerSiLUMulFunction``,
which takes the gate ``a`` and the up projection ``b`` as two contiguous ``[T, F]`` tensors (copied
from ``x`` outside the timed region) and has no probs: it computes ``silu(a) * b`` and, backward,
``(da, db)`` written over ``a`` and ``b`` (liger's in-place backward). ``liger:gate_up`` is
``LigerFusedGateUpSiLUMulFunction`` on ``x [T, 2F]`` itself (gate first, as here; newer
liger-kernel only). Both are scored with the case's byte count, which differs from the bytes they
move only by the probs (4 B per token forward, 8 backward), and checked against float64 math of
what they compute. liger's GEGLU uses the tanh approximation of GELU, not this suite's exact
(erf) GELU: its rows are declined with that reason.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from turbo_core.bench.suites.norm import MemCase, Peer, liger_attr, print_table, run_bandwidth
from turbo_core.dispatch import call, use_backend
from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs

__all__ = ["cases", "peer_providers", "print_table", "run"]

#: FFN width F (the GLU half width) per model.
FFN = {"llama3.1-8b": 14336, "llama3.1-70b": 28672}
QUICK_FFN = {"tiny": 80}
KINDS = ("swiglu", "geglu")
DEFAULT_TOKENS = 16384


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MemCase]:
    table = QUICK_FFN if quick else FFN
    tokens = tokens or (32 if quick else DEFAULT_TOKENS)
    dtype = torch.bfloat16
    e = torch.empty((), dtype=dtype).element_size()
    out = []
    for kind in KINDS:
        for model, ffn in table.items():
            if models and model not in models:
                continue
            th = tokens * ffn * e
            out.append(MemCase("activation", kind, model, "fwd", tokens, ffn, dtype, 3 * th + 4 * tokens))
            out.append(MemCase("activation", kind, model, "bwd", tokens, ffn, dtype, 5 * th + 8 * tokens))
    return out


def _act(kind: str, a: torch.Tensor) -> torch.Tensor:
    return F.silu(a) if kind == "swiglu" else F.gelu(a, approximate="none")


def _glu_expr(x: torch.Tensor, probs: torch.Tensor, kind: str) -> torch.Tensor:
    a, b = x.float().chunk(2, dim=-1)
    return (_act(kind, a) * b * probs.unsqueeze(-1)).to(x.dtype)


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    x = torch.randn(case.tokens, 2 * case.hidden, device=device, generator=gen).to(case.dtype)
    probs = torch.rand(case.tokens, device=device, generator=gen)
    grad = torch.randn(case.tokens, case.hidden, device=device, generator=gen).to(case.dtype)
    return x, probs, grad


def reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """float64: fwd ``[out]``; bwd ``[grad_x, grad_probs]``."""
    x, probs, grad = inputs
    a, b = x.double().chunk(2, dim=-1)
    p = probs.double().unsqueeze(-1)
    inv_sqrt2 = 1.0 / math.sqrt(2.0)
    if case.op == "swiglu":
        s = torch.sigmoid(a)
        act, act_grad = a * s, s * (1.0 + a * (1.0 - s))
    else:
        cdf = 0.5 * (1.0 + torch.erf(a * inv_sqrt2))
        act, act_grad = a * cdf, cdf + a * torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    if case.pass_ == "fwd":
        return [act * b * p]
    g = grad.double()
    return [torch.cat([g * b * p * act_grad, g * act * p], dim=-1), (g * act * b).sum(-1)]


def torch_provider(case: MemCase, compiled: bool) -> Callable:
    fn = _glu_expr
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(_glu_expr, dynamic=False)

    def prepare(inputs):
        x, probs, grad = inputs
        if case.pass_ == "fwd":
            return lambda: [fn(x, probs, case.op)]
        xg, pg = x.detach().requires_grad_(), probs.detach().requires_grad_()
        out = fn(xg, pg, case.op)
        return lambda: list(torch.autograd.grad(out, (xg, pg), grad, retain_graph=True))

    return prepare


def turbo_args(case: MemCase, inputs: tuple):
    x, probs, grad = inputs
    if case.pass_ == "fwd":
        return f"{case.op}_fwd", GluFwdArgs(x, probs)
    return f"{case.op}_bwd", GluBwdArgs(grad, x, probs)


def turbo_provider(case: MemCase, backend: str) -> Callable:
    def prepare(inputs):
        name, args = turbo_args(case, inputs)

        def run_once():
            with use_backend(backend):
                out = call(name, args)
            return [out] if case.pass_ == "fwd" else list(out)

        return run_once

    return prepare


# ---- liger-kernel -------------------------------------------------------------------------------


def _swiglu_nop_reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """float64 of liger's op (no probs): fwd ``[silu(a) * b]``; bwd ``[da, db]``."""
    x, _, grad = inputs
    a, b = x.double().chunk(2, dim=-1)
    s = torch.sigmoid(a)
    if case.pass_ == "fwd":
        return [a * s * b]
    g = grad.double()
    return [g * b * s * (1.0 + a * (1.0 - s)), g * a * s]


def _liger_silu_mul(case: MemCase) -> Peer:
    fn, info = liger_attr("liger_kernel.ops.swiglu", "LigerSiLUMulFunction")
    if fn is None:
        return Peer("liger", declined=info)

    def prepare(inputs):
        x, _, grad = inputs
        a, b = (t.clone(memory_format=torch.contiguous_format) for t in x.chunk(2, dim=-1))
        if case.pass_ == "fwd":
            return lambda: [fn.apply(a, b)]
        ag, bg = a.requires_grad_(), b.requires_grad_()
        out = fn.apply(ag, bg)
        return lambda: list(torch.autograd.grad(out, (ag, bg), grad, retain_graph=True))

    extra = "; bwd: da, db written over a, b (in place)" if case.pass_ == "bwd" else ""
    note = (f"liger-kernel {info}: LigerSiLUMulFunction(a, b) = silu(a) * b, no probs; a, b separate contiguous "
            f"[T, F] copies of x's halves; GB/s from the case's bytes (the same but probs'){extra}")
    return Peer("liger", prepare, reference=lambda inputs: _swiglu_nop_reference(case, inputs), note=note)


def _liger_gate_up(case: MemCase) -> Peer:
    fn, info = liger_attr("liger_kernel.ops.swiglu", "LigerFusedGateUpSiLUMulFunction")
    if fn is None:
        return Peer("liger:gate_up", declined=info)

    def prepare(inputs):
        x, _, grad = inputs
        if case.pass_ == "fwd":
            return lambda: [fn.apply(x, False)]
        xg = x.detach().requires_grad_()
        out = fn.apply(xg, False)
        return lambda: [torch.autograd.grad(out, xg, grad, retain_graph=True)[0]]

    def reference(inputs):
        ref = _swiglu_nop_reference(case, inputs)
        return ref if case.pass_ == "fwd" else [torch.cat(ref, dim=-1)]

    note = (f"liger-kernel {info}: LigerFusedGateUpSiLUMulFunction(x [T, 2F], in_place=False) = silu(a) * b, "
            "no probs; GB/s from the case's bytes (the same but probs')")
    return Peer("liger:gate_up", prepare, reference=reference, note=note)


def peer_providers(case: MemCase) -> list[Peer]:
    """liger-kernel's SwiGLU (two forms); for GeGLU one declined row (liger's is the tanh form)."""
    if case.op == "geglu":
        return [Peer("liger", declined="liger-kernel's GEGLU (LigerGELUMulFunction) is the tanh approximation "
                                       "of GELU; this case is exact (erf) GELU")]
    return [_liger_silu_mul(case), _liger_gate_up(case)]


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """The GLU suite: rows as :func:`turbo_core.bench.suites.norm.run_bandwidth`'s."""
    return run_bandwidth(sys.modules[__name__], cases(tokens, quick, models), providers=providers,
                         include_reference=include_reference,
                         warmup=warmup, iters=iters, device=device, progress=progress)
