"""Issue-5 coverage run: the figures benchmarks/issue5-targets.md lists as never measured (run on the GPU machine).

Parts (``--parts``, default all, in this order; each stops starting new cases after its ``--limits`` seconds):

* ``small``: small sizes against eager PyTorch. Tokens ``--tokens`` (default 1, 16, 128) at model widths: RMSNorm
  fwd/bwd and rmsnorm_residual fwd/bwd (hidden 7168, DeepSeek-V3), SwiGLU/GeGLU fwd/bwd (half width 14336,
  Llama-3.1 8B), FP8 quantize / with_trans / dequantize in the ``turbo bench quant`` variants (hidden 7168),
  MXFP4 quantize (row, col) / with_trans / dequantize (row, col) (hidden 7168), MoE router fwd/bwd and
  permute/unpermute fwd/bwd (DeepSeek-V3). Each side is the ``turbo bench`` suite's provider: ``eager`` is the
  suite's torch expression (norm, GLU, permutation) or the TORCH reference kernel, plain PyTorch (quantization,
  router); ``triton`` the primitive through the dispatcher pinned to TRITON. Device time per call: 20 calls
  captured in one CUDA graph, replayed 15 times, median (``graph_timing.graph_us``), so Python launch cost is
  excluded on both sides; a call that cannot be captured (a host sync) is timed by ``turbo_core.bench.timing.measure``
  (GPU held by a sleep kernel while the calls are queued: also device time) and flagged ``timing: events``.
* ``resbwd``: the rmsnorm_residual backward (the op's composition: ``rmsnorm_bwd`` on x_plus_r with
  ``grad_x_plus_r`` as its ``dresidual``, added in the same pass since session 12) at 16384 tokens, hidden
  4096/7168/8192/16384: eager, torch.compile of the autograd of the same expression, TRITON, TRITON's
  ``rmsnorm_bwd`` kernel alone (no add), the session-12 composition before the fusion (``rmsnorm_bwd``, then
  ``+ grad_x_plus_r`` in a second pass: ``triton:two-pass``), liger-kernel's ``LigerFusedAddRMSNormFunction``
  backward when importable. ``turbo bench`` runner (device time).
* ``quantcompile``: FP8 quantize / with_trans / dequantize in every granularity at 16384 x 7168 bf16 (E4M3):
  eager reference, torch.compile of the reference function, TRITON. ``turbo bench`` runner.
* ``fp4compile``: MXFP4 quantize (row, col) / with_trans / dequantize (bf16, and fp32 / fp16 out) at
  16384 x 7168: eager reference, torch.compile of the reference function, TRITON. ``turbo bench`` runner.
* ``grouped``: grouped FP8 / MXFP4 quantization at 16384 x 7168 over 32 skewed groups (the shape of the
  session-7 rows), each output bit-compared with the TORCH reference (and with its torch.compile, which is
  timed beside the eager reference), then TRITON's device time
  (``turbo_core.bench.timing.measure``, the GPU held while the calls are enqueued; the session-12 run timed
  with bare ``triton.testing.do_bench``, which measured the host for these ~0.1 ms calls), GB/s and fraction
  of the copy bandwidth.
* ``groupedsmall``: the same grouped cases at ``--tokens`` rows (hidden 7168, 8 groups): TRITON vs the eager
  TORCH reference, bit-compared, device time as in ``small``.
* ``index``: ``indices_to_multihot`` (+ bwd), ``tokens_per_expert_to_mask``, ``moe_permute_preprocess``
  (DeepSeek-V3: 256 experts, top 8) at tokens 1, 16, 128, 4096: TRITON vs the TORCH reference and its
  torch.compile, bit-compared, device time as in ``small``; ``moe_permute_preprocess`` also through its
  three-launch path (``single=False``: ``three_us``) beside the default's one launch for tokens in one block.
* ``conformance``: ``conformance_gpu.py --backends TRITON`` for the families normalization, activation,
  quantization, moe (stopped at the part's limit; the counts of what ran are recorded).

Correctness: nothing is timed without first being compared: ``small``/``resbwd``/``quantcompile`` rows carry
``max_rel_err`` against the suite's reference (float64 math; for quantization the reference kernel's outputs,
where TRITON must be bit-identical: 0); ``grouped``/``index`` rows bit-compare with the reference.

JSON rows are rewritten to ``--out`` after every part (and every 10 cases). ``--dry``: tiny sizes on the CPU
(TRITON_INTERPRET=1) to check the script itself.

Usage (repository root):
  PYTHONPATH=$PWD/packages/turbo-core/src:$PWD/packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/issue5_coverage_h200.py --out cov.json [--parts small,resbwd,...] \\
      [--limits small=60,resbwd=30,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback

PARTS = ("small", "resbwd", "quantcompile", "fp4compile", "grouped", "groupedsmall", "index", "conformance")
LIMITS = {"small": 60, "resbwd": 30, "quantcompile": 45, "fp4compile": 40, "grouped": 40, "groupedsmall": 40,
          "index": 20, "conformance": 40}


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--limits", default="", help=f"part=seconds,... (defaults: {LIMITS})")
    p.add_argument("--tokens", default="1,16,128", help="small: token counts")
    p.add_argument("--ops", default="", help="small: only these ops (comma list, e.g. moe_permute; default all)")
    p.add_argument("--qc-variants", default="", help="quantcompile: only these variant ids (e.g. wt-rowwise)")
    p.add_argument("--conf-workers", type=int, default=8)
    p.add_argument("--dry", action="store_true", help="tiny sizes on the CPU interpreter")
    return p.parse_args()


ARGS = _parse()
if ARGS.dry:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from turbo_core.bench import timing  # noqa: E402
from turbo_core.bench.suites import activation as act_suite  # noqa: E402
from turbo_core.bench.suites import moe as moe_suite  # noqa: E402
from turbo_core.bench.suites import norm as norm_suite  # noqa: E402
from turbo_core.bench.suites.norm import MemCase, Peer, _max_rel_err, liger_attr, run_bandwidth  # noqa: E402
from turbo_core.dispatch.dispatcher import call  # noqa: E402
from turbo_core.dispatch.manager import use_backend  # noqa: E402
from turbo_core.dispatch.specs import moe as moe_spec  # noqa: E402
from turbo_core.dispatch.specs import quantization as qspec  # noqa: E402
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs  # noqa: E402
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingRecipe  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timing import graph_us  # noqa: E402

DEV = "cpu" if ARGS.dry else "cuda"
QUICK = ARGS.dry
E4M3 = torch.float8_e4m3fn
FP4 = FLOAT4_E2M1FN_X2
R0, R2D = ScalingRecipe(), ScalingRecipe(use_2d_block=True)
RESULTS: dict = {"command": "python3 " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
                 "parts": {}, "rows": {p: [] for p in PARTS}}
LIM = dict(LIMITS)
for kv in filter(None, ARGS.limits.split(",")):
    k, v = kv.split("=")
    LIM[k] = float(v)


def log(*a):
    print(*a, flush=True)


def save():
    with open(ARGS.out, "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# ---- timing ---------------------------------------------------------------------------------------


def _has_host_sync(fn) -> bool:
    if DEV != "cuda":
        return False
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
        return False
    except RuntimeError as exc:
        return "synchroniz" in str(exc)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def device_us(fn, anchor) -> tuple[float, str]:
    """Median microseconds per call: CUDA graph of 20 calls, else event timing with the GPU held."""
    if DEV == "cuda" and not _has_host_sync(fn):
        try:
            t = graph_us(fn, calls=20, reps=15)
            return t[len(t) // 2], "graph"
        except Exception as exc:  # noqa: BLE001 -- not capturable: fall back
            log(f"   graph capture failed ({type(exc).__name__}: {str(exc)[:100]}); event timing")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
    t = timing.measure(lambda _a: fn(), [(anchor,)], warmup=3, iters=30 if DEV == "cuda" else 2)
    return t.median_ms * 1e3, "events"


# ---- bit comparison (as grouped_quant_gpu_check.py) ---------------------------------------------


def _bits(t):
    t = t.contiguous()
    if t.dtype == FP4:
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _isnan(t):
    if t.is_floating_point() and t.dtype != FP4:
        return torch.isnan(t.float())
    return torch.zeros(t.shape, dtype=torch.bool, device=t.device)


def compare(actual, expected) -> str | None:
    if actual is None or expected is None:
        return None if actual is expected else f"{type(actual).__name__} vs {type(expected).__name__}"
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return f"{actual.dtype}{tuple(actual.shape)} vs {expected.dtype}{tuple(expected.shape)}"
    na, ne = _isnan(actual), _isnan(expected)
    if not torch.equal(na, ne):
        return f"NaN at {int((na != ne).sum())} different positions"
    if actual.dtype == torch.bool:
        n = int((actual != expected).sum())
    else:
        n = int(((_bits(actual) != _bits(expected)) & ~na).sum())
    return f"{n} of {actual.numel()} differ" if n else None


def compare_all(outs, refs) -> dict:
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
    errs = {str(i): e for i, (a, b) in enumerate(zip(outs, refs, strict=False)) if (e := compare(a, b))}
    if len(outs) != len(refs):
        errs["count"] = f"{len(outs)} vs {len(refs)}"
    return errs


# ---- extra suites (same interface as turbo_core.bench.suites.*) ----------------------------------


class ResBwdSuite:
    """rmsnorm_residual backward: grads of (y, x_plus_r) given (dy, d_x_plus_r); outputs [dx (= dresidual), dgamma]."""

    EPS = norm_suite.EPS

    @staticmethod
    def cases(tokens, quick, hiddens=None):
        hid = {"tiny": 96} if quick else dict(norm_suite.HIDDEN)
        out = []
        for model, h in hid.items():
            if hiddens and model not in hiddens:
                continue
            th = tokens * h * 2
            out.append(MemCase("norm", "rmsnorm_residual", model, "bwd", tokens, h, torch.bfloat16,
                               4 * th + 2 * h * 2))
        return out

    @staticmethod
    def make_inputs(case, device, gen):
        shape = (case.tokens, case.hidden)
        x, r, dy, ds = (torch.randn(shape, device=device, generator=gen).to(case.dtype) for _ in range(4))
        w = (1.0 + 0.1 * torch.randn(case.hidden, device=device, generator=gen)).to(case.dtype)
        return x, w, r, dy, ds

    @classmethod
    def reference(cls, case, inputs, with_add=True):
        x, w, r, dy, ds = inputs
        s = (x.double() + r.double()).to(x.dtype).double()
        rstd = torch.rsqrt(s.square().mean(-1, keepdim=True) + cls.EPS)
        n = s * rstd
        dn = dy.double() * w.double()
        dx = rstd * (dn - n * (dn * n).mean(-1, keepdim=True))
        if with_add:
            dx = dx + ds.double()
        return [dx, (dy.double() * n).sum(0)]

    @staticmethod
    def torch_provider(case, compiled):
        fn = norm_suite._rmsnorm_expr
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(norm_suite._rmsnorm_expr, dynamic=False)

        def prepare(inputs):
            x, w, r, dy, ds = inputs
            xg, wg, rg = (t.detach().requires_grad_() for t in (x, w, r))
            y, s = fn(xg, wg, rg)

            def once():
                gx, _gr, gw = torch.autograd.grad((y, s), (xg, rg, wg), (dy, ds), retain_graph=True)
                return [gx, gw]

            return once

        return prepare

    @classmethod
    def _fwd(cls, backend, inputs):
        x, w, r, _, _ = inputs
        with use_backend(backend):
            _, rstd, s = call("rmsnorm_fwd", RmsNormFwdArgs(x, w, cls.EPS, False, r))
        return s, rstd

    @classmethod
    def turbo_args(cls, case, inputs):
        x, w, r, dy, ds = inputs
        rstd = torch.rsqrt(x.float().square().mean(-1) + cls.EPS)
        return "rmsnorm_bwd", RmsNormBwdArgs(dy, x, w, rstd)

    @classmethod
    def turbo_provider(cls, case, backend, with_add=True, fused=True):
        def prepare(inputs):
            s, rstd = cls._fwd(backend, inputs)
            _, w, _, dy, ds = inputs
            args = RmsNormBwdArgs(dy, s, w, rstd, False, ds if (with_add and fused) else None)

            def once():  # fused: what ops/normalization.py's _RmsNormResidualFunction.backward does
                with use_backend(backend):
                    dx, dw = call("rmsnorm_bwd", args)
                return [dx + ds, dw] if (with_add and not fused) else [dx, dw]

            return once

        return prepare

    @classmethod
    def peer_providers(cls, case):
        peers = [Peer("triton:kernel-only", prepare=cls.turbo_provider(case, "TRITON", with_add=False),
                      reference=lambda inputs: cls.reference(case, inputs, with_add=False),
                      note="TRITON rmsnorm_bwd on x_plus_r alone (no + grad_x_plus_r); GB/s from the case's "
                           "bytes, which count one more [T, H] read than this kernel does"),
                 Peer("triton:two-pass", prepare=cls.turbo_provider(case, "TRITON", fused=False),
                      reference=lambda inputs: cls.reference(case, inputs),
                      note="the composition before session 12's fusion: TRITON rmsnorm_bwd, then + grad_x_plus_r "
                           "in a second pass")]
        fn, info = liger_attr("liger_kernel.ops.fused_add_rms_norm", "LigerFusedAddRMSNormFunction")
        if fn is None:
            peers.append(Peer("liger", declined=info))
            return peers

        def prepare(inputs):
            x, w, r, dy, ds = inputs
            xg, wg, rg = (t.detach().requires_grad_() for t in (x, w, r))
            y, s = fn.apply(xg, rg, wg, cls.EPS, 0.0, "gemma", False)

            def once():
                gx, _gr, gw = torch.autograd.grad((y, s), (xg, rg, wg), (dy, ds), retain_graph=True)
                return [gx, gw]

            return once

        peers.append(Peer("liger", prepare, note=f"liger-kernel {info}: LigerFusedAddRMSNormFunction, "
                                                 "casting_mode='gemma', in_place=False"))
        return peers


#: quantcompile variants: (id, primitive, granularity, axis, block, recipe)
QC_VARIANTS = [
    ("q-tensorwise", "quantize_fp8", "TENSORWISE", None, None, R0),
    ("q-rowwise-last", "quantize_fp8", "ROWWISE", -1, None, R0),
    ("q-rowwise-first", "quantize_fp8", "ROWWISE", 0, None, R0),
    ("q-block1x128", "quantize_fp8", "BLOCKWISE", -1, 128, R0),
    ("q-block128x1", "quantize_fp8", "BLOCKWISE", 0, 128, R0),
    ("q-block2d-128", "quantize_fp8", "BLOCKWISE", None, 128, R2D),
    ("q-mx-row", "quantize_fp8", "MX_BLOCKWISE", -1, 32, R0),
    ("q-mx-col", "quantize_fp8", "MX_BLOCKWISE", -2, 32, R0),
    ("wt-block128", "quantize_fp8_with_trans", "BLOCKWISE", None, 128, R0),
    ("wt-mx", "quantize_fp8_with_trans", "MX_BLOCKWISE", None, 32, R0),
    ("wt-rowwise", "quantize_fp8_with_trans", "ROWWISE", None, None, R0),
    ("dq-tensorwise", "dequantize_fp8", "TENSORWISE", None, None, R0),
    ("dq-rowwise-last", "dequantize_fp8", "ROWWISE", -1, None, R0),
    ("dq-block1x128", "dequantize_fp8", "BLOCKWISE", -1, 128, R0),
    ("dq-mx-row", "dequantize_fp8", "MX_BLOCKWISE", -1, 32, R0),
    ("dq-mx-col", "dequantize_fp8", "MX_BLOCKWISE", -2, 32, R0),
    ("dq-block2d-128", "dequantize_fp8", "BLOCKWISE", None, 128, R2D),
    ("q-block1x32", "quantize_fp8", "BLOCKWISE", -1, 32, R0),
    ("q-block2d-32", "quantize_fp8", "BLOCKWISE", None, 32, R2D),
    ("wt-block32", "quantize_fp8_with_trans", "BLOCKWISE", None, 32, R0),
    ("dq-rowwise-first", "dequantize_fp8", "ROWWISE", 0, None, R0),
    ("dq-block128x1", "dequantize_fp8", "BLOCKWISE", 0, 128, R0),
]


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


class QuantSuite:
    """FP8 quantization in every granularity (QC_VARIANTS); FP4 (FP4_VARIANTS) with ``fp4=True``.
    Bytes: inputs read once + outputs written once (counted from the reference's outputs)."""

    @staticmethod
    def _spec(case):
        return case.extra["spec"]

    @classmethod
    def args(cls, case, inputs):
        vid, prim, gran, axis, bs, recipe = cls._spec(case)[:6]
        out_dtype = cls._spec(case)[6] if len(cls._spec(case)) > 6 else torch.bfloat16
        if prim == "quantize_fp8":
            return qspec.QuantizeFp8Args(inputs[0], E4M3, gran, axis, bs, recipe)
        if prim == "quantize_fp8_with_trans":
            return qspec.QuantizeFp8WithTransArgs(inputs[0], E4M3, gran, bs, recipe, recipe)
        if prim == "dequantize_fp8":
            return qspec.DequantizeFp8Args(inputs[0], inputs[1], out_dtype, gran, axis, bs, recipe)
        if prim == "quantize_fp4":
            return qspec.QuantizeFp4Args(inputs[0], FP4, axis)
        if prim == "quantize_fp4_with_trans":
            return qspec.QuantizeFp4WithTransArgs(inputs[0], FP4)
        if prim == "dequantize_fp4":
            return qspec.DequantizeFp4Args(inputs[0], inputs[1], out_dtype, axis)
        raise ValueError(prim)

    @classmethod
    def cases(cls, tokens, hidden, variants, model="deepseek-v3"):
        out = []
        gen = torch.Generator(device=DEV).manual_seed(1)
        for spec in variants:
            case = MemCase("quant", spec[0], model, spec[1], tokens, hidden, torch.bfloat16, 0,
                           extra={"spec": spec}, fields={"variant": spec[0], "primitive": spec[1]})
            inputs = cls.make_inputs(case, DEV, gen)
            with use_backend("TORCH"):
                outs = _as_list(call(spec[1], cls.args(case, inputs)))
            case.bytes = _nbytes(inputs) + _nbytes(outs)
            out.append(case)
            del inputs, outs
        return out

    @classmethod
    def make_inputs(cls, case, device, gen):
        x = torch.randn(case.tokens, case.hidden, device=device, generator=gen).to(case.dtype)
        vid, prim, gran, axis, bs, recipe = cls._spec(case)[:6]
        if not prim.startswith("dequantize"):
            return (x,)
        qprim = "quantize_fp8" if prim == "dequantize_fp8" else "quantize_fp4"
        qcase = MemCase("quant", vid, case.model, qprim, case.tokens, case.hidden, case.dtype, 0,
                        extra={"spec": (vid, qprim, gran, axis, bs, recipe)})
        with use_backend("TORCH"):
            q, s = call(qprim, cls.args(qcase, (x,)))
        return q, s

    @classmethod
    def reference(cls, case, inputs):
        with use_backend("TORCH"):
            return [t.double() if t.dtype not in (FP4, torch.uint8) else t.view(torch.uint8).double()
                    for t in _as_list(call(cls._spec(case)[1], cls.args(case, inputs)))]

    @staticmethod
    def _ref_fn(prim):
        from turbo_core.reference import quantization as ref

        return getattr(ref, prim)

    @classmethod
    def torch_provider(cls, case, compiled):
        fn = cls._ref_fn(cls._spec(case)[1])
        if compiled:
            fn = _compiled(fn)

        def prepare(inputs):
            args = cls.args(case, inputs)
            return lambda: cls._norm(fn(args))

        return prepare

    @staticmethod
    def _norm(out):
        return [t.view(torch.uint8) if t.dtype == FP4 else t for t in _as_list(out)]

    @classmethod
    def turbo_args(cls, case, inputs):
        return cls._spec(case)[1], cls.args(case, inputs)

    @classmethod
    def turbo_provider(cls, case, backend):
        def prepare(inputs):
            name, args = cls.turbo_args(case, inputs)

            def once():
                with use_backend(backend):
                    return cls._norm(call(name, args))

            return once

        return prepare


FP4_VARIANTS = [
    ("fp4-q-row", "quantize_fp4", None, -1, 32, R0),
    ("fp4-q-col", "quantize_fp4", None, -2, 32, R0),
    ("fp4-q-with-trans", "quantize_fp4_with_trans", None, None, 32, R0),
    ("fp4-dq-row", "dequantize_fp4", None, -1, 32, R0),
    ("fp4-dq-col", "dequantize_fp4", None, -2, 32, R0),
]
#: MXFP4 decoded to fp32 / fp16 (the bf16 decode is in FP4_VARIANTS): (..., out dtype)
FP4_DECODE_VARIANTS = [
    ("fp4-dq-row-f32", "dequantize_fp4", None, -1, 32, R0, torch.float32),
    ("fp4-dq-row-f16", "dequantize_fp4", None, -1, 32, R0, torch.float16),
    ("fp4-dq-col-f32", "dequantize_fp4", None, -2, 32, R0, torch.float32),
]
SMALL_QUANT = [v for v in QC_VARIANTS if v[0] in (
    "q-tensorwise", "q-rowwise-last", "q-block1x128", "q-block2d-128", "q-mx-row", "q-mx-col", "wt-block128",
    "wt-mx", "dq-rowwise-last", "dq-block1x128", "dq-mx-row", "q-rowwise-first", "q-block128x1", "q-block2d-32")]


# ---- part: small ----------------------------------------------------------------------------------


def _tol(case) -> float:
    return 0.0 if case.suite == "quant" else 1e-2


def small_cases(tokens: int):
    """(suite module, case) at ``tokens``."""
    m = (lambda names: None) if QUICK else (lambda names: names)
    out = []
    for c in norm_suite.cases(tokens, QUICK, m(["deepseek-v3"])):
        out.append((norm_suite, c))
    for c in ResBwdSuite.cases(tokens, QUICK, m(["deepseek-v3"])):
        out.append((ResBwdSuite, c))
    for c in act_suite.cases(tokens, QUICK, m(["llama3.1-8b"])):
        out.append((act_suite, c))
    hidden = 256 if QUICK else 7168
    for c in QuantSuite.cases(tokens, hidden, SMALL_QUANT + FP4_VARIANTS + FP4_DECODE_VARIANTS):
        out.append((QuantSuite, c))
    for c in moe_suite.cases(tokens, QUICK, ["tiny-grouped"] if QUICK else ["deepseek-v3"]):
        out.append((moe_suite, c))
    return out


def part_small(deadline):
    rows = RESULTS["rows"]["small"]
    gen = torch.Generator(device=DEV).manual_seed(0)
    tokens = [int(t) for t in ARGS.tokens.split(",")]
    log(f"{'case':42s} {'eager us':>9s} {'triton us':>9s} {'x eager':>8s} {'err tri':>9s} {'err eag':>9s} timing")
    only = {o for o in ARGS.ops.split(",") if o}
    for t in tokens:
        for suite, case in small_cases(t):
            if only and case.op not in only:
                continue
            if time.time() > deadline:
                log("small: time limit reached")
                return
            row = {"case": case.label, "op": case.op, "pass": case.pass_, "tokens": case.tokens,
                   "hidden": case.hidden, "model": case.model, "bytes": case.bytes, **case.fields}
            try:
                inputs = suite.make_inputs(case, DEV, gen)
                refs = suite.reference(case, inputs)
                eager = suite.torch_provider(case, False)(inputs)
                tri = suite.turbo_provider(case, "TRITON")(inputs)
                row["err_triton"] = _max_rel_err(tri(), refs)
                row["err_eager"] = _max_rel_err(eager(), refs)
                row["ok"] = row["err_triton"] <= _tol(case)
                sync()
                if not row["ok"]:
                    log(f"FAIL {case.label}: err {row['err_triton']} > {_tol(case)}")
                else:
                    row["eager_us"], row["eager_timing"] = device_us(eager, inputs[0])
                    row["triton_us"], row["triton_timing"] = device_us(tri, inputs[0])
                    row["x_eager"] = row["eager_us"] / row["triton_us"]
                    log(f"{case.label:42s} {row['eager_us']:9.2f} {row['triton_us']:9.2f} {row['x_eager']:8.2f} "
                        f"{row['err_triton']:9.1e} {row['err_eager']:9.1e} {row['eager_timing']}/{row['triton_timing']}")
            except Exception:  # noqa: BLE001
                row["error"] = traceback.format_exc()[-1500:]
                log("ERROR", case.label, row["error"])
            rows.append(row)
            if len(rows) % 10 == 0:
                save()


# ---- parts: resbwd, quantcompile (turbo bench runner) ---------------------------------------------


COPY = {}


def copy_gbps():
    if "gbps" not in COPY:
        COPY["gbps"] = norm_suite.copy_bandwidth(DEV)
        RESULTS["copy_gbps"] = COPY["gbps"]
        log(f"copy bandwidth: {COPY['gbps']:.0f} GB/s")
    return COPY["gbps"]


def _bench_rows(part, suite, cases, deadline, providers):
    rows = RESULTS["rows"][part]
    cp = copy_gbps()
    for case in cases:
        if time.time() > deadline:
            log(f"{part}: time limit reached")
            return
        got = run_bandwidth(suite, [case], providers=providers, include_reference=False,
                            compile_provider=DEV == "cuda", warmup=3 if QUICK else 5, iters=2 if QUICK else 30,
                            device=DEV, copy_gbps=cp)
        base = {r["provider"]: r for r in got if r.get("status") == "ok"}
        for r in got:
            tri = base.get("turbo:TRITON")
            if tri and r.get("status") == "ok":
                r["triton_speedup_vs_this"] = r["median_ms"] / tri["median_ms"]
            if r.get("status") == "ok":
                log(f"{r['case']:48s} {r['provider']:20s} {r['median_ms'] * 1e3:9.1f} us {r['gbps']:7.0f} GB/s "
                    f"{r['copy_fraction']:6.1%}  TRITON x{r.get('triton_speedup_vs_this', float('nan')):.3f} "
                    f"err {r['max_rel_err']:.1e}")
            else:
                log(f"{r['case']:48s} {r['provider']:20s} {r.get('status')}")
        rows.extend(got)
        save()


def part_resbwd(deadline):
    tokens = 32 if QUICK else 16384
    _bench_rows("resbwd", ResBwdSuite, ResBwdSuite.cases(tokens, QUICK), deadline,
                ["torch", "torch.compile", "turbo:TRITON", "triton:kernel-only", "triton:two-pass", "liger"])


def part_quantcompile(deadline):
    t, h = (64, 256) if QUICK else (16384, 7168)
    keep = set(filter(None, ARGS.qc_variants.split(",")))
    variants = [v for v in QC_VARIANTS if not keep or v[0] in keep]
    _bench_rows("quantcompile", QuantSuite, QuantSuite.cases(t, h, variants), deadline,
                ["torch", "torch.compile", "turbo:TRITON"])


def part_fp4compile(deadline):
    """MXFP4 quantize / with_trans / dequantize (bf16, fp32, fp16 out) at 16384 x 7168 bf16: eager reference,
    torch.compile of the reference function, TRITON (``turbo bench`` runner)."""
    t, h = (64, 256) if QUICK else (16384, 7168)
    _bench_rows("fp4compile", QuantSuite, QuantSuite.cases(t, h, FP4_VARIANTS + FP4_DECODE_VARIANTS), deadline,
                ["torch", "torch.compile", "turbo:TRITON"])


# ---- part: grouped -------------------------------------------------------------------------------


def _groups(m, g, seed):
    """Skewed group sizes (weights ~ U(0,1)**3, group 1 empty) summing to m (grouped_quant_gpu_check.py)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(g, generator=gen) ** 3
    w[min(1, g - 1)] = 0
    lens = (w / w.sum() * m).floor().to(torch.int64)
    lens[0] += m - int(lens.sum())
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens.to(DEV), offs.to(DEV)


def _device_ms(fn, anchor):
    """Median device time of ``fn()``: ``turbo_core.bench.timing.measure``, the GPU held while the calls
    are enqueued. (Bare ``triton.testing.do_bench`` timed the host for these ~0.1 ms calls: 90-140 µs of
    Python each; see the session-12 grouped re-check in gpu-checks-h200-2026-11-30.md.)"""
    if DEV != "cuda":
        fn()
        return float("nan")
    from turbo_core.bench import timing

    return timing.measure(lambda _anchor: fn(), [(anchor,)], warmup=25, iters=100).median_ms


def _grouped_cases(x, lens, offs, m):
    """(id, TRITON fn, reference fn, args maker, mode) of every grouped FP8 / MXFP4 quantization case on
    tokens ``x [m, n]`` in groups ``lens`` / ``offs``."""
    from turbo_core.reference import quantization as ref
    from turbo_triton.quantization import grouped

    G = qspec
    cases = []
    for cid, gran, axis, bs in (("bw128-row", "BLOCKWISE", 1, 128), ("bw128-col", "BLOCKWISE", 0, 128),
                                ("bw32-col", "BLOCKWISE", 0, 32), ("mx-row", "MX_BLOCKWISE", 1, 32),
                                ("mx-col", "MX_BLOCKWISE", 0, 32)):
        cases.append((f"q8-{cid}", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
                      lambda gran=gran, axis=axis, bs=bs: G.GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs),
                      "quant"))
    for cid, gran, bs in (("wt-bw128", "BLOCKWISE", 128), ("wt-mx", "MX_BLOCKWISE", 32)):
        cases.append((f"q8-{cid}", grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
                      lambda gran=gran, bs=bs: G.GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs),
                      "quant"))
    for axis in (1, 0):
        cases.append((f"q4-axis{axis}", grouped.grouped_quantize_fp4, ref.grouped_quantize_fp4,
                      lambda axis=axis: G.GroupedQuantizeFp4Args(x, FP4, lens, offs, axis), "quant"))
    cases.append(("q4-wt", grouped.grouped_quantize_fp4_with_trans, ref.grouped_quantize_fp4_with_trans,
                  lambda: G.GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs), "quant"))
    for cid, gran, axis, bs in (("bw128-col", "BLOCKWISE", 0, 128), ("mx-row", "MX_BLOCKWISE", 1, 32),
                                ("mx-col", "MX_BLOCKWISE", 0, 32)):
        def dq_args(gran=gran, axis=axis, bs=bs):
            q, s, _, op = ref.grouped_quantize_fp8(G.GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs))
            return G.GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, op, m, axis, bs)
        cases.append((f"dq8-{cid}", grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8, dq_args, "dequant"))
    return cases


def _compiled(fn):
    """``torch.compile`` of a reference function (static shapes; its first call compiles, and a failure
    raises there: the callers record it as ``compile_error``)."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def part_grouped(deadline):
    """Grouped quantization at 16384 x 7168, 32 skewed groups: TRITON bit-compared and timed, beside the
    TORCH reference eager and under ``torch.compile`` (its output bit-compared too)."""
    rows = RESULTS["rows"]["grouped"]
    m, n, g = (150, 96, 4) if QUICK else (16384, 7168, 32)
    label = f"m{m}-n{n}-g{g}"
    cp = copy_gbps()
    gen = torch.Generator(device=DEV).manual_seed(3)
    x = torch.randn(m, n, device=DEV, generator=gen) * 3
    x[:, :64] *= 1e-3
    x = x.to(torch.bfloat16)
    lens, offs = _groups(m, g, seed=g)
    log(f"{'case':22s} {'triton GB/s':>12s} {'of copy':>8s} {'ms':>8s} {'eager ms':>9s} {'compile ms':>10s} bit-exact")
    for cid, fn, ref_fn, make_args, mode in _grouped_cases(x, lens, offs, m):
        if time.time() > deadline:
            log("grouped: time limit reached")
            break
        row = {"case": cid, "shape": label}
        try:
            args = make_args()
            out = _as_list(fn(args))
            want = ref_fn(args)
            errs = compare_all(out, want)
            row["ok"], row["errors"] = not errs, errs
            data = [t for t in out if t.dtype not in (torch.int32, torch.int64)]
            moved = _nbytes([x] + data) if mode == "quant" else _nbytes([args.x, args.scale_inv] + data)
            if errs:
                log(f"FAIL {cid}: {errs}")
            else:
                t_tri = _device_ms(lambda fn=fn, args=args: fn(args), x)
                row.update({"bytes": moved, "triton_ms": t_tri, "triton_GBps": moved / t_tri / 1e6,
                            "of_copy": moved / t_tri / 1e6 / cp})
                row["eager_ms"] = _device_ms(lambda: ref_fn(args), x)
                try:
                    comp = _compiled(ref_fn)
                    cerrs = compare_all(_as_list(comp(args)), want)
                    row["compile_ok"] = not cerrs  # bit-exact with the eager reference
                    if cerrs:  # timed all the same (inductor reorders the scale math); the mismatch is kept
                        row["compile_mismatch"] = {k: str(v)[:200] for k, v in cerrs.items()}
                    row["compile_ms"] = _device_ms(lambda: comp(args), x)
                except Exception as exc:  # noqa: BLE001 -- a reference torch.compile cannot trace: recorded
                    row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                for k in ("eager_ms", "compile_ms"):
                    if row.get(k):
                        row[f"x_{k[:-3]}"] = row[k] / t_tri
                log(f"{cid:22s} {row['triton_GBps']:12.0f} {row['of_copy']:8.1%} {t_tri:8.3f} {row['eager_ms']:9.3f} "
                    f"{row.get('compile_ms') or float('nan'):10.3f} yes"
                    f"{'' if row.get('compile_ok', True) else ' (compile not bit-exact)'}")
        except Exception:  # noqa: BLE001
            row["error"] = traceback.format_exc()[-1500:]
            log("ERROR", cid, row["error"])
        rows.append(row)
    save()


def part_groupedsmall(deadline):
    """Grouped quantization at small sizes (tokens ``--tokens``, hidden 7168, 8 groups, one empty): TRITON
    against the TORCH reference (eager), bit-compared, device time as in ``small``."""
    rows = RESULTS["rows"]["groupedsmall"]
    n, g = (96, 4) if QUICK else (7168, 8)
    gen = torch.Generator(device=DEV).manual_seed(4)
    log(f"{'case':22s} {'T':>5s} {'eager us':>9s} {'triton us':>9s} {'x eager':>8s} bit-exact timing")
    for m in (int(t) for t in ARGS.tokens.split(",")):
        x = (torch.randn(m, n, device=DEV, generator=gen) * 3).to(torch.bfloat16)
        lens, offs = _groups(m, g, seed=m)
        for cid, fn, ref_fn, make_args, _mode in _grouped_cases(x, lens, offs, m):
            if time.time() > deadline:
                log("groupedsmall: time limit reached")
                save()
                return
            row = {"case": cid, "tokens": m, "hidden": n, "groups": g}
            try:
                args = make_args()
                errs = compare_all(_as_list(fn(args)), ref_fn(args))
                row["ok"], row["errors"] = not errs, errs
                if errs:
                    log(f"FAIL {cid} T={m}: {errs}")
                else:
                    row["eager_us"], row["eager_timing"] = device_us(lambda: ref_fn(args), x)
                    row["triton_us"], row["triton_timing"] = device_us(lambda fn=fn, args=args: fn(args), x)
                    row["x_eager"] = row["eager_us"] / row["triton_us"]
                    log(f"{cid:22s} {m:5d} {row['eager_us']:9.2f} {row['triton_us']:9.2f} {row['x_eager']:8.2f} yes "
                        f"{row['eager_timing']}/{row['triton_timing']}")
            except Exception:  # noqa: BLE001
                row["error"] = traceback.format_exc()[-1500:]
                log("ERROR", cid, m, row["error"])
            rows.append(row)
    save()


# ---- part: index ---------------------------------------------------------------------------------


def _index_compile(row, name, args, anchor):
    """``torch.compile`` of the TORCH reference function of ``name`` on ``args``: bit-compared with the
    reference, then timed (``compile_us``, ``x_compile`` = compile / TRITON), or ``compile_error``."""
    from turbo_core.reference import moe_permute as ref_permute
    from turbo_core.reference import moe_routing as ref_routing

    fn = getattr(ref_routing, name, None) or getattr(ref_permute, name)
    try:
        comp = _compiled(fn)
        errs = compare_all(comp(args), fn(args))
        row["compile_ok"] = not errs
        if not errs:
            row["compile_us"], row["compile_timing"] = device_us(lambda: comp(args), anchor)
            row["x_compile"] = row["compile_us"] / row["triton_us"]
    except Exception as exc:  # noqa: BLE001 -- a reference that torch.compile cannot trace: recorded
        row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"


def _preprocess_three(row, args, anchor):
    """``moe_permute_preprocess(..., single=False)`` (three launches) beside the default, which takes
    one launch when the tokens fit one block: ``three_us``, ``x_three`` = three / default."""
    from turbo_triton.moe import permute_preprocess as pp

    three = lambda: pp.moe_permute_preprocess(args, single=False)  # noqa: E731
    with use_backend("TORCH"):
        errs = compare_all(three(), call("moe_permute_preprocess", args))
    if errs:
        row["three_errors"] = errs
        return
    row["three_us"], row["three_timing"] = device_us(three, anchor)
    row["x_three"] = row["three_us"] / row["triton_us"]


def part_index(deadline):
    rows = RESULTS["rows"]["index"]
    e, k = (16, 4) if QUICK else (256, 8)
    tokens = (1, 16, 128) if QUICK else (1, 16, 128, 4096)
    gen = torch.Generator(device=DEV).manual_seed(5)
    log(f"{'op':28s} {'T':>5s} {'torch us':>9s} {'triton us':>9s} {'x torch':>8s} bit-exact timing")
    for t in tokens:
        idx = torch.rand(t, e, device=DEV, generator=gen).topk(k, dim=1).indices.to(torch.int32)
        probs = torch.rand(t, k, device=DEV, generator=gen)
        rmap = torch.zeros(t, e, dtype=torch.bool, device=DEV).scatter_(1, idx.long(), True)
        grad = torch.randn(t, e, device=DEV, generator=gen)
        tpe = rmap.sum(0).to(torch.int32)
        tpe[0] -= min(int(tpe[0]), 1)  # the mask then has a tail of zeros
        cases = [("indices_to_multihot", moe_spec.IndicesToMultihotArgs(idx, probs, e)),
                 ("indices_to_multihot_bwd", moe_spec.IndicesToMultihotBwdArgs(grad, idx)),
                 ("tokens_per_expert_to_mask", moe_spec.TokensPerExpertToMaskArgs(tpe, t * k)),
                 ("moe_permute_preprocess", moe_spec.MoePermutePreprocessArgs(rmap, e))]
        for name, args in cases:
            if time.time() > deadline:
                log("index: time limit reached")
                save()
                return
            row = {"op": name, "tokens": t, "experts": e, "topk": k}
            try:
                def run(backend, name=name, args=args):
                    with use_backend(backend):
                        return call(name, args)
                errs = compare_all(run("TRITON"), run("TORCH"))
                row["ok"], row["errors"] = not errs, errs
                if errs:
                    log(f"FAIL {name} T={t}: {errs}")
                else:
                    row["torch_us"], row["torch_timing"] = device_us(lambda: run("TORCH"), idx)
                    row["triton_us"], row["triton_timing"] = device_us(lambda: run("TRITON"), idx)
                    row["x_torch"] = row["torch_us"] / row["triton_us"]
                    _index_compile(row, name, args, idx)
                    if name == "moe_permute_preprocess":  # the three-launch path beside the default
                        _preprocess_three(row, args, idx)
                    log(f"{name:28s} {t:5d} {row['torch_us']:9.2f} {row['triton_us']:9.2f} {row['x_torch']:8.2f} "
                        f"yes {row['torch_timing']}/{row['triton_timing']} compile "
                        f"{row.get('compile_us') or float('nan'):.2f} us")
            except Exception:  # noqa: BLE001
                row["error"] = traceback.format_exc()[-1500:]
                log("ERROR", name, t, row["error"])
            rows.append(row)
    save()


# ---- part: conformance ---------------------------------------------------------------------------


def part_conformance(deadline):
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.splitext(ARGS.out)[0] + "_conformance.json"
    minutes = max(0.2, (deadline - time.time() - 15) / 60)
    cmd = [sys.executable, os.path.join(here, "conformance_gpu.py"), "--out", out, "--backends", "TRITON",
           "--device", "cpu" if QUICK else "cuda", "--families", "normalization,activation,quantization,moe",
           "--workers", str(ARGS.conf_workers), "--max-minutes", f"{minutes:.2f}"]
    log("running:", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log(proc.stdout[-4000:], proc.stderr[-2000:])
    summary = {"command": " ".join(cmd[1:]), "exit": proc.returncode}
    if os.path.exists(out):
        with open(out) as f:
            full = json.load(f)
        b = full["backends"].get("TRITON", {})
        summary.update({"complete": full.get("complete"), "wall_s": full.get("wall_s"), "workers": full.get("workers"),
                        **{k: b.get(k) for k in ("passed", "failed", "error", "skipped", "not_run", "families")},
                        "failures": b.get("failures", [])[:50], "skip_reasons": b.get("skip_reasons", [])[:20]})
    RESULTS["rows"]["conformance"].append(summary)
    save()


# ---- main ----------------------------------------------------------------------------------------


def main():
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": DEV}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if DEV == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:  # noqa: BLE001
            env["driver"] = None
    try:
        env["liger"] = norm_suite._liger_version()
    except Exception:  # noqa: BLE001
        env["liger"] = None
    RESULTS["env"] = env
    log(env)
    fns = {"small": part_small, "resbwd": part_resbwd, "quantcompile": part_quantcompile,
           "fp4compile": part_fp4compile, "grouped": part_grouped, "groupedsmall": part_groupedsmall,
           "index": part_index, "conformance": part_conformance}
    for part in ARGS.parts.split(","):
        start = time.time()
        log(f"== {part} (limit {LIM[part]} s)")
        try:
            fns[part](start + LIM[part])
            status = "done"
        except Exception:  # noqa: BLE001
            status = "error: " + traceback.format_exc()[-1500:]
            log(status)
        RESULTS["parts"][part] = {"status": status, "seconds": round(time.time() - start, 1), "limit": LIM[part]}
        log(f"== {part}: {status[:200]} in {time.time() - start:.1f} s")
        save()


if __name__ == "__main__":
    main()
