"""Flash-attention suite (``turbo bench attention``): forward and backward, bf16, dense ``[b, s, h, d]``.

Cases (``tokens = batch x seq``, 16384 by default):

- ``fa3-d64`` / ``fa3-d128`` / ``fa3-d256``: the FlashAttention-3 paper's sizing: hidden 2048, so
  ``2048 / d`` heads (MHA), seq 512, 1k, 2k, 4k, 8k, 16k, batch ``tokens / seq``; causal and not.
- ``llama3.1-8b`` (GQA 32/8, d 128), ``llama3.1-70b`` (64/8, d 128): causal, seq 4k, 8k, 16k.
- ``deepseek-v3``: MLA in its training form, 128 heads, q/k head dim 192, v 128; causal.
- ``gpt-oss-20b``: 64/8 heads, d 64, a learned sink per head; its alternate layers: ``sliding``
  (causal, window ``(127, 0)``: 128 keys including the query's own) and ``full`` (causal).
- ``--quick`` (``tiny``): seq 32, one or two heads, small head dims (the Triton interpreter is slow).

Passes: ``fwd`` (the training forward: out and lse; SDPA's inputs require grad so that it also
computes the log-sum-exp it saves) and ``bwd`` timed alone: the forward runs once outside the
timed region, then each timed call is the backward primitive (turbo) or ``torch.autograd.grad``
on the retained graph (SDPA).

FLOPs: ``2 * b * h_q * pairs * (d_qk + d_v)`` forward (``4 * b * h * s^2 * d`` when ``d_qk == d_v``),
``2.5x`` that backward, where ``pairs`` is the number of (query, key) pairs computed: ``s_q * s_kv``
without a mask, half of it when causal over a square score matrix (the FlashAttention papers'
convention; the exact count is ``s (s + 1) / 2``), and the visible pairs counted exactly for every
other mask (sliding windows, causal with ``s_q != s_kv``).

Providers, in this order:

- ``sdpa:cudnn`` (the baseline: ``ratio`` is its time / the provider's) and ``sdpa:flash``:
  ``torch.nn.functional.scaled_dot_product_attention`` under ``sdpa_kernel(CUDNN_ATTENTION)`` /
  ``sdpa_kernel(FLASH_ATTENTION)`` on ``[b, h, s, d]`` transposed views of the ``[b, s, h, d]``
  inputs (``enable_gqa`` for GQA). A backend that cannot run a case gets a ``declined: <reason>``
  row (not on a CUDA GPU; sinks; sliding windows; or SDPA's own check, whose warnings give the
  reason: e.g. the flash backend with different q/k and v head dims).
- ``turbo:<BACKEND>`` for every available backend with an ``attention_fwd`` kernel, through the
  primitives pinned with ``use_backend`` (the reference TORCH only with ``--include-reference``,
  and always on the CPU, where there is no SDPA backend to compare with).
- bwd only: ``turbo:<BACKEND>:deterministic`` (``deterministic=True``; not for TORCH), whose rows
  carry ``compare_to`` (the default provider) and ``nondet_ratio`` (the default backward's median
  time / the deterministic one's: below 1 is its cost).

Accuracy: every provider's first output is checked against float64 math before it is timed, on
one slice: batch 0, key/value head 0 and its query heads (``checked`` says which), all sequence
rows. ``max_rel_err`` is the worst over the checked tensors (out; or dq, dk, dv) of
``max|err| / max|ref|``. A result above the tolerance (bf16: ``max(atol, 2 ulp) + rtol`` = 0.0256,
the conformance suite's normwise gate as a bound on that ratio) gets the status
``inaccurate: ...`` (its times are kept in the row, but it is not compared). ``dsink`` is not
checked (it sums over every batch).

Tiles: a backend's launcher may read a tile override from its own variable (turbo-triton:
``TURBO_TRITON_ATTN_TILES``, see ``turbo_triton/attention/configs.py``); a sweep of tiles is this
suite run once per value, with ``--providers turbo:TRITON`` and ``--record``: each run's command
starts with the variable's value, so its rows say which tile they timed.

Rows: the runner's keys (``turbo_core.bench.runner``) plus model, layer, pass, mask (``full``,
``causal`` or ``window (l, r)``: the report's tables split on it), batch, seq_q, seq_kv, h_q, h_kv,
d_qk, d_v, causal, window ``[left, right]``, sink, dtype, flops, checked, tolerance.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.backends.cuda as tbc
from torch.nn.attention import SDPBackend, sdpa_kernel

from turbo_core.bench.console import print_tables
from turbo_core.bench.runner import Provider, available_backends, run_cases
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs, lse_shape, out_shape
from turbo_core.platform import platform_of
from turbo_core.testing.numerics import tolerance

#: Timed passes.
PASSES = ("fwd", "bwd")
#: Hidden size of the FlashAttention-3 paper's sizing (heads = hidden / head dim).
FA3_HIDDEN = 2048
FA3_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
MODEL_SEQS = (4096, 8192, 16384)
#: GPT-OSS sliding window: 128 keys including the query's own.
GPT_OSS_WINDOW = (127, 0)

#: model -> list of (layer, h_q, h_kv, d_qk, d_v, causal, window, sink, seqs).
MODELS: dict[str, list[tuple]] = {
    **{f"fa3-d{d}": [(None, FA3_HIDDEN // d, FA3_HIDDEN // d, d, d, causal, (-1, -1), False, FA3_SEQS)
                     for causal in (False, True)] for d in (64, 128, 256)},
    "llama3.1-8b": [(None, 32, 8, 128, 128, True, (-1, -1), False, MODEL_SEQS)],
    "llama3.1-70b": [(None, 64, 8, 128, 128, True, (-1, -1), False, MODEL_SEQS)],
    "deepseek-v3": [(None, 128, 128, 192, 128, True, (-1, -1), False, MODEL_SEQS)],
    "gpt-oss-20b": [("sliding", 64, 8, 64, 64, True, GPT_OSS_WINDOW, True, MODEL_SEQS),
                    ("full", 64, 8, 64, 64, True, (-1, -1), True, MODEL_SEQS)],
}
#: --quick: seq 32, one or two heads (tokens default 32: batch 1).
QUICK: dict[str, list[tuple]] = {
    "tiny": [("mha", 2, 2, 32, 32, True, (-1, -1), False, (32,)),
             ("gqa-window-sink", 2, 1, 32, 32, True, (7, 0), True, (32,)),
             ("mla", 1, 1, 48, 32, False, (-1, -1), False, (32,))],
}

_SDPA = {"sdpa:cudnn": "CUDNN_ATTENTION", "sdpa:flash": "FLASH_ATTENTION"}


def visible_pairs(s_q: int, s_kv: int, causal: bool, window: tuple[int, int]) -> float:
    """(query, key) pairs counted in the FLOPs (see the module docstring): ``s_q * s_kv`` without a
    mask, ``s_q * s_kv / 2`` when causal over a square matrix with no left window, else the exact
    count of keys ``j`` with ``i + s_kv - s_q - left <= j <= i + s_kv - s_q + right`` (-1: unbounded;
    causal sets ``right = 0``) over the query rows ``i``."""
    left, right = window
    if causal:
        right = 0
    if left < 0 and right < 0:
        return float(s_q * s_kv)
    if causal and left < 0 and s_q == s_kv:
        return s_q * s_kv / 2
    diag = torch.arange(s_q, dtype=torch.int64) + (s_kv - s_q)
    lo = (diag - left).clamp(min=0) if left >= 0 else torch.zeros_like(diag)
    hi = (diag + right).clamp(max=s_kv - 1) if right >= 0 else torch.full_like(diag, s_kv - 1)
    return float((hi - lo + 1).clamp(min=0).sum().item())


def mask_name(causal: bool, window: tuple[int, int]) -> str:
    left, right = window
    right = 0 if causal else right
    if left < 0 and right < 0:
        return "full"
    if left < 0 and causal:
        return "causal"
    return f"window ({left}, {right})"


@dataclass(frozen=True)
class AttnCase:
    model: str
    layer: str | None
    pass_: str  # fwd | bwd
    batch: int
    seq_q: int
    seq_kv: int
    h_q: int
    h_kv: int
    d_qk: int
    d_v: int
    causal: bool
    window: tuple[int, int] = (-1, -1)
    sink: bool = False

    @property
    def group(self) -> int:
        return self.h_q // self.h_kv

    @property
    def mask(self) -> str:
        return mask_name(self.causal, self.window)

    @property
    def flops(self) -> int:
        fwd = 2 * self.batch * self.h_q * visible_pairs(self.seq_q, self.seq_kv, self.causal, self.window) \
            * (self.d_qk + self.d_v)
        return round(fwd * (2.5 if self.pass_ == "bwd" else 1.0))

    @property
    def shape(self) -> str:
        seq = f"s{self.seq_q}" if self.seq_q == self.seq_kv else f"s{self.seq_q}/{self.seq_kv}"
        heads = f"h{self.h_q}" if self.h_q == self.h_kv else f"h{self.h_q}/{self.h_kv}"
        dims = f"d{self.d_qk}" if self.d_qk == self.d_v else f"d{self.d_qk}/{self.d_v}"
        return f"b{self.batch} {seq} {heads} {dims}" + (" sink" if self.sink else "")

    @property
    def label(self) -> str:
        name = "/".join(x for x in (self.model, self.layer, self.pass_) if x)
        return f"{name} {self.shape} {self.mask}"

    @property
    def checked(self) -> str:
        heads = "query head 0" if self.group == 1 else f"query heads 0-{self.group - 1}"
        return f"batch 0, kv head 0, {heads}, all rows"


def passes_of(values) -> tuple[str, ...]:
    """Pass names checked (``fwd``, ``bwd``); all of them for None or empty."""
    if not values:
        return PASSES
    bad = [v for v in values if v not in PASSES]
    if bad:
        raise ValueError(f"passes: unknown {', '.join(map(str, bad))} (attention has {', '.join(PASSES)})")
    return tuple(values)


def cases(tokens: int, quick: bool, models: list[str] | None, passes=None) -> Iterator[AttnCase]:
    """The suite's cases, per model and layer, seq, then pass; ``batch = max(1, tokens // seq)``."""
    for model, layers in (QUICK if quick else MODELS).items():
        if models and model not in models:
            continue
        for layer, h_q, h_kv, d_qk, d_v, causal, window, sink, seqs in layers:
            for seq in seqs:
                for pass_ in passes_of(passes):
                    yield AttnCase(model, layer, pass_, max(1, tokens // seq), seq, seq, h_q, h_kv, d_qk, d_v,
                                   causal, window, sink)


def make_inputs(case: AttnCase, device: str, dtype: torch.dtype, gen: torch.Generator) -> dict:
    """One input set, a dict: ``q [b, s_q, h_q, d_qk]``, ``k [b, s_kv, h_kv, d_qk]``,
    ``v [b, s_kv, h_kv, d_v]`` (contiguous, ``dtype``, standard normal), ``dout`` (out's shape and
    dtype; bwd only, else None), ``sink`` (fp32 ``[h_q]`` standard normal, or None) and
    ``ref_scales`` (None until :func:`reference` fills it). q comes first: the runner's timing
    reads the device from the first tensor."""
    def rand(*shape):
        return torch.randn(*shape, device=device, generator=gen).to(dtype)

    b = case.batch
    return {"q": rand(b, case.seq_q, case.h_q, case.d_qk), "k": rand(b, case.seq_kv, case.h_kv, case.d_qk),
            "v": rand(b, case.seq_kv, case.h_kv, case.d_v),
            "dout": rand(b, case.seq_q, case.h_q, case.d_v) if case.pass_ == "bwd" else None,
            "sink": torch.randn(case.h_q, device=device, generator=gen) if case.sink else None,
            "ref_scales": None}


def timed_bytes(inputs: dict) -> int:
    """Bytes of q, k, v and dout (what the rotated input sets must exceed L2 with)."""
    return sum(t.numel() * t.element_size() for k in ("q", "k", "v", "dout") if (t := inputs[k]) is not None)


# ---- what a provider returns, and the float64 oracle --------------------------------------------


class Result:
    """What a provider's timed call returns: its tensors in the logical ``[b, s, h, d]`` layout
    (``(out,)`` forward; ``(dq, dk, dv)`` backward) and the input set they came from.

    The runner checks a provider by ``max_rel_err(result, reference)``, which calls ``double()``:
    the checked slice of each tensor (batch 0; the query heads of key/value head 0 for out and dq,
    head 0 for dk and dv) in float64, divided by the reference's ``max|.|`` (stored on the input set
    by :func:`reference`, which the runner computes before the comparison), flattened and
    concatenated; the reference is the same concatenation of float64 results, so the runner's
    ratio is the worst ``max|err| / max|ref|`` over the tensors.
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...], inputs: dict, heads: tuple[int, ...]):
        self.tensors, self.inputs, self.heads = tensors, inputs, heads

    def checked(self) -> list[torch.Tensor]:
        """The checked slice of each tensor, in its dtype: the shapes :func:`reference_slice` returns."""
        return [t[0, :, :h] for t, h in zip(self.tensors, self.heads, strict=True)]

    def double(self) -> torch.Tensor:
        scales = self.inputs.get("ref_scales")
        if scales is None:
            raise RuntimeError("Result.double: the float64 reference of this input set was not computed")
        return torch.cat([t.double().flatten() / s for t, s in zip(self.checked(), scales, strict=True)])


def _heads(case: AttnCase) -> tuple[int, ...]:
    return (case.group,) if case.pass_ == "fwd" else (case.group, 1, 1)


def _allowed(case: AttnCase, r0: int, r1: int, device) -> torch.Tensor:
    """bool ``[r1 - r0, s_kv]``: which keys query rows ``r0:r1`` see (bottom-right aligned)."""
    left, right = case.window
    right = 0 if case.causal else right
    diag = torch.arange(r0, r1, device=device)[:, None] + (case.seq_kv - case.seq_q)
    j = torch.arange(case.seq_kv, device=device)[None, :]
    ok = torch.ones(r1 - r0, case.seq_kv, dtype=torch.bool, device=device)
    if right >= 0:
        ok &= j <= diag + right
    if left >= 0:
        ok &= j >= diag - left
    return ok


def reference_slice(case: AttnCase, inputs: dict, *, budget: int = 1 << 25) -> list[torch.Tensor]:
    """float64 results on the checked slice: ``[out]`` ``[s_q, g, d_v]`` (fwd) or ``[dq [s_q, g, d_qk],
    dk [s_kv, 1, d_qk], dv [s_kv, 1, d_v]]`` (bwd), ``g = h_q / h_kv``. Softmax with the sink logit in
    the denominator, ``scale = d_qk ** -0.5``; query rows in blocks of at most ``budget`` scores."""
    g = case.group
    q = inputs["q"][0, :, :g].double().transpose(0, 1)  # [g, s_q, d]
    k, v = inputs["k"][0, :, 0].double(), inputs["v"][0, :, 0].double()  # [s_kv, d]
    sink = inputs["sink"][:g].double()[:, None] if inputs["sink"] is not None else None  # [g, 1]
    do = inputs["dout"][0, :, :g].double().transpose(0, 1) if case.pass_ == "bwd" else None
    scale = case.d_qk ** -0.5
    out = q.new_zeros(g, case.seq_q, case.d_v)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = max(1, budget // max(1, g * case.seq_kv))
    for r0 in range(0, case.seq_q, rows):
        r1 = min(r0 + rows, case.seq_q)
        s = (scale * q[:, r0:r1] @ k.T).masked_fill(~_allowed(case, r0, r1, q.device), float("-inf"))
        m = s.amax(-1)
        if sink is not None:
            m = torch.maximum(m, sink)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m[..., None])
        denom = e.sum(-1) + (torch.exp(sink - m) if sink is not None else 0.0)
        p = e / torch.where(denom > 0, denom, torch.ones_like(denom))[..., None]
        out[:, r0:r1] = p @ v
        if do is not None:
            dp = do[:, r0:r1] @ v.T
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
            dq[:, r0:r1] = scale * ds @ k
            dk += scale * torch.einsum("grk,grd->kd", ds, q[:, r0:r1])
            dv += torch.einsum("grk,grd->kd", p, do[:, r0:r1])
    if do is None:
        return [out.transpose(0, 1)]
    return [dq.transpose(0, 1), dk[:, None], dv[:, None]]


def reference(case: AttnCase, inputs: dict) -> torch.Tensor:
    """The runner's oracle: :func:`reference_slice` normalized by each tensor's ``max|.|`` (stored
    in ``inputs["ref_scales"]`` for :class:`Result`), flattened and concatenated."""
    refs = reference_slice(case, inputs)
    scales = [r.abs().max().item() or 1.0 for r in refs]
    inputs["ref_scales"] = scales
    return torch.cat([r.flatten() / s for r, s in zip(refs, scales, strict=True)])


def tolerance_of(dtype: torch.dtype) -> float:
    """``max(atol, 2 ulp) + rtol`` of ``dtype``: a bound on ``max|err| / max|ref|`` implied by the
    conformance suite's normwise gate (``turbo_core.testing.numerics.assert_close_normwise``)."""
    rtol, atol = tolerance(dtype)
    return max(atol, 2.0 * torch.finfo(dtype).eps) + rtol


# ---- providers ----------------------------------------------------------------------------------


def _fwd_args(case: AttnCase, inputs: dict, deterministic: bool = False):
    return AttentionFwdArgs(inputs["q"], inputs["k"], inputs["v"], causal=case.causal, window_size=case.window,
                            sink=inputs["sink"], deterministic=deterministic)


def _bwd_args(case: AttnCase, inputs: dict, out: torch.Tensor, lse: torch.Tensor, deterministic: bool = False):
    return AttentionBwdArgs(inputs["dout"], inputs["q"], inputs["k"], inputs["v"], out, lse, causal=case.causal,
                            window_size=case.window, sink=inputs["sink"], deterministic=deterministic)


def turbo_decline(case: AttnCase, backend: str, inputs: dict, deterministic: bool = False) -> str | None:
    """The backend's reason for declining the case's primitive call (None: it runs it). The
    backward is asked with placeholder out/lse (capability checks read metadata only)."""
    q = inputs["q"]
    if case.pass_ == "fwd":
        args = _fwd_args(case, inputs, deterministic)
    else:
        out = q.new_empty(out_shape(q, inputs["v"]))
        lse = torch.empty(lse_shape(q, False), dtype=torch.float32, device=q.device)
        args = _bwd_args(case, inputs, out, lse, deterministic)
    prim = get_primitive("attention_fwd" if case.pass_ == "fwd" else "attention_bwd")
    return decline_reason(prim, backend, args, platform_of(q.device))


def turbo_provider(case: AttnCase, backend: str, deterministic: bool = False):
    """``prepare(inputs) -> fn``: the forward primitive, or (bwd) the backward primitive after one
    forward outside the timed region; both pinned to ``backend``."""
    heads = _heads(case)

    def prepare(inputs: dict):
        fwd = _fwd_args(case, inputs, deterministic)
        if case.pass_ == "fwd":
            def run_fwd():
                with use_backend(backend):
                    out, _lse = call("attention_fwd", fwd)
                return Result((out,), inputs, heads)
            return run_fwd
        with use_backend(backend):
            out, lse = call("attention_fwd", fwd)
        bwd = _bwd_args(case, inputs, out, lse, deterministic)

        def run_bwd():
            with use_backend(backend):
                dq, dk, dv, _dsink = call("attention_bwd", bwd)
            return Result((dq, dk, dv), inputs, heads)
        return run_bwd

    return prepare


def _warning_text(caught) -> str:
    msgs = list(dict.fromkeys(str(w.message).strip() for w in caught))
    return "; ".join(m for m in msgs if m)[:300]


def sdpa_decline(name: str, case: AttnCase, inputs: dict) -> str | None:
    """Why ``sdpa:cudnn`` / ``sdpa:flash`` cannot run the case (None: it can): the cases SDPA has no
    way to express (sinks, windows, bottom-right causal), a device other than CUDA, then SDPA's own check (``torch.backends.cuda.can_use_*_attention``, whose
    debug warnings give the reason) on the case's tensors."""
    q = inputs["q"]
    what = f"SDPA's {name.split(':')[1]} backend"
    if case.sink:
        return "SDPA has no attention-sink logit (GPT-OSS sinks)"
    if case.window[0] >= 0 or (case.window[1] >= 0 and not case.causal):
        return f"{what} has no sliding window (is_causal only; a window needs an explicit mask and another backend)"
    if case.causal and case.seq_q != case.seq_kv:
        return "SDPA's is_causal is top-left aligned; turbo's causal is bottom-right (equal only when s_q == s_kv)"
    if q.device.type != "cuda":
        return f"{what} runs on CUDA GPUs only (this run is on {q.device.type})"

    check = getattr(tbc, "can_use_cudnn_attention" if name == "sdpa:cudnn" else "can_use_flash_attention", None)
    if check is None:
        return None  # cannot ask this torch: the run shows whether it works
    qt, kt, vt = (inputs[x].detach().transpose(1, 2).requires_grad_() for x in ("q", "k", "v"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ok = check(tbc.SDPAParams(qt, kt, vt, None, 0.0, case.causal, case.h_q != case.h_kv), True)
        except (TypeError, RuntimeError):
            return None
    if ok:
        return None
    why = _warning_text(caught)
    return f"{what} cannot run this case" + (f": {why}" if why else "")


def sdpa_provider(case: AttnCase, name: str):
    """``prepare(inputs) -> fn``: SDPA under one backend on ``[b, h, s, d]`` views of leaves that
    require grad; bwd: ``torch.autograd.grad`` of the forward's output (graph retained)."""
    backend = getattr(SDPBackend, _SDPA[name])
    gqa = {"enable_gqa": True} if case.h_q != case.h_kv else {}
    heads = _heads(case)

    def prepare(inputs: dict):
        q, k, v = (inputs[x].detach().requires_grad_() for x in ("q", "k", "v"))

        def forward() -> torch.Tensor:
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=case.causal, **gqa)
            return o.transpose(1, 2)

        if case.pass_ == "fwd":
            return lambda: Result((forward(),), inputs, heads)
        out, dout = forward(), inputs["dout"]

        def run_bwd():
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            return Result((dq, dk, dv), inputs, heads)
        return run_bwd

    return prepare


def backends(include_reference: bool) -> list[str]:
    return available_backends("attention_fwd", include_reference=include_reference)


def case_providers(case: AttnCase, first: dict, names: list[str]) -> list:
    """The case's providers (see the module docstring), baseline first."""
    out = []
    for name in _SDPA:
        reason = sdpa_decline(name, case, first)
        role = "baseline" if name == "sdpa:cudnn" else "reference"
        fields = {"sdpa_backend": _SDPA[name]}
        out.append(Provider(name, status=f"declined: {reason}", role=role, fields=fields) if reason
                   else Provider(name, sdpa_provider(case, name), role=role, fields=fields))
    variants = [(b, False) for b in names]
    if case.pass_ == "bwd":
        variants += [(b, True) for b in names if b != "TORCH"]
    for b, det in variants:
        name = f"turbo:{b}" + (":deterministic" if det else "")
        fields = {"deterministic": det} | ({"compare_to": f"turbo:{b}"} if det else {})
        reason = turbo_decline(case, b, first, det)
        out.append(Provider(name, status=f"declined: {reason}", fields=fields) if reason
                   else Provider(name, turbo_provider(case, b, det), fields=fields))
    return out


def finish_rows(rows: list[dict], tol: float) -> list[dict]:
    """``tolerance`` on every row; measured rows above it become ``inaccurate: ...`` (times kept);
    rows with ``compare_to`` get ``nondet_ratio`` (that provider's median time / theirs)."""
    ok = {(r["case"], r["provider"]): r for r in rows if r["status"] == "ok"}
    for r in rows:
        r["tolerance"] = tol
        err = r.get("max_rel_err")
        if r["status"] == "ok" and not (err is not None and err <= tol):
            r["status"] = f"inaccurate: max_rel_err {err:.2e} > {tol:.2e} against float64 ({r['checked']})"
    for r in rows:
        if r.get("compare_to") and r["status"] == "ok":
            other = ok.get((r["case"], r["compare_to"]))
            r["nondet_ratio"] = other["median_ms"] / r["median_ms"] if other and other["status"] == "ok" else None
    return rows


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        passes: list[str] | None = None) -> list[dict]:
    """Every provider on every case, side by side; rows as described in the module docstring.
    ``tokens`` (batch x seq) defaults to 16384 (32 with ``quick``); ``passes`` to fwd and bwd."""
    dtype = torch.bfloat16
    names = backends(include_reference or device == "cpu")
    all_cases = list(cases(tokens or (32 if quick else 16384), quick, models, passes))
    rows = run_cases(
        "attention", all_cases,
        row=lambda c: {"case": c.label, "model": c.model, "layer": c.layer, "pass": c.pass_, "mask": c.mask,
                       "batch": c.batch, "seq_q": c.seq_q, "seq_kv": c.seq_kv, "h_q": c.h_q, "h_kv": c.h_kv,
                       "d_qk": c.d_qk, "d_v": c.d_v, "causal": c.causal, "window": list(c.window), "sink": c.sink,
                       "dtype": "bf16", "flops": c.flops, "checked": c.checked},
        flops=lambda c: c.flops,
        make_inputs=lambda c, gen: make_inputs(c, device, dtype, gen),
        timed_bytes=timed_bytes,
        providers=lambda c, first: case_providers(c, first, names),
        reference=lambda c, s, oracle: reference(c, s),
        keep=providers, warmup=warmup, iters=iters, device=device, progress=progress)
    return finish_rows(rows, tolerance_of(dtype))


def _cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and r.get("role") != "baseline" else ""
    det = f" {{{r['nondet_ratio']:.2f}x}}" if r.get("nondet_ratio") else ""
    return f"{r['tflops']:.4g}{ratio}{det} [{r['max_rel_err']:.1e}]"


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s, the ratio to SDPA cuDNN, {deterministic: the ratio to the default
    backward}, [max rel err on the checked slice]; statuses of what did not run; geomeans."""
    print_tables(rows, console, cell=_cell,
                 title="turbo bench attention: TFLOP/s (ratio to sdpa:cudnn) {deterministic: ratio to the "
                       "default backward} [max rel err]")
