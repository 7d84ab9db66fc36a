"""Dense FP8 GEMM suite (``turbo bench gemm-fp8``): the ``gemm`` suite's model layers (Llama-3.1
8B/70B/405B: forward NT, dgrad NN, wgrad TN) per scaling granularity, GEMM only.

Each case's operands are quantized **once, outside the timed region** (``turbo_core.ops.quantization``,
the recipe of ``turbo_core.ops.gemm_fp8``: every operand scaled along the GEMM's contraction dim),
and every provider multiplies the same FP8 values and scales:

============  =====================================================================================
granularity   a (``[M, K]``; ``[K, M]`` for wgrad), b (``[N, K]`` fwd, ``[K, N]`` dgrad/wgrad)
============  =====================================================================================
TENSORWISE    one fp32 scale each
ROWWISE       one scale per row of op(a) and per column of op(b) (along K)
BLOCKWISE     activations and gradients: 1x128 blocks along K; weights (b of fwd/dgrad): 128x128
              tiles; wgrad: both operands 1x128 along K (the token dim)
MX_BLOCKWISE  1x32 blocks along K, E8M0 scales, K zero-padded to 128 (weights: 32x32 tiles); every
              pass is NT (the quantizer's col-wise copies are the transposes), as the op runs it.
              Listed when torch has ``float8_e8m0fnu``
============  =====================================================================================

E4M3 by default; ``fp8_format="E5M2"`` quantizes everything to E5M2, ``"HYBRID"`` the gradient
(a of dgrad and wgrad) to E5M2 and the rest to E4M3. FNUZ dtypes on gfx942.

Providers per case, in this order:

* ``bf16:torch.matmul``: the same shape in bf16 on the unquantized inputs, in the pass's layout
  (timed once per shape and repeated for every granularity); the denominator of ``bf16_ratio``.
* the PyTorch FP8 baseline of the granularity (the denominator of ``ratio``):
  ``torch._scaled_mm`` for TENSORWISE/ROWWISE (fp32 scales ``[]`` or ``[M, 1]`` / ``[1, N]``) and
  ``F.scaled_mm`` (``torch.nn.functional.scaled_mm``) for BLOCKWISE (``ScalingType.BlockWise1x128``
  for a; ``BlockWise128x128`` for a weight, ``BlockWise1x128`` for wgrad's b) and MX_BLOCKWISE
  (``BlockWise1x32`` with ``SWIZZLE_32_4_4`` E8M0 scales). These take mat1 row-major ``[M, K]`` and
  mat2 column-major ``[K, N]`` (``b[N, K].t()``), bf16 out: the operands are converted to that
  layout outside the timed region (dgrad's b and wgrad's a and b are transposed copies, so the
  baseline is timed on the K-major form of the same product; the turbo providers get the pass's
  own layout, unless ``operands="k-major"``: see below). A baseline that cannot run here (no such API in this torch, no GPU, a GPU without
  the instructions, a dtype pair cuBLASLt lacks) is a row ``"skipped: <reason>"``.
* ``turbo:<BACKEND>``: ``dispatcher.call("gemm_fp8", GemmFp8Args(...))`` pinned by ``use_backend``,
  for every available backend with a ``gemm_fp8`` or ``gemm`` kernel (those without an FP8 kernel,
  or that refuse the case, are rows ``"declined: <reason>"``); the reference TORCH only with
  ``include_reference``.

Operand storage (``operands``): ``"pass"`` (default) hands the turbo providers each pass's operands
as the op stores them (dgrad's b and wgrad's a and b not contiguous along K), so a backend that
needs K-major operands (cuBLASLt's FP8 on sm89/sm90, Triton's FP8 on Hopper) times its re-layout
too. ``"k-major"`` hands them the very tensors the PyTorch baseline multiplies, as views in the
pass's layout (same values, scales and flags; ``trans_a``/``trans_b`` unchanged), so every provider
times the same product on the same bytes: the GEMM alone. Rows carry ``operands``; MX is NT either way.

Accuracy (``max_rel_err``): against float64 math on the **dequantized** operands, the exact value of
``gemm_fp8``'s semantics (``bf16:torch.matmul``: against float64 math on its bf16 inputs). FLOPs
``2 * M * N * K`` (K unpadded); ``peak_fraction`` against the FP8 datasheet peak (bf16's for bf16).
Row fields beyond the ``gemm`` suite's: granularity, format, a_dtype, b_dtype, block_size, bf16_ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

from turbo_core.bench.console import print_tables, tflops_bf16_cell
from turbo_core.bench.runner import Provider, available_backends, run_cases, tensor_bytes
from turbo_core.bench.suites import gemm as gemm_suite
from turbo_core.bench.suites.gemm import GemmCase
from turbo_core.dispatch import call, decline_reason, get_primitive, use_backend
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, cdiv
from turbo_core.low_precision import Format, ScalingGranularity, ScalingRecipe, as_format, as_granularity, fp8_dtype_for
from turbo_core.ops import quantization as quant
from turbo_core.platform import platform_of

__all__ = ["BLOCK", "MX_BLOCK", "Fp8GemmCase", "accepted", "baseline_skip", "cases", "default_granularities",
           "dequant", "dequant64", "granularities_of", "make_inputs", "operand_dtype", "print_table", "quantize_operand",
           "reference", "run", "scale_values", "swizzle_32_4_4"]

G = ScalingGranularity
BLOCK = 128
MX_BLOCK = 32
SHORT = {G.TENSORWISE: "tensorwise", G.ROWWISE: "rowwise", G.BLOCKWISE: "blockwise", G.MX_BLOCKWISE: "mx"}
#: The operand roles of each pass (a, b): gradients take the backward dtype under HYBRID.
ROLES = {"fwd": ("input", "weight"), "dgrad": ("grad", "weight"), "wgrad": ("grad", "input")}
BF16 = "bf16:torch.matmul"


def default_granularities() -> tuple[G, ...]:
    """TENSORWISE, ROWWISE, BLOCKWISE, and MX_BLOCKWISE when torch has the E8M0 dtype."""
    grans = (G.TENSORWISE, G.ROWWISE, G.BLOCKWISE)
    return grans + ((G.MX_BLOCKWISE,) if hasattr(torch, "float8_e8m0fnu") else ())


def granularities_of(values) -> tuple[G, ...]:
    """Granularities from names (``tensorwise``, ``ROWWISE``, ``mx``...); None: the defaults."""
    if not values:
        return default_granularities()
    aliases = {"mx": G.MX_BLOCKWISE, "mxfp8": G.MX_BLOCKWISE}
    out = []
    for v in values:
        g = aliases.get(v.lower()) if isinstance(v, str) else None
        out.append(g or as_granularity(v, "granularities"))
    if G.MX_BLOCKWISE in out and not hasattr(torch, "float8_e8m0fnu"):
        raise ValueError(f"granularities: MX_BLOCKWISE needs torch.float8_e8m0fnu, which torch {torch.__version__} lacks")
    return tuple(dict.fromkeys(out))


def operand_dtype(fmt: Format, role: str, device: str) -> torch.dtype:
    return fp8_dtype_for(fmt, torch.device(device), role != "grad")


@dataclass
class Fp8GemmCase:
    gemm: GemmCase
    granularity: G
    fmt: Format
    operands: str = "pass"

    @property
    def mx(self) -> bool:
        return self.granularity == G.MX_BLOCKWISE

    @property
    def layout(self) -> str:
        return "NT" if self.mx else self.gemm.layout

    @property
    def flops(self) -> int:
        return self.gemm.flops

    @property
    def label(self) -> str:
        g = self.gemm
        kmajor = " k-major" if self.operands == "k-major" else ""
        return f"{g.model}/{g.layer}/{g.pass_} {self.layout} {g.m}x{g.n}x{g.k} {SHORT[self.granularity]}{kmajor}"


OPERANDS = ("pass", "k-major")


def cases(tokens: int, quick: bool, models: list[str] | None, granularities, fmt: Format,
          passes: list[str] | None = None, operands: str = "pass") -> list[Fp8GemmCase]:
    """Shape-major: every granularity of one layer's pass, then the next."""
    if operands not in OPERANDS:
        raise ValueError(f"operands: expected one of {', '.join(OPERANDS)}, got {operands!r}")
    return [Fp8GemmCase(c, g, fmt, operands) for c in gemm_suite.cases(tokens, quick, models)
            if not passes or c.pass_ in passes for g in granularities]


# ---- quantization (outside the timed region) and the float64 oracle ---------------------------------


def quantize_operand(x: torch.Tensor, dtype: torch.dtype, gran: G, axis: int, role: str):
    """``(q, scale_inv)`` of a stored operand whose GEMM contracts along ``axis`` (-1 or -2)."""
    if gran == G.TENSORWISE:
        return quant.quantize_fp8(x, dtype, gran)
    if gran == G.ROWWISE:
        return quant.quantize_fp8(x, dtype, gran, axis=axis)
    if gran == G.BLOCKWISE:
        if role == "weight":
            return quant.quantize_fp8(x, dtype, gran, block_size=BLOCK, scaling_recipe=ScalingRecipe(use_2d_block=True))
        return quant.quantize_fp8(x, dtype, gran, block_size=BLOCK, axis=axis)
    return quant.quantize_fp8(x, dtype, gran, axis=axis, scaling_recipe=ScalingRecipe(use_2d_block=role == "weight"))


def scale_values(s: torch.Tensor) -> torch.Tensor:
    """fp32 scales as float64; E8M0 bytes (``float8_e8m0fnu`` or uint8) as ``2**(byte - 127)``, 0xFF NaN."""
    if s.dtype == torch.float32:
        return s.double()
    byte = s.contiguous().view(torch.uint8).double()
    return torch.where(byte == 255, torch.full_like(byte, float("nan")), torch.exp2(byte - 127))


def dequant64(q: torch.Tensor, s: torch.Tensor, block: int) -> torch.Tensor:
    """``q * scale_inv`` in float64, each scale repeated over its block: a dim where the scale has
    neither q's size nor 1 is cut in blocks of ``block`` (the last one partial). ``s`` has q's rank
    (or one element)."""
    return dequant(q, s, block, torch.float64)


def dequant(q: torch.Tensor, s: torch.Tensor, block: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`dequant64` computed in ``dtype`` (float32 keeps model-sized GPU operands small)."""
    x = q.to(dtype)
    v = scale_values(s).to(dtype)
    if v.numel() == 1:
        return x * v.reshape(())
    for d in range(x.dim()):
        if v.shape[d] not in (1, x.shape[d]):
            v = v.repeat_interleave(block, dim=d).narrow(d, 0, x.shape[d])
    return x * v


def make_inputs(case: Fp8GemmCase, device: str, gen: torch.Generator) -> dict:
    """``{"hp": (a, b, trans_a, trans_b)}`` bf16 as the ``gemm`` suite makes them, and ``"q"``:
    ``(qa, sa, qb, sb, trans_a, trans_b)`` the FP8 operands (MX: NT)."""
    hp = gemm_suite.make_inputs(case.gemm, device, torch.bfloat16, gen)
    a, b, ta, tb = hp
    role_a, role_b = ROLES[case.gemm.pass_]
    qa, sa = quantize_operand(a, operand_dtype(case.fmt, role_a, device), case.granularity, -2 if ta else -1, role_a)
    qb, sb = quantize_operand(b, operand_dtype(case.fmt, role_b, device), case.granularity, -1 if tb else -2, role_b)
    if case.mx:  # the col-wise quantizer returned the transposes: NT
        ta, tb = False, True
    elif case.operands == "k-major":  # the baseline's K-major tensors, viewed in the pass's layout
        mat1, mat2 = k_major((qa, sa, qb, sb, ta, tb))
        qa, qb = (mat1.t() if ta else mat1), (mat2.t() if tb else mat2)
    return {"hp": hp, "q": (qa, sa, qb, sb, ta, tb)}


def reference(case: Fp8GemmCase, inputs: dict, oracle: str) -> torch.Tensor:
    if oracle == "bf16":
        return gemm_suite.reference(*inputs["hp"])
    qa, sa, qb, sb, ta, tb = inputs["q"]
    block = MX_BLOCK if case.mx else BLOCK
    x, y = dequant64(qa, sa, block), dequant64(qb, sb, block)
    return (x.t() if ta else x) @ (y.t() if tb else y)


# ---- the PyTorch FP8 baselines ---------------------------------------------------------------------


def k_major(q: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """mat1 ``[M, K]`` row-major and mat2 ``[K, N]`` column-major (``b[N, K].t()``), copies where
    the stored layout differs."""
    qa, _, qb, _, ta, tb = q
    mat1 = qa.t().contiguous() if ta else qa
    mat2 = qb.t() if tb else qb.t().contiguous().t()
    return mat1, mat2


def swizzle_32_4_4(s: torch.Tensor) -> torch.Tensor:
    """cuBLAS's tiled layout of 1x32 block scales ``[rows, cols]`` (1-D, ``float8_e8m0fnu``): rows
    zero-padded to 128 and cols to 4, 128x4 tiles in row-major tile order, the scale of tile row
    ``r`` and column ``c`` at ``(r % 32) * 16 + (r // 32) * 4 + c`` within its tile."""
    rows, cols = s.shape
    r_pad, c_pad = cdiv(rows, 128) * 128, cdiv(cols, 4) * 4
    padded = torch.zeros(r_pad, c_pad, dtype=torch.uint8, device=s.device)
    padded[:rows, :cols] = s.contiguous().view(torch.uint8)
    tiles = padded.view(r_pad // 128, 4, 32, c_pad // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1).view(torch.float8_e8m0fnu)


def _scaled_mm(case: Fp8GemmCase, q: tuple):
    """``torch._scaled_mm`` on the case's operands (TENSORWISE/ROWWISE)."""
    qa, sa, qb, sb, ta, tb = q
    mat1, mat2 = k_major(q)
    if case.granularity == G.ROWWISE:
        sa, sb = sa.reshape(-1, 1).contiguous(), sb.reshape(1, -1).contiguous()
    return lambda: torch._scaled_mm(mat1, mat2, sa, sb, out_dtype=torch.bfloat16)


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def accepted(call, *tensors: torch.Tensor) -> bool:
    """Whether this torch's own shape/stride rules (its meta kernel) accept ``call`` on tensors of
    these shapes, strides and dtypes; True when it has no meta kernel (the real call decides)."""
    try:
        call(*(_meta(t) for t in tensors))
    except NotImplementedError:
        return True
    except Exception:
        return False
    return True


def _f_scaled_mm(case: Fp8GemmCase, q: tuple):
    """``torch.nn.functional.scaled_mm`` on the case's operands (BLOCKWISE/MX_BLOCKWISE).

    BLOCKWISE scales as torch 2.13's rules have them (its meta kernel): a ``[M, cdiv(K,128)]``
    outer-dim-major (strides ``(1, M)``); 128x128 b ``[L4, cdiv(N,128)]`` with strides ``(1, L4)``,
    ``L4`` = cdiv(K,128) rounded up to 4; 1x128 b ``[N, cdiv(K,128)]`` with strides ``(1, N)``. When
    the installed torch's rules reject that, the transposed-view form ``torch._scaled_mm`` uses is
    tried (same memory), and else the call reports torch's error."""
    qa, sa, qb, sb, ta, tb = q
    mat1, mat2 = k_major(q)
    st = F.ScalingType
    if case.mx:
        sw = F.SwizzleType.SWIZZLE_32_4_4
        scale_a, scale_b = swizzle_32_4_4(sa), swizzle_32_4_4(sb)
        return lambda: F.scaled_mm(mat1, mat2, scale_a, st.BlockWise1x32, scale_b, st.BlockWise1x32,
                                   swizzle_a=sw, swizzle_b=sw, output_dtype=torch.bfloat16)
    s_mk = sa.t() if ta else sa  # [M, cdiv(K, 128)]
    scale_a = s_mk.t().contiguous().t()
    if blockwise_layout(tuple(qb.shape), tuple(sb.shape), -1 if tb else -2, BLOCK) == "2d":
        tiles_nk = sb if tb else sb.t()  # [cdiv(N, 128), cdiv(K, 128)]
        kb = tiles_nk.shape[1]
        padded = torch.zeros(tiles_nk.shape[0], cdiv(kb, 4) * 4, dtype=torch.float32, device=sb.device)
        padded[:, :kb] = tiles_nk
        candidates, recipe_b = [padded.t(), tiles_nk.contiguous().t()], st.BlockWise128x128
    else:
        s_nk = (sb if tb else sb.t()).t().contiguous().t()  # [N, cdiv(K, 128)], strides (1, N)
        candidates, recipe_b = [s_nk, s_nk.t()], st.BlockWise1x128

    def call(m1, m2, s_a, s_b):
        return F.scaled_mm(m1, m2, s_a, st.BlockWise1x128, s_b, recipe_b, output_dtype=torch.bfloat16)

    scale_b = next((c for c in candidates if accepted(call, mat1, mat2, scale_a, c)), candidates[0])
    return lambda: call(mat1, mat2, scale_a, scale_b)


def baseline_name(gran: G) -> str:
    return "torch._scaled_mm" if gran in (G.TENSORWISE, G.ROWWISE) else "F.scaled_mm"


@cache
def _cpu_probe(gran: G) -> str | None:
    """Whether ``torch._scaled_mm`` with ``gran`` scales runs on the CPU in this torch (None) or why not."""
    try:
        a = torch.ones(16, 32).to(torch.float8_e4m3fn)
        b = torch.ones(16, 32).to(torch.float8_e4m3fn)
        sa, sb = (torch.ones(16, 1), torch.ones(1, 16)) if gran == G.ROWWISE else (torch.ones(()), torch.ones(()))
        torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


def baseline_skip(case: Fp8GemmCase, q: tuple, device: str) -> str | None:
    """None when the PyTorch baseline of the case's granularity can run here, else the reason."""
    qa, qb = q[0], q[2]
    gran = case.granularity
    e4m3 = qa.dtype == torch.float8_e4m3fn and qb.dtype == torch.float8_e4m3fn
    cuda = device == "cuda"
    cap = torch.cuda.get_device_capability() if cuda and torch.version.hip is None else None
    if gran in (G.TENSORWISE, G.ROWWISE):
        if not hasattr(torch, "_scaled_mm"):
            return f"torch {torch.__version__} has no torch._scaled_mm"
        if not cuda:
            why = _cpu_probe(gran)
            return f"torch._scaled_mm ({SHORT[gran]}) does not run on the CPU in torch {torch.__version__}: {why}" \
                if why else None
        if cap is not None and cap < (8, 9):
            return f"torch._scaled_mm needs compute capability 8.9+; this GPU is sm_{cap[0]}{cap[1]}"
        if cap is not None and qa.dtype == torch.float8_e5m2 and qb.dtype == torch.float8_e5m2:
            return "cuBLASLt has no E5M2 x E5M2 FP8 GEMM"
        return None
    recipe = "BlockWise1x32" if case.mx else "BlockWise1x128"
    if not hasattr(F, "scaled_mm") or not hasattr(getattr(F, "ScalingType", None), recipe):
        return f"torch {torch.__version__} has no torch.nn.functional.scaled_mm with ScalingType.{recipe}"
    if case.mx and not hasattr(getattr(F, "SwizzleType", None), "SWIZZLE_32_4_4"):
        return f"torch {torch.__version__} has no SwizzleType.SWIZZLE_32_4_4 for MX scales"
    if not cuda:
        return f"F.scaled_mm with {recipe} scales (cuBLASLt) needs a CUDA GPU; this run is on {device}"
    if torch.version.hip is not None:
        return f"F.scaled_mm with {recipe} scales is wired here for cuBLASLt (CUDA) only; this is a ROCm torch"
    if not e4m3:
        return f"F.scaled_mm with {recipe} scales takes E4M3 x E4M3 only, got {qa.dtype} x {qb.dtype}"
    if cap is not None and case.mx and cap[0] != 10:
        return f"MXFP8 ({recipe}, cuBLASLt) needs compute capability 10.x; this GPU is sm_{cap[0]}{cap[1]}"
    if cap is not None and not case.mx and cap[0] != 9:
        return f"1x128/128x128 block scaling (cuBLASLt, via torch) runs on sm90 only; this GPU is sm_{cap[0]}{cap[1]}"
    return None


# ---- the suite -------------------------------------------------------------------------------------


def turbo_provider(backend: str, gran: G):
    def prepare(inputs: dict):
        args = turbo_args(gran, inputs["q"])

        def run_once():
            with use_backend(backend):
                return call("gemm_fp8", args)

        return run_once

    return prepare


def turbo_args(gran: G, q: tuple) -> GemmFp8Args:
    qa, sa, qb, sb, ta, tb = q
    return GemmFp8Args(qa, sa, qb, sb, trans_a=ta, trans_b=tb, out_dtype=torch.bfloat16, granularity=gran,
                       block_size=BLOCK if gran == G.BLOCKWISE else None)


def run(*, quick: bool, tokens: int | None, models: list[str] | None, providers: list[str] | None,
        include_reference: bool, warmup: int, iters: int, device: str, progress=None,
        granularities: list[str] | None = None, fp8_format: str = "E4M3", passes: list[str] | None = None,
        operands: str = "pass") -> list[dict]:
    """Every provider on every case (rows: :func:`turbo_core.bench.runner.run_cases`'s plus the
    fields in the module docstring). ``tokens`` defaults to 8192 (32 with ``quick``);
    ``granularities`` to :func:`default_granularities`; ``passes`` to fwd, dgrad and wgrad;
    ``operands``: ``"pass"`` or ``"k-major"`` (module docstring)."""
    fmt = as_format(fp8_format, "fp8_format")
    if fmt not in (Format.E4M3, Format.E5M2, Format.HYBRID):
        raise ValueError(f"fp8_format: expected E4M3, E5M2 or HYBRID, got {fmt.value}")
    grans = granularities_of(granularities)
    prim = get_primitive("gemm_fp8")
    backends = available_backends("gemm_fp8", include_reference=include_reference, also=("gemm",))
    platform = platform_of(torch.device(device))

    def case_providers(case: Fp8GemmCase, first: dict) -> list:
        out = [Provider(BF16, lambda s: (lambda: gemm_suite.torch_provider(*s["hp"])), role="bf16", oracle="bf16",
                        memo=("bf16", case.gemm.label))]
        name = baseline_name(case.granularity)
        skip = baseline_skip(case, first["q"], device)
        if skip:
            out.append(Provider(name, status=f"skipped: {skip}", role="baseline", precision="fp8"))
        else:
            make = _scaled_mm if name == "torch._scaled_mm" else _f_scaled_mm
            out.append(Provider(name, lambda s: make(case, s["q"]), role="baseline", precision="fp8"))
        for b in backends:
            reason = decline_reason(prim, b, turbo_args(case.granularity, first["q"]), platform)
            if reason:
                out.append(Provider(f"turbo:{b}", status=f"declined: {reason}", precision="fp8"))
            else:
                out.append(Provider(f"turbo:{b}", turbo_provider(b, case.granularity), precision="fp8"))
        return out

    def row(case: Fp8GemmCase) -> dict:
        g = case.gemm
        role_a, role_b = ROLES[g.pass_]
        return {"case": case.label, "model": g.model, "layer": g.layer, "pass": g.pass_, "layout": case.layout,
                "m": g.m, "n": g.n, "k": g.k, "dtype": "fp8", "granularity": case.granularity.value,
                "format": fmt.value, "a_dtype": str(operand_dtype(fmt, role_a, device)).replace("torch.", ""),
                "b_dtype": str(operand_dtype(fmt, role_b, device)).replace("torch.", ""),
                "block_size": {G.BLOCKWISE: BLOCK, G.MX_BLOCKWISE: MX_BLOCK}.get(case.granularity),
                "out_dtype": "bf16", "operands": case.operands}

    all_cases = cases(tokens or (32 if quick else 8192), quick, models, grans, fmt, passes, operands)
    return run_cases("gemm_fp8", all_cases, row=row, flops=lambda c: c.flops,
                     make_inputs=lambda c, gen: make_inputs(c, device, gen),
                     timed_bytes=lambda s: tensor_bytes(s["q"][0::2]), providers=case_providers,
                     reference=reference, keep=providers, warmup=warmup, iters=iters, device=device,
                     progress=progress, bf16_ratio=True)


def print_table(rows: list[dict], console) -> None:
    """Per case: TFLOP/s, (the ratio to the same granularity's torch baseline), {the ratio to bf16}, [error]."""
    print_tables(rows, console, cell=tflops_bf16_cell,
                 title="turbo bench gemm-fp8: TFLOP/s (ratio to the torch FP8 baseline) {ratio to bf16} [max rel err]")
