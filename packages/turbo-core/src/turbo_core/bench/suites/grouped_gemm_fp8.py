"""Grouped FP8 GEMM suite (``turbo bench grouped-gemm-fp8``): the ``grouped_gemm`` suite's MoE expert
layers (DeepSeek-V3, Qwen3-30B-A3B, Mixtral-8x7B; balanced and skewed expert loads with an empty
expert) per scaling granularity, GEMM only: forward (``y_g = x_g @ w[g]^T``), dgrad
(``dx_g = dy_g @ w[g]``) and the variable-K wgrad (``dw[g] = dy_g^T @ x_g``).

Operands are quantized **once, outside the timed region**, as ``turbo_core.ops.grouped_gemm_fp8``
does (scales along each GEMM's contraction dim), and every FP8 provider multiplies the same values:

============  ======================================================================================
granularity   forward / dgrad (tokens ``[M, K]``, weights ``[G, N, K]`` / ``[G, K, N]``)    wgrad
============  ======================================================================================
TENSORWISE    one fp32 scale per tensor                                    the same
ROWWISE       tokens per row; weights per column of op(w[g]) along K       per column over all rows
BLOCKWISE     tokens: 1x128 along K (``grouped_quantize_fp8`` row-wise,     128x1 along the rows,
              scales transposed); weights: 128x128 tiles                   groups padded to 128
MX_BLOCKWISE  1x32 along K, E8M0 (weights 32x32 tiles; dgrad uses the      the grouped col-wise
              col-wise copy of w, so both passes are NT)                   copies (groups padded)
============  ======================================================================================

Providers per case, in this order:

* ``bf16:torch._grouped_mm``: the same shapes in bf16 on the unquantized inputs (the ``grouped_gemm``
  suite's ``torch`` provider; timed once per shape), the denominator of ``bf16_ratio``. The
  issue's target: grouped FP8 >= 1.3x this.
* ``torch._scaled_grouped_mm`` (the denominator of ``ratio``; target >= 1.0x): CUTLASS rowwise on
  sm90/sm100. mat_a row-major, mat_b column-major (``w[G, N, K].transpose(-2, -1)``), fp32 scales
  ``[M]`` and ``[G, N]`` (forward/dgrad) or ``[G * out]`` / ``[G * in]`` (wgrad, ``_scaled_grouped_mm(
  dy^T, x, offs)``: per-group scales, here the same column scales repeated per group), int32 group
  ends, bf16 out. TENSORWISE runs it with the single scales broadcast to those shapes (same values;
  torch has no tensorwise grouped FP8 GEMM). Layout conversions happen outside the timed region.
  BLOCKWISE/MX and runs off a CUDA GPU are rows ``"skipped: <reason>"``.
* ``turbo:<BACKEND>``: ``grouped_gemm_fp8`` (forward, dgrad) / ``grouped_gemm_fp8_variable_k``
  (wgrad, ``trans_c=True``) through the dispatcher pinned by ``use_backend``, for every available
  backend with a grouped GEMM kernel (without an FP8 one: ``"declined: <reason>"``).

Accuracy: against float64 math on the dequantized operands, per group (bf16: on its bf16 inputs).
FLOPs ``2 * M * out * in``. Row fields: the ``grouped_gemm`` suite's plus granularity, format,
a_dtype, b_dtype, block_size, out_dtype, role, baseline, bf16_ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.bench.console import print_tables, tflops_bf16_cell
from turbo_core.bench.runner import Provider, available_backends, run_cases, tensor_bytes
from turbo_core.bench.suites import grouped_gemm as grouped_suite
from turbo_core.bench.suites.gemm_fp8 import (
    BLOCK,
    MX_BLOCK,
    SHORT,
    dequant64,
    granularities_of,
    operand_dtype,
    quantize_operand,
)
from turbo_core.bench.suites.grouped_gemm import GroupedCase
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.grouped_gemm_fp8 import GroupedGemmFp8Args, GroupedGemmFp8VariableKArgs
from turbo_core.low_precision import Format, ScalingGranularity, as_format
from turbo_core.ops import quantization as quant
from turbo_core.platform import platform_of

__all__ = ["GroupedFp8Case", "run"]

G = ScalingGranularity
#: The operand roles of each pass (a, b): gradients take the backward dtype under HYBRID.
ROLES = {"fwd": ("input", "weight"), "dgrad": ("grad", "weight"), "wgrad": ("input", "grad")}
BF16 = "bf16:torch._grouped_mm"
BASELINE = "torch._scaled_grouped_mm"


@dataclass
class GroupedFp8Case:
    grouped: GroupedCase
    granularity: G
    fmt: Format

    @property
    def mx(self) -> bool:
        return self.granularity == G.MX_BLOCKWISE

    @property
    def layout(self) -> str:
        return "NT" if self.mx and self.grouped.pass_ == "dgrad" else self.grouped.layout

    @property
    def label(self) -> str:
        c = self.grouped
        return (f"{c.model}/{c.layer}/{c.pass_} {c.balance} G{len(c.lens)} {c.m}x{c.out_f}x{c.in_f} "
                f"{SHORT[self.granularity]}")


def cases(tokens: int, quick: bool, models: list[str] | None, granularities, fmt: Format,
          passes: list[str] | None = None) -> list[GroupedFp8Case]:
    return [GroupedFp8Case(c, g, fmt) for c in grouped_suite.cases(tokens, quick, models)
            if not passes or c.pass_ in passes for g in granularities]


# ---- quantization (outside the timed region) and the float64 oracle ---------------------------------


def _quantize_tokens(x, dtype, gran: G, lens, offs, role: str):
    """Tokens ``[M, K]`` for the forward-type GEMM (contraction along K)."""
    if gran == G.BLOCKWISE:
        q, s, _, _ = quant.grouped_quantize_fp8(x, dtype, gran, lens, offs, axis=1, block_size=BLOCK)
        return q, s
    return quantize_operand(x, dtype, gran, -1, role)


def _quantize_rows(x, dtype, gran: G, lens, offs, role: str):
    """``[M, D]`` for the variable-K GEMM (contraction along each group's rows): ``(q, s, lens, offs)``
    with the group lengths/offsets of q's layout (padded for BLOCKWISE and MX)."""
    if gran in (G.BLOCKWISE, G.MX_BLOCKWISE):
        return quant.grouped_quantize_fp8(x, dtype, gran, lens, offs, axis=0,
                                          block_size=BLOCK if gran == G.BLOCKWISE else None)
    q, s = quantize_operand(x, dtype, gran, -2, role)
    return q, s, lens, offs


def make_inputs(case: GroupedFp8Case, device: str, gen: torch.Generator) -> dict:
    """``hp``: the bf16 ``(p, q, lens, offs, ends)`` of the ``grouped_gemm`` suite; ``q``: the FP8
    ``(a, a_scale, b, b_scale)``; ``trans_b`` (forward-type); ``groups``: the ``(lens, offs)`` the
    turbo call takes (padded for the BLOCKWISE/MX wgrad)."""
    hp = grouped_suite.make_inputs(case.grouped, device, torch.bfloat16, gen)
    p, w, lens, offs, _ = hp
    gran, pass_ = case.granularity, case.grouped.pass_
    role_a, role_b = ROLES[pass_]
    dt_a, dt_b = operand_dtype(case.fmt, role_a, device), operand_dtype(case.fmt, role_b, device)
    if pass_ == "wgrad":
        qa, sa, lens_w, offs_w = _quantize_rows(p, dt_a, gran, lens, offs, role_a)
        qb, sb, _, _ = _quantize_rows(w, dt_b, gran, lens, offs, role_b)
        return {"hp": hp, "q": (qa, sa, qb, sb), "trans_b": None, "groups": (lens_w, offs_w)}
    qa, sa = _quantize_tokens(p, dt_a, gran, lens, offs, role_a)
    trans_b = pass_ == "fwd" or case.mx  # MX dgrad: the col-wise copy of w is [G, in, out]
    qb, sb = quantize_operand(w, dt_b, gran, -1 if pass_ == "fwd" else -2, role_b)
    return {"hp": hp, "q": (qa, sa, qb, sb), "trans_b": trans_b, "groups": (lens, offs)}


def reference(case: GroupedFp8Case, inputs: dict, oracle: str) -> torch.Tensor:
    """float64 result per group on host-known group lengths."""
    c = case.grouped
    if oracle == "bf16":
        return grouped_suite.reference(c, *inputs["hp"][:2])
    qa, sa, qb, sb = inputs["q"]
    block = MX_BLOCK if case.mx else BLOCK
    if c.pass_ == "wgrad":
        x, y = dequant64(qa, sa, block), dequant64(qb, sb, block)
        if case.mx:  # col-wise copies come transposed: [K, M_pad] / [N, M_pad]
            x, y = x.t(), y.t()
        starts = inputs["groups"][1].tolist()
        return torch.stack([y[s:s + n].t() @ x[s:s + n] for s, n in zip(starts, c.lens, strict=False)])
    a = dequant64(qa, sa.t() if case.granularity == G.BLOCKWISE else sa, block)
    b = dequant64(qb, sb, block)
    pieces, start = [], 0
    for g, n in enumerate(c.lens):
        pieces.append(a[start:start + n] @ (b[g].t() if inputs["trans_b"] else b[g]))
        start += n
    return torch.cat(pieces)


# ---- providers ---------------------------------------------------------------------------------------


def baseline_skip(case: GroupedFp8Case, q: tuple, device: str) -> str | None:
    """None when ``torch._scaled_grouped_mm`` can run the case here, else the reason."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        return f"torch {torch.__version__} has no torch._scaled_grouped_mm"
    if case.granularity == G.BLOCKWISE:
        return "torch has no grouped FP8 GEMM with 1x128/128x128 block scales (torch._scaled_grouped_mm: rowwise, MX)"
    if case.granularity == G.MX_BLOCKWISE:
        return ("not run by this suite: torch._scaled_grouped_mm's MXFP8 path (sm100 only) takes per-group "
                "swizzled E8M0 scales")
    if device != "cuda":
        return f"torch._scaled_grouped_mm (CUTLASS) needs a CUDA GPU (sm90/sm100); this run is on {device}"
    if case.grouped.pass_ == "wgrad" and any(n % 16 for n in case.grouped.lens):
        # Its wgrad contracts along the tokens; CUTLASS asserts on the device (killing the process)
        # unless every group's token count is a multiple of 16 bytes of FP8.
        return ("torch._scaled_grouped_mm's wgrad needs every group's token count to be a multiple of 16 "
                "(it asserts on the device otherwise)")
    e4m3 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
    if q[0].dtype not in e4m3 or q[2].dtype not in e4m3:
        return f"torch._scaled_grouped_mm takes E4M3 x E4M3 only, got {q[0].dtype} x {q[2].dtype}"
    if torch.version.hip is None:
        cap = torch.cuda.get_device_capability()
        if cap[0] not in (9, 10):
            return f"torch._scaled_grouped_mm needs compute capability 9.0 or 10.x; this GPU is sm_{cap[0]}{cap[1]}"
    return None


def _per_row(s: torch.Tensor, n: int) -> torch.Tensor:
    """A scale as ``n`` fp32 values (a single tensorwise scale broadcast), contiguous."""
    return s.reshape(-1).expand(n).contiguous() if s.numel() == 1 else s.reshape(-1).contiguous()


def scaled_grouped_mm(case: GroupedFp8Case, inputs: dict):
    """``torch._scaled_grouped_mm`` on the case's operands, converted to its layout (see the module doc)."""
    qa, sa, qb, sb = inputs["q"]
    ends = inputs["hp"][4]
    g = len(case.grouped.lens)
    if case.grouped.pass_ == "wgrad":  # dw = dy^T @ x per group: mat_a = dy^T [out, M], mat_b = x [M, in]
        mat_a, mat_b = qb.t().contiguous(), qa.t().contiguous().t()
        out_f, in_f = qb.shape[1], qa.shape[1]
        scale_a = _per_row(sb, out_f).repeat(g)
        scale_b = _per_row(sa, in_f).repeat(g)
    else:
        mat_a = qa
        mat_b = qb.transpose(-2, -1) if inputs["trans_b"] else qb.transpose(-2, -1).contiguous().transpose(-2, -1)
        n = mat_b.shape[2]
        scale_a = _per_row(sa, qa.shape[0])
        scale_b = _per_row(sb, g * n).reshape(g, n)
    return lambda: torch._scaled_grouped_mm(mat_a, mat_b, scale_a, scale_b, offs=ends, out_dtype=torch.bfloat16)


def primitive_of(pass_: str) -> str:
    return "grouped_gemm_fp8_variable_k" if pass_ == "wgrad" else "grouped_gemm_fp8"


def turbo_args(case: GroupedFp8Case, inputs: dict):
    qa, sa, qb, sb = inputs["q"]
    lens, offs = inputs["groups"]
    kw = {"out_dtype": torch.bfloat16, "granularity": case.granularity,
          "block_size": BLOCK if case.granularity == G.BLOCKWISE else None}
    if case.grouped.pass_ == "wgrad":
        return GroupedGemmFp8VariableKArgs(qa, sa, qb, sb, lens, offs, trans_c=True, **kw)
    return GroupedGemmFp8Args(qa, sa, qb, sb, lens, offs, trans_b=inputs["trans_b"], **kw)


def turbo_provider(backend: str, case: GroupedFp8Case):
    prim = primitive_of(case.grouped.pass_)

    def prepare(inputs: dict):
        args = turbo_args(case, inputs)

        def run_once():
            with use_backend(backend):
                return call(prim, args)

        return run_once

    return prepare


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        granularities: list[str] | None = None, fp8_format: str = "E4M3", passes: list[str] | None = None) -> list[dict]:
    """Every provider on every case (rows as in the module docstring). ``tokens`` defaults to 8192
    (32 with ``quick``); ``granularities`` to TENSORWISE, ROWWISE, BLOCKWISE (+ MX when torch has
    E8M0); ``passes`` to fwd, dgrad and wgrad."""
    fmt = as_format(fp8_format, "fp8_format")
    if fmt not in (Format.E4M3, Format.E5M2, Format.HYBRID):
        raise ValueError(f"fp8_format: expected E4M3, E5M2 or HYBRID, got {fmt.value}")
    grans = granularities_of(granularities)
    backends = available_backends("grouped_gemm_fp8", include_reference=include_reference,
                                  also=("grouped_gemm_fp8_variable_k", "grouped_gemm"))
    platform = platform_of(torch.device(device))

    def case_providers(case: GroupedFp8Case, first: dict) -> list:
        bf16_fn = grouped_suite.torch_provider(case.grouped.pass_)
        out = [Provider(BF16, lambda s: (lambda: bf16_fn(*s["hp"])), role="bf16", oracle="bf16",
                        memo=("bf16", case.grouped.label))]
        skip = baseline_skip(case, first["q"], device)
        if skip:
            out.append(Provider(BASELINE, status=f"skipped: {skip}", role="baseline", precision="fp8"))
        else:
            out.append(Provider(BASELINE, lambda s: scaled_grouped_mm(case, s), role="baseline", precision="fp8"))
        prim = get_primitive(primitive_of(case.grouped.pass_))
        for b in backends:
            reason = decline_reason(prim, b, turbo_args(case, first), platform)
            if reason:
                out.append(Provider(f"turbo:{b}", status=f"declined: {reason}", precision="fp8"))
            else:
                out.append(Provider(f"turbo:{b}", turbo_provider(b, case), precision="fp8"))
        return out

    def row(case: GroupedFp8Case) -> dict:
        c = case.grouped
        role_a, role_b = ROLES[c.pass_]
        return {"case": case.label, "model": c.model, "layer": c.layer, "pass": c.pass_, "balance": c.balance,
                "layout": case.layout, "groups": len(c.lens), "group_lens": list(c.lens), "m": c.m, "n": c.out_f,
                "k": c.in_f, "dtype": "fp8", "granularity": case.granularity.value, "format": fmt.value,
                "a_dtype": str(operand_dtype(fmt, role_a, device)).replace("torch.", ""),
                "b_dtype": str(operand_dtype(fmt, role_b, device)).replace("torch.", ""),
                "block_size": {G.BLOCKWISE: BLOCK, G.MX_BLOCKWISE: MX_BLOCK}.get(case.granularity),
                "out_dtype": "bf16"}

    all_cases = cases(tokens or (32 if quick else 8192), quick, models, grans, fmt, passes)
    return run_cases("grouped_gemm_fp8", all_cases, row=row, flops=lambda c: c.grouped.flops,
                     make_inputs=lambda c, gen: make_inputs(c, device, gen),
                     timed_bytes=lambda s: tensor_bytes(s["q"][0::2]), providers=case_providers,
                     reference=reference, keep=providers, warmup=warmup, iters=iters, device=device,
                     progress=progress, bf16_ratio=True)


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s, (ratio to torch._scaled_grouped_mm), {ratio to bf16 torch._grouped_mm}, [error]."""
    print_tables(rows, console, cell=tflops_bf16_cell,
                 title="turbo bench grouped-gemm-fp8: TFLOP/s (ratio to torch._scaled_grouped_mm) "
                       "{ratio to bf16 torch._grouped_mm} [max rel err]")
