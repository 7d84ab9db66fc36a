"""Sparse MLA suite (``turbo bench sparse-mla``): DeepSeek-V3.2's sparse attention, forward and
backward, bf16, against the dense masked attention a user would write in plain PyTorch.

Cases (``tokens``: the sequence, 4096 by default; batch 1, ``num_kv = tokens``):

- ``deepseek-v3.2``: ``q [T, H, 576]`` (512 latent + 64 rope channels), one shared latent
  ``kv [T, 1, 576]`` whose first 512 channels are the values, top-2048 causal indices
  (``turbo_core.testing.cases.sparse_mla.causal_topk_indices``: token ``t`` selects 2048 distinct
  rows of its prefix, or its whole prefix padded with ``-1``); 128 heads (the model) and 64 (its
  heads split over two tensor-parallel ranks).
- ``--quick`` (``tiny``): 32 tokens, 2 heads, head dims 24/16, top-16 (runs on the CPU).

Passes: ``fwd`` (out and lse) and ``bwd`` timed alone (the forward runs once outside the timed
region; each timed call is the backward primitive, or ``torch.autograd.grad`` of the retained graph).

Providers, in this order:

- ``sdpa:masked`` (the baseline, ``ratio`` is its time / the provider's):
  ``torch.nn.functional.scaled_dot_product_attention`` of ``q [1, H, T, 576]`` over every row of kv
  (keys ``kv``, values ``kv[..., :512]``, broadcast over the heads) with a boolean mask ``[T, T]``
  that allows exactly the selected rows (built from the indices outside the timed region). SDPA
  picks its backend for a masked call (memory-efficient or math). The dense computation does
  ``T / topk`` times the work of the sparse one.
- ``turbo:<BACKEND>`` for every available backend with a ``sparse_mla_fwd`` kernel, through the
  primitives pinned with ``use_backend`` (the reference TORCH only with ``--include-reference``, and
  always on the CPU).

Clocks: ``median_ms`` / ``p10_ms`` / ``p90_ms`` are the device time per call (CUDA events around
each call with the GPU held until every call is queued, ``turbo_core.timing.measure``), which
``tflops`` and ``ratio`` use; ``wall_ms`` / ``wall_p10_ms`` / ``wall_p90_ms`` are the wall clock per
eager call (host cost included, batches of calls then a synchronize,
``turbo_core.timing.measure_batched``) and ``wall_ratio`` the baseline's over the provider's. On the
CPU both are the wall clock.

FLOPs (the sparse work, the same count for every provider): per valid (token, slot) pair and head,
``2 (d_qk + d_v)`` forward and ``2 (3 d_qk + 2 d_v)`` backward (recomputed scores, dP, dq, the key
and value gradients).

Accuracy: every provider's first result is checked against float64 math
(``turbo_core.testing.cases.sparse_mla.gathered_reference``) on the checked rows: ``out`` (fwd) or
``dq`` (bwd) of 16 tokens spread over the sequence, and (bwd) ``dkv`` of every row. ``max_rel_err``
is the worst over the checked tensors of ``max|err| / max|ref|``; above the tolerance (bf16:
``max(atol, 2 ulp) + rtol``, the normwise gate as a bound on that ratio) the row's status is
``inaccurate: ...`` (its times are kept).

Rows: suite, case, model, layer (None), pass, tokens, num_kv, heads, topk, d_qk, d_v, sink, dtype,
valid_pairs, flops, checked, provider, role, baseline, status, the clocks above, tflops, ratio,
wall_ratio, max_rel_err, tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from turbo_core import timing
from turbo_core.bench.console import print_tables
from turbo_core.bench.runner import available_backends
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs, lse_shape, out_shape
from turbo_core.platform import platform_of
from turbo_core.testing.cases.sparse_mla import causal_topk_indices, gathered_reference
from turbo_core.testing.numerics import tolerance

#: Timed passes.
PASSES = ("fwd", "bwd")
#: Tokens of the sequence (batch 1) unless ``--tokens`` says otherwise.
DEFAULT_TOKENS = 4096
#: model -> list of (heads, topk, d_qk, d_v).
MODELS: dict[str, list[tuple[int, int, int, int]]] = {
    "deepseek-v3.2": [(128, 2048, 576, 512), (64, 2048, 576, 512)],
}
QUICK: dict[str, list[tuple[int, int, int, int]]] = {"tiny": [(2, 16, 24, 16)]}
#: Tokens whose rows are checked against float64 math.
CHECKED_TOKENS = 16
#: Calls per batch of the wall clock.
WALL_CALLS = 5


@dataclass(frozen=True)
class SparseMlaCase:
    model: str
    pass_: str
    tokens: int
    heads: int
    topk: int
    d_qk: int
    d_v: int

    @property
    def label(self) -> str:
        return f"{self.model}/{self.pass_} t{self.tokens} h{self.heads} top{self.topk} d{self.d_qk}/{self.d_v}"

    def flops(self, valid_pairs: int) -> int:
        per = 2 * (self.d_qk + self.d_v) if self.pass_ == "fwd" else 2 * (3 * self.d_qk + 2 * self.d_v)
        return valid_pairs * self.heads * per


def passes_of(values) -> tuple[str, ...]:
    if not values:
        return PASSES
    bad = [v for v in values if v not in PASSES]
    if bad:
        raise ValueError(f"passes: unknown {', '.join(map(str, bad))} (sparse-mla has {', '.join(PASSES)})")
    return tuple(values)


def cases(tokens: int, quick: bool, models: list[str] | None, passes=None) -> list[SparseMlaCase]:
    return [SparseMlaCase(model, p, tokens, h, topk, d_qk, d_v)
            for model, layers in (QUICK if quick else MODELS).items() if not models or model in models
            for h, topk, d_qk, d_v in layers for p in passes_of(passes)]


def make_inputs(case: SparseMlaCase, device: str, dtype: torch.dtype, seed: int = 0) -> dict:
    """``q [T, H, d_qk]``, ``kv [T, 1, d_qk]`` (standard normal, ``dtype``), ``idx`` int32 ``[T, topk]``
    (causal top-k), ``dout [T, H, d_v]`` (bwd), ``mask`` bool ``[T, T]`` (the rows each token selects)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    t = case.tokens
    q = torch.randn(t, case.heads, case.d_qk, device=device, generator=gen).to(dtype)
    kv = torch.randn(t, 1, case.d_qk, device=device, generator=gen).to(dtype)
    idx = causal_topk_indices(t, t, case.topk, gen)
    dout = torch.randn(t, case.heads, case.d_v, device=device, generator=gen).to(dtype) if case.pass_ == "bwd" \
        else None
    mask = torch.zeros(t, t + 1, dtype=torch.bool, device=device)
    mask.scatter_(1, torch.where(idx >= 0, idx, t).long(), True)
    return {"q": q, "kv": kv, "idx": idx, "dout": dout, "mask": mask[:, :t]}


def checked_rows(tokens: int) -> torch.Tensor:
    """The tokens whose ``out`` / ``dq`` are checked: ``CHECKED_TOKENS`` spread over the sequence."""
    return torch.linspace(0, tokens - 1, min(CHECKED_TOKENS, tokens)).round().long().unique()


def reference(case: SparseMlaCase, inputs: dict) -> list[torch.Tensor]:
    """float64 results on the checked rows: ``[out]`` (fwd) or ``[dq, dkv]`` (bwd). The forward of the
    checked tokens alone; the backward's ``dkv`` needs every token, computed in token blocks."""
    q, kv, idx, dout = inputs["q"], inputs["kv"][:, 0], inputs["idx"], inputs["dout"]
    rows = checked_rows(case.tokens).to(q.device)
    scale = case.d_qk ** -0.5
    if case.pass_ == "fwd":
        out, *_ = gathered_reference(q[rows], kv, idx[rows], None, None, case.d_v, scale)
        return [out]
    _, _, dq, dkv, _ = gathered_reference(q, kv, idx, None, dout, case.d_v, scale)
    return [dq[rows], dkv]


def _result(case: SparseMlaCase, tensors: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    rows = checked_rows(case.tokens).to(tensors[0].device)
    if case.pass_ == "fwd":
        return [tensors[0][rows]]
    return [tensors[0][rows], tensors[1].reshape(case.tokens, case.d_qk)]


def max_rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The worst ``max|got - want| / max|want|`` over the checked tensors."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        scale = w.abs().max().item() or 1.0
        worst = max(worst, (g.double() - w).abs().max().item() / scale)
    return worst


def tolerance_of(dtype: torch.dtype) -> float:
    """``max(atol, 2 ulp) + rtol`` of ``dtype`` (as the attention suite)."""
    rtol, atol = tolerance(dtype)
    return max(atol, 2.0 * torch.finfo(dtype).eps) + rtol


# ---- providers: prepare(inputs) -> a zero-argument call returning the checked tensors -------------


def _fwd_args(case: SparseMlaCase, inputs: dict) -> SparseMlaFwdArgs:
    return SparseMlaFwdArgs(inputs["q"], inputs["kv"], inputs["idx"], None, case.d_v, None)


def turbo_decline(case: SparseMlaCase, backend: str, inputs: dict) -> str | None:
    q = inputs["q"]
    if case.pass_ == "fwd":
        args, prim = _fwd_args(case, inputs), "sparse_mla_fwd"
    else:
        out = q.new_empty(out_shape(q, case.d_v))
        lse = torch.empty(lse_shape(q), dtype=torch.float32, device=q.device)
        args = SparseMlaBwdArgs(inputs["dout"], q, inputs["kv"], out, lse, inputs["idx"], None, case.d_v, None)
        prim = "sparse_mla_bwd"
    return decline_reason(get_primitive(prim), backend, args, platform_of(q.device))


def turbo_provider(case: SparseMlaCase, backend: str) -> Callable[[dict], Callable[[], tuple]]:
    def prepare(inputs: dict):
        fwd = _fwd_args(case, inputs)
        if case.pass_ == "fwd":
            def run_fwd():
                with use_backend(backend):
                    return call("sparse_mla_fwd", fwd)
            return run_fwd
        with use_backend(backend):
            out, lse = call("sparse_mla_fwd", fwd)
        bwd = SparseMlaBwdArgs(inputs["dout"], fwd.q, fwd.kv, out, lse, fwd.topk_indices, None, case.d_v, None)

        def run_bwd():
            with use_backend(backend):
                dq, dkv, _ = call("sparse_mla_bwd", bwd)
            return dq, dkv
        return run_bwd

    return prepare


def sdpa_provider(case: SparseMlaCase) -> Callable[[dict], Callable[[], tuple]]:
    """Dense masked SDPA over every row of kv (see the module docstring)."""
    scale = case.d_qk ** -0.5

    def prepare(inputs: dict):
        q = inputs["q"].detach().requires_grad_()
        kv = inputs["kv"].detach().requires_grad_()
        mask = inputs["mask"][None, None]

        def forward():
            k = kv[:, 0][None, None].expand(1, case.heads, -1, -1)
            o = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1)[None], k, k[..., :case.d_v],
                                                                 attn_mask=mask, scale=scale)
            return o[0].transpose(0, 1)

        if case.pass_ == "fwd":
            return lambda: (forward(),)
        out, dout = forward(), inputs["dout"]
        return lambda: torch.autograd.grad(out, (q, kv), dout, retain_graph=True)

    return prepare


# ---- the run ------------------------------------------------------------------------------------


def _row(case: SparseMlaCase, valid: int, dtype: torch.dtype) -> dict:
    return {"suite": "sparse-mla", "case": case.label, "model": case.model, "layer": None, "pass": case.pass_,
            "tokens": case.tokens, "num_kv": case.tokens, "heads": case.heads, "topk": case.topk, "d_qk": case.d_qk,
            "d_v": case.d_v, "sink": False, "dtype": str(dtype).replace("torch.", ""), "valid_pairs": valid,
            "flops": case.flops(valid), "checked": f"{len(checked_rows(case.tokens))} tokens' "
            + ("out" if case.pass_ == "fwd" else "dq, every row's dkv")}


def _measure(case, prepare, inputs, want, device, warmup, iters) -> dict:
    try:
        fn = prepare(inputs)
        err = max_rel_err(_result(case, fn()), want)
        dev = timing.measure(lambda f, _anchor: f(), [(fn, inputs["q"])], warmup=warmup, iters=iters)
        wall = timing.measure_batched(fn, device=device, warmup=warmup, iters=iters, calls=WALL_CALLS, clock="wall")
    except Exception as exc:  # one failing provider is reported, the suite goes on
        return {"status": f"error: {type(exc).__name__}: {str(exc)[:300]}"}
    return {"status": "ok", "median_ms": dev.median_ms, "p10_ms": dev.p10_ms, "p90_ms": dev.p90_ms,
            "wall_ms": wall.median_ms, "wall_p10_ms": wall.p10_ms, "wall_p90_ms": wall.p90_ms, "max_rel_err": err}


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        passes: list[str] | None = None) -> list[dict]:
    """Every provider on every case; rows as described in the module docstring. ``tokens`` defaults
    to 4096 (32 with ``quick``); ``passes`` to fwd and bwd."""
    dtype = torch.bfloat16
    tol = tolerance_of(dtype)
    names = available_backends("sparse_mla_fwd", include_reference=include_reference or device == "cpu")
    all_cases = cases(tokens or (32 if quick else DEFAULT_TOKENS), quick, models, passes)
    task = progress.add_task("sparse-mla", total=len(all_cases)) if progress else None
    rows: list[dict] = []
    for case in all_cases:
        inputs = make_inputs(case, device, dtype)
        valid = int((inputs["idx"] >= 0).sum().item())
        want = reference(case, inputs)
        base = _row(case, valid, dtype)
        table: list[tuple[str, str, Callable | None, str | None]] = [("sdpa:masked", "baseline", sdpa_provider(case),
                                                                      None)]
        table += [(f"turbo:{b}", "turbo", turbo_provider(case, b), turbo_decline(case, b, inputs)) for b in names]
        base_dev = base_wall = None
        for name, role, prepare, reason in table:
            if providers and name not in providers:
                continue
            row = {**base, "provider": name, "role": role, "baseline": "sdpa:masked", "tolerance": tol}
            row.update({"status": f"declined: {reason}"} if reason else
                       _measure(case, prepare, inputs, want, device, warmup, iters))
            if row["status"] == "ok":
                if role == "baseline":
                    base_dev, base_wall = row["median_ms"], row["wall_ms"]
                row["tflops"] = row["flops"] / row["median_ms"] / 1e9
                row["ratio"] = base_dev / row["median_ms"] if base_dev else None
                row["wall_ratio"] = base_wall / row["wall_ms"] if base_wall else None
                if not row["max_rel_err"] <= tol:
                    row["status"] = f"inaccurate: max_rel_err {row['max_rel_err']:.2e} > {tol:.2e} against float64"
            rows.append(row)
        if progress:
            progress.advance(task)
        del inputs, want
    return rows


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and r.get("role") != "baseline" else ""
    return f"{r['tflops']:.4g}{ratio} {{{r['wall_ms']:.3g} ms}} [{r['max_rel_err']:.1e}]"


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s of the sparse work on the device clock (ratio to dense masked SDPA) {wall clock
    per eager call} [max rel err]; statuses of what did not run; geomeans."""
    print_tables(rows, console, cell=_cell,
                 title="turbo bench sparse-mla: TFLOP/s, device time (ratio to sdpa:masked) {wall ms per call} "
                       "[max rel err]",
                 legend="cells: TFLOP/s of the sparse work by the device clock; (1.23x): sdpa:masked's device time / "
                        "this provider's; {ms}: wall clock per eager call; [1.0e-03]: max|err| / max|ref| against "
                        "float64 math")
