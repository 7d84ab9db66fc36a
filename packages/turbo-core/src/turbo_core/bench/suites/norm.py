"""RMSNorm suite (``turbo bench norm``), and the runner shared by the memory-bound suites.

Memory-bound ops are scored in GB/s from an explicit byte count (every input read once, every
output written once; the fp32 ``rstd`` row statistic, 1/H of the traffic, is left out), next to
the device-to-device copy bandwidth measured in the same process (``copy_``: read + write of a
large tensor), and the ratio to eager PyTorch.

Providers: ``torch`` (eager PyTorch, the usual fp32 RMSNorm expression), ``torch.compile`` (the
same function compiled, static shapes; a ``skipped`` row with the reason where it does not run,
:func:`compile_skip_reason`), and ``turbo:<BACKEND>`` for every available backend with a
kernel for the primitive (the TORCH reference only with ``--include-reference``). The turbo
providers call the primitive (``rmsnorm_fwd``/``rmsnorm_bwd``); the torch providers time the
forward expression, or ``torch.autograd.grad`` of it over a graph built before timing. ``liger``
(when liger-kernel is importable; else a declined row with the reason): ``LigerRMSNormFunction``
(``LigerFusedAddRMSNormFunction`` for the residual case) from its ``liger_kernel.ops`` submodule
(the default Triton implementation) with ``casting_mode="gemma"`` (fp32 math, rounded once, as
here) and, backward, liger's default ``in_place=True`` (dx written over a private copy of dy).
Accuracy: max relative error of every output against float64 math.

Peers: a suite may also define ``peer_providers(case) -> list[Peer]`` (other libraries' kernels of
the op, e.g. liger-kernel's, see :func:`liger_attr`): each is timed like the others, or gets a row
``declined: <reason>`` (library not importable, op not there); its ``note`` is copied into its
rows (what exactly it computes when that differs from the case).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.platform import platform_of
from turbo_core.plugins.host import get_host

__all__ = ["MemCase", "Peer", "cases", "copy_bandwidth", "liger_attr", "peer_providers", "print_table", "run",
           "run_bandwidth"]

#: Model hidden sizes (Hugging Face configs): the RMSNorm width.
HIDDEN = {"llama3.1-8b": 4096, "deepseek-v3": 7168, "llama3.1-70b": 8192, "llama3.1-405b": 16384}
QUICK_HIDDEN = {"tiny": 96}
DEFAULT_TOKENS = 16384
EPS = 1e-6


@dataclass
class MemCase:
    """One timed case of a memory-bound suite. ``hidden``: the row width (the GLU half width).
    ``extra``: suite-private data; ``fields``: JSON values copied into every row of the case."""

    suite: str
    op: str
    model: str
    pass_: str
    tokens: int
    hidden: int
    dtype: torch.dtype
    bytes: int
    extra: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.op}/{self.pass_} {self.model} {self.tokens}x{self.hidden}"


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def cases(tokens: int | None, quick: bool, models: list[str] | None) -> list[MemCase]:
    table = QUICK_HIDDEN if quick else HIDDEN
    tokens = tokens or (32 if quick else DEFAULT_TOKENS)
    dtype = torch.bfloat16
    e = _size(dtype)
    out = []
    for model, hidden in table.items():
        if models and model not in models:
            continue
        th = tokens * hidden * e
        out.append(MemCase("norm", "rmsnorm", model, "fwd", tokens, hidden, dtype, 2 * th + hidden * e))
        out.append(MemCase("norm", "rmsnorm", model, "bwd", tokens, hidden, dtype, 3 * th + 2 * hidden * e))
        out.append(MemCase("norm", "rmsnorm_residual", model, "fwd", tokens, hidden, dtype,
                           4 * th + hidden * e))
    return out


# ---- the torch expressions (eager and compiled) ------------------------------------------------


def _rmsnorm_expr(x, w, residual=None, eps=EPS):
    if residual is not None:
        x = (x.float() + residual.float()).to(x.dtype)
        s = x.float()
        return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype), x
    s = x.float()
    return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def make_inputs(case: MemCase, device: str, gen: torch.Generator) -> tuple:
    shape = (case.tokens, case.hidden)
    x = torch.randn(shape, device=device, generator=gen).to(case.dtype)
    w = (1.0 + 0.1 * torch.randn(case.hidden, device=device, generator=gen)).to(case.dtype)
    other = torch.randn(shape, device=device, generator=gen).to(case.dtype)  # residual or dy
    return x, w, other


def reference(case: MemCase, inputs: tuple) -> list[torch.Tensor]:
    """float64 outputs: fwd ``[y]`` (+ ``x_plus_r``); bwd ``[dx, dgamma]``."""
    x, w, other = inputs
    if case.op == "rmsnorm_residual":
        s = (x.double() + other.double()).to(x.dtype).double()
    else:
        s = x.double()
    rstd = torch.rsqrt(s.square().mean(-1, keepdim=True) + EPS)
    n = s * rstd
    if case.pass_ == "fwd":
        return [n * w.double()] + ([s] if case.op == "rmsnorm_residual" else [])
    dy = other.double()
    dn = dy * w.double()
    dx = rstd * (dn - n * (dn * n).mean(-1, keepdim=True))
    return [dx, (dy * n).sum(0)]


def torch_provider(case: MemCase, compiled: bool) -> Callable:
    """``prepare(inputs) -> zero-argument callable`` (the forward graph of a backward is built in
    ``prepare``, outside the timed region)."""
    fn = _rmsnorm_expr
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(_rmsnorm_expr, dynamic=False)

    def prepare(inputs):
        x, w, other = inputs
        if case.pass_ == "fwd":
            if case.op == "rmsnorm_residual":
                return lambda: list(fn(x, w, other))
            return lambda: [fn(x, w)]
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = fn(xg, wg)
        return lambda: list(torch.autograd.grad(y, (xg, wg), other, retain_graph=True))

    return prepare


def turbo_args(case: MemCase, inputs: tuple):
    """``(primitive name, args)`` of the case, for the capability check."""
    x, w, other = inputs
    if case.pass_ == "fwd":
        residual = other if case.op == "rmsnorm_residual" else None
        return "rmsnorm_fwd", RmsNormFwdArgs(x, w, EPS, False, residual)
    rstd = torch.rsqrt(x.float().square().mean(-1) + EPS)
    return "rmsnorm_bwd", RmsNormBwdArgs(other, x, w, rstd)


def turbo_provider(case: MemCase, backend: str) -> Callable:
    def prepare(inputs):
        name, args = turbo_args(case, inputs)
        if case.pass_ == "bwd":  # rstd from the backend's own forward

            with use_backend(backend):
                _, rstd, _ = call("rmsnorm_fwd", RmsNormFwdArgs(args.x, args.gamma, EPS))
            args = RmsNormBwdArgs(args.dy, args.x, args.gamma, rstd)

        def run_once():
            with use_backend(backend):
                out = call(name, args)
            if case.pass_ == "bwd":
                return list(out)
            return [out[0], out[2]] if case.op == "rmsnorm_residual" else [out[0]]

        return run_once

    return prepare


# ---- peers: other libraries' kernels of the op ------------------------------------------------


@dataclass
class Peer:
    """One peer provider of a case: ``prepare(inputs) -> zero-argument callable`` returning the
    outputs, or ``declined`` (why it does not run); ``reference(inputs)``: float64 outputs of what
    the peer computes when that differs from the case's op (else the case's reference is used);
    ``note``: copied into its rows."""

    name: str
    prepare: Callable | None = None
    declined: str | None = None
    reference: Callable | None = None
    note: str | None = None


def _liger_version() -> str:
    try:
        return md.version("liger-kernel")
    except md.PackageNotFoundError:
        return str(getattr(sys.modules.get("liger_kernel"), "__version__", "unknown"))


def liger_attr(module: str, attr: str):
    """``(obj, version)``: ``attr`` of liger-kernel's ``module`` and the liger-kernel version; or
    ``(None, reason)`` when liger-kernel is not importable or has no such attribute."""
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # not installed, or a broken install (e.g. its triton import failing)
        return None, f"liger-kernel not importable ({type(exc).__name__}: {str(exc)[:120]})"
    obj = getattr(mod, attr, None)
    if obj is None:
        return None, f"{module}.{attr} not found (liger-kernel {_liger_version()})"
    return obj, _liger_version()


def _liger_rmsnorm(case: MemCase) -> Peer:
    """liger-kernel's ``LigerRMSNormFunction`` (``LigerFusedAddRMSNormFunction`` for the residual
    case) with ``casting_mode="gemma"`` (fp32 math, rounded once: the case's numerics)."""
    residual = case.op == "rmsnorm_residual"
    fn, info = liger_attr("liger_kernel.ops.rms_norm" if not residual else "liger_kernel.ops.fused_add_rms_norm",
                          "LigerFusedAddRMSNormFunction" if residual else "LigerRMSNormFunction")
    if fn is None:
        return Peer("liger", declined=info)
    if residual:  # apply(X, R, W, eps, offset, casting_mode, in_place) -> (Y, X + R)
        note = f"liger-kernel {info}: LigerFusedAddRMSNormFunction, casting_mode='gemma'"
        return Peer("liger", lambda inp: lambda: list(fn.apply(inp[0], inp[2], inp[1], EPS, 0.0, "gemma", False)),
                    note=note)
    note = f"liger-kernel {info}: LigerRMSNormFunction, casting_mode='gemma' (fp32 math, rounded once)"
    if case.pass_ == "fwd":  # apply(X, W, eps, offset, casting_mode, in_place) -> Y
        return Peer("liger", lambda inp: lambda: [fn.apply(inp[0], inp[1], EPS, 0.0, "gemma", True)], note=note)

    def prepare(inputs):
        x, w, other = inputs
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = fn.apply(xg, wg, EPS, 0.0, "gemma", True)
        dy = other.clone()  # in_place=True (liger's default): dx is written over dy
        return lambda: list(torch.autograd.grad(y, (xg, wg), dy, retain_graph=True))

    return Peer("liger", prepare, note=note + "; in_place=True: dx written over a private copy of dy")


def peer_providers(case: MemCase) -> list[Peer]:
    """liger-kernel's RMSNorm (see :func:`_liger_rmsnorm`)."""
    return [_liger_rmsnorm(case)]


# ---- the runner shared by the memory-bound suites ----------------------------------------------


def copy_bandwidth(device: str, *, nbytes: int = 2**30, warmup: int = 5, iters: int = 20) -> float:
    """GB/s of ``dst.copy_(src)`` (bytes read + bytes written) on a ``nbytes`` tensor."""
    if device != "cuda":
        nbytes = min(nbytes, 2**26)
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    t = timing.measure(lambda a, b: b.copy_(a), [(src, dst)], warmup=warmup, iters=iters)
    return 2 * nbytes / t.median_ms / 1e6


def compile_skip_reason(device: str) -> str | None:
    """Why the ``torch.compile`` provider does not run here (None: it runs). On the CPU it is not
    timed: Inductor's C++ build of every case would dominate a ``--quick`` smoke run."""
    if device != "cuda":
        return "torch.compile is timed on GPUs only (on the CPU its build would dominate a --quick run)"
    if not getattr(torch._dynamo, "is_dynamo_supported", lambda: True)():
        return f"torch.compile is not supported here (torch {torch.__version__}, Python {sys.version.split()[0]})"
    if importlib.util.find_spec("triton") is None:
        return "torch.compile needs triton for GPU kernels; it is not importable"
    return None


def _backends(primitive: str) -> list[str]:
    registry = get_host().registry
    return [k.backend for k in registry.kernels_for(primitive)
            if registry.backend(k.backend).unavailable_reason() is None]


def _row_slices(out: torch.Tensor, ref: torch.Tensor, elems: int = 2**25):
    """``(out, ref)`` in matching row slices of at most about ``elems`` elements, as float64."""
    if ref.dim() == 0:
        yield out.double(), ref.double()
        return
    step = max(1, elems // max(1, ref[0].numel()))
    for i in range(0, ref.shape[0], step):
        yield out[i:i + step].double(), ref[i:i + step].double()


def _max_rel_err(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> float:
    """``max |out - ref| / max |ref|`` over the outputs, in float64 row slices (GB-sized outputs
    need no GB-sized temporaries)."""
    worst = 0.0
    for out, ref in zip(outs, refs, strict=True):
        if out.shape != ref.shape:
            raise ValueError(f"output of shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        if ref.numel() == 0:
            continue
        scale = max(r.abs().max().item() for _, r in _row_slices(ref, ref)) or 1.0
        for o, r in _row_slices(out, ref):
            worst = max(worst, (o - r).abs().max().item() / scale)
    return worst


def run_bandwidth(suite, all_cases: list[MemCase], *, providers: list[str] | None, include_reference: bool,
                  warmup: int, iters: int, device: str, progress=None,
                  copy_gbps: float | None = None) -> list[dict]:
    """Time every provider on every case of ``suite`` (a module with ``make_inputs``, ``reference``,
    ``torch_provider``, ``turbo_args``, ``turbo_provider``); JSON-ready rows."""
    if copy_gbps is None:
        copy_gbps = copy_bandwidth(device)
    no_compile = compile_skip_reason(device)
    gen = torch.Generator(device=device).manual_seed(0)
    task = progress.add_task(all_cases[0].suite if all_cases else "-", total=len(all_cases)) if progress else None
    rows: list[dict] = []
    for case in all_cases:
        first = suite.make_inputs(case, device, gen)
        per_set = sum(t.numel() * t.element_size() for t in first if isinstance(t, torch.Tensor))
        sets = [first] + [suite.make_inputs(case, device, gen) for _ in range(timing.copies_needed(per_set) - 1)]
        prim_name, prim_args = suite.turbo_args(case, first)
        table: list[tuple[str, Callable | None]] = [("torch", suite.torch_provider(case, False))]
        table.append(("torch.compile", None))  # compiled lazily: only when selected
        table += [(f"turbo:{b}", None) for b in _backends(prim_name) if include_reference or b != "TORCH"]
        table += [(p.name, p) for p in getattr(suite, "peer_providers", lambda c: [])(case)]
        if providers:
            table = [(n, f) for n, f in table if n in providers]
        refs = suite.reference(case, first)
        base_ms = None
        for name, prepare in table:
            row = {"suite": case.suite, "case": case.label, "op": case.op, "model": case.model, "pass": case.pass_,
                   "tokens": case.tokens, "hidden": case.hidden, "dtype": str(case.dtype).replace("torch.", ""),
                   "bytes": case.bytes, **case.fields, "provider": name, "copy_gbps": copy_gbps}
            case_refs = refs
            try:
                if isinstance(prepare, Peer):
                    peer = prepare
                    row.update({"note": peer.note} if peer.note else {})
                    if peer.declined:
                        rows.append({**row, "status": f"declined: {peer.declined}"})
                        continue
                    case_refs = peer.reference(first) if peer.reference else refs
                    prepare = peer.prepare
                elif name.startswith("turbo:"):
                    backend = name.split(":", 1)[1]
                    reason = decline_reason(get_primitive(prim_name), backend, prim_args, platform_of(first[0].device))
                    if reason:
                        rows.append({**row, "status": f"declined: {reason}"})
                        continue
                    prepare = suite.turbo_provider(case, backend)
                elif name == "torch.compile":
                    if no_compile:
                        rows.append({**row, "status": f"skipped: {no_compile}"})
                        continue
                    prepare = suite.torch_provider(case, True)
                calls = [(prepare(s), s[0]) for s in sets]
                err = _max_rel_err(calls[0][0](), case_refs)
                t = timing.measure(lambda c, _anchor: c(), calls, warmup=warmup, iters=iters)
                del calls
            except Exception as exc:  # one failing provider is reported, the suite goes on
                rows.append({**row, "status": f"error: {type(exc).__name__}: {str(exc)[:300]}"})
                continue
            gbps = case.bytes / t.median_ms / 1e6
            if name == "torch":
                base_ms = t.median_ms
            rows.append({**row, "status": "ok", "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                         "gbps": gbps, "copy_fraction": gbps / copy_gbps,
                         "ratio": (base_ms / t.median_ms) if base_ms else None, "max_rel_err": err})
        if progress:
            progress.advance(task)
        del sets, refs
    return rows


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None) -> list[dict]:
    """The RMSNorm suite: rows as :func:`run_bandwidth`'s."""
    return run_bandwidth(sys.modules[__name__], cases(tokens, quick, models), providers=providers,
                         include_reference=include_reference,
                         warmup=warmup, iters=iters, device=device, progress=progress)


def _gbps_cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    return f"{r['gbps']:.4g}{ratio} {{{r['copy_fraction']:.0%}}} [{r['max_rel_err']:.1e}]"


def print_table(rows: list[dict], console) -> None:
    """Per case: GB/s, the ratio to eager torch, the fraction of the copy bandwidth, the error."""
    copy = next((r["copy_gbps"] for r in rows if r.get("copy_gbps")), None)
    title = "turbo bench: GB/s (ratio to torch) {fraction of copy bandwidth} [max rel err]"
    print_tables(rows, console, title=title + (f"; copy {copy:.0f} GB/s" if copy else ""), cell=_gbps_cell)
