"""``grouped_gemm_fp8`` and ``grouped_gemm_fp4``: low-precision grouped GEMM (mixture-of-experts) with
autograd, composed of quantization primitives, the grouped FP8/FP4 GEMM primitive (forward and
dgrad) and its variable-K form (wgrad).

Quantization recipe (scales always run along the contraction dim of the GEMM that uses them):

============  ==========================================================================================
granularity   a (tokens ``[M_total, K]``), b (``[G, K, N]`` / ``[G, N, K]``), dC (``[M_total, N]``)
============  ==========================================================================================
TENSORWISE    one scale each for a, b and dC (``quantize_fp8``)
ROWWISE       a per row (forward) and per column over all of M (wgrad); b per column of op(b[g])
              along K (forward) and along N (dgrad); dC per row (dgrad) and per column (wgrad); each
              pair of copies from one ``quantize_fp8_with_trans`` call (one pass fewer over x)
BLOCKWISE     a and dC: ``grouped_quantize_fp8_with_trans``: a 1 x bs row copy (scales transposed)
              for the forward/dgrad and a bs x 1 column copy with each group padded to bs (and the
              padded group offsets) for the variable-K wgrad; b: bs x bs tiles (one quantization)
MX_BLOCKWISE  a and dC: 1x32 rows along K/N (``quantize_fp8``, tight rows) and the grouped col-wise
              copy (``grouped_quantize_fp8`` axis 0: groups padded to 128, data transposed) for the
              wgrad; b: 32x32 tiles, row and col-wise copies; every GEMM is NT
FP4           as MX_BLOCKWISE with ``quantize_fp4`` / ``grouped_quantize_fp4`` (groups padded to 512)
============  ==========================================================================================

A ROWWISE weight quantized into its weight cache (once per weight update, then reused by every
micro-batch of the step) has its dgrad copy quantized from the transposed view, K-major
(``quantize``'s ``k_major``): Hopper's FP8 MMA reads both operands K-major, and the weight's stored
``[G, N, K]`` layout would have the backend transpose the FP8 copy in every micro-batch's dgrad.
Quantized per call (no cache), the weight keeps its stored layout and both copies come from one
``quantize_fp8_with_trans`` read. Same values and scales either way; :data:`K_MAJOR_CACHED_DGRAD`
``False`` keeps the stored layout for cached weights too (side-by-side timing).

With ``wgrad_fp8=False`` the weight gradient is the high-precision variable-K ``grouped_gemm_variable_k``
on a and dC as given (a is saved unquantized, and neither column copy is made); the forward and the
dgrad stay FP8. The variable-K GEMM's reduction runs over each group's tokens, often a few hundred
rows, where FP8 saves little GEMM time and its column quantizations cost whole passes over a and dC
(``docs/design-notes.md``, "When FP8 pays in a training step").

Under HYBRID, dC is E5M2 and a, b are E4M3. Rows past ``sum(group_lens)`` (an over-allocated tail)
take part in the TENSORWISE scales and in ROWWISE's column scales of the wgrad (whose extent is
not known without a host sync): keep them finite (e.g. zero). BLOCKWISE/MX/FP4 column copies leave
them out.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import grouped_gemm as launch_hp
from turbo_core.dispatch.launch import grouped_gemm_fp8 as launch
from turbo_core.dispatch.specs.validate import (
    assert_group_values_async,
    check_group_lens,
    check_group_offs,
    check_group_values,
    check_grouped_inner_dim,
    check_num_cu_schedule,
    require_bool,
    require_same_device,
)
from turbo_core.low_precision import Float4QuantConfig, Float8QuantConfig, ScalingGranularity, ScalingRecipe
from turbo_core.ops import quantization as quant
from turbo_core.ops._grad_accum import check_pattern
from turbo_core.ops.gemm_fp8 import (
    Operand,
    Scheme,
    check_operand,
    check_quantized,
    fp4_config,
    fp4_scheme,
    fp8_config,
    fp8_scheme,
    from_quantized,
    fused_dummy_grad,
    needs_grads,
    op_cache,
    operand,
    quantize,
    resolve_out_dtype,
    unpair,
)
from turbo_core.ops.grouped_gemm import grouped_gemm_compute_offs
from turbo_core.ops.weight_cache import WeightQuantCache, quantize_weight
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["grouped_gemm_fp4", "grouped_gemm_fp8"]

#: Cached ROWWISE weights take their dgrad copy K-major (module doc); ``False``: the stored layout.
K_MAJOR_CACHED_DGRAD = True

G = ScalingGranularity
Tensor = torch.Tensor


def _grouped_layout(scheme: Scheme) -> bool:
    """Whether a/dC use group-dependent layouts (BLOCKWISE, MX, FP4) rather than plain quantization."""
    return scheme.granularity in (G.BLOCKWISE, G.MX_BLOCKWISE)


def _quantize_tokens(scheme: Scheme, x: Tensor, group_lens: Tensor, group_offs: Tensor, wgrad: bool, role: str):
    """Quantize a token-packed ``x`` ``[M, D]`` for the grouped GEMM (contraction along D) and, when
    ``wgrad``, for the variable-K GEMM (contraction along each group's rows).

    Returns ``(row, col)``: ``row`` an :class:`Operand`; ``col`` ``None`` or ``(data, scale, lens, offs)``
    with the group lengths/offsets that the column copy's layout uses."""
    dtype = scheme.bwd_dtype if role == "grad" else scheme.fwd_dtype
    gran, bs = scheme.granularity, scheme.block_size
    recipe = ScalingRecipe(use_sr=scheme.fp4 and role == "grad" and scheme.gradient_sr)
    if gran == G.BLOCKWISE:
        if wgrad:
            q_r, s_r, q_c, s_c, _, _, lens_c, offs_c = quant.grouped_quantize_fp8_with_trans(
                x, dtype, gran, group_lens, group_offs, block_size=bs)
            return Operand(q_r, s_r, False), (q_c, s_c, lens_c, offs_c)
        q_r, s_r, _, _ = quant.grouped_quantize_fp8(x, dtype, gran, group_lens, group_offs, axis=1, block_size=bs)
        return Operand(q_r, s_r, False), None
    # MX / FP4: tight 1x32 rows along D, and the grouped col-wise copy (transposed, groups padded).
    plain = quant.quantize_fp4 if scheme.fp4 else quant.quantize_fp8
    q_r, s_r = plain(x, dtype, gran, axis=-1, block_size=bs, scaling_recipe=recipe)
    if not wgrad:
        return Operand(q_r, s_r, False), None
    grouped = quant.grouped_quantize_fp4 if scheme.fp4 else quant.grouped_quantize_fp8
    q_c, s_c, lens_c, offs_c = grouped(x, dtype, gran, group_lens, group_offs, axis=0, block_size=bs,
                                       scaling_recipe=recipe)
    return Operand(q_r, s_r, False), (q_c, s_c, lens_c, offs_c)


def _quantize_weight(scheme: Scheme, b: Tensor, need: set[int], cache: WeightQuantCache | None) -> dict:
    """b's copies for the stored dims ``need``. A weight quantized once into its cache for every
    micro-batch of a step takes its ROWWISE dgrad copy K-major (module doc); quantized per call it
    keeps the stored layout, both copies from one read."""
    k_major = K_MAJOR_CACHED_DGRAD and scheme.granularity == G.ROWWISE
    return quantize_weight(cache, b, (scheme, "grouped", k_major), need,
                           lambda dims: quantize(scheme, b, dims, "weight", fused_rowwise=True, k_major=k_major),
                           uncached=lambda dims: quantize(scheme, b, dims, "weight", fused_rowwise=True))


def _mm(scheme: Scheme, x: Operand, y: Operand, group_lens: Tensor, group_offs: Tensor, out_dtype: torch.dtype,
        num_cu: int | None) -> Tensor:
    if scheme.fp4:
        return launch.grouped_gemm_fp4(x.data, x.scale, y.data, y.scale, group_lens, group_offs, trans_b=y.t,
                                       out_dtype=out_dtype, num_cu=num_cu)
    return launch.grouped_gemm_fp8(x.data, x.scale, y.data, y.scale, group_lens, group_offs, trans_b=y.t,
                                   out_dtype=out_dtype, granularity=scheme.granularity,
                                   block_size=scheme.block_size, num_cu=num_cu)


def _variable_k(scheme: Scheme, a: tuple, g: tuple, group_lens: Tensor, group_offs: Tensor, *, trans_c: bool,
                num_cu: int | None, out_dtype: torch.dtype | None = None, out: Tensor | None = None) -> Tensor:
    if scheme.fp4:
        return launch.grouped_gemm_fp4_variable_k(a[0], a[1], g[0], g[1], group_lens, group_offs, out_dtype=out_dtype,
                                                  trans_c=trans_c, num_cu=num_cu, out=out)
    return launch.grouped_gemm_fp8_variable_k(a[0], a[1], g[0], g[1], group_lens, group_offs, out_dtype=out_dtype,
                                              granularity=scheme.granularity, block_size=scheme.block_size,
                                              trans_c=trans_c, num_cu=num_cu, out=out)


class _LowpGroupedGemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, b_t, a_t, group_lens, group_offs, trans_b, out_dtype, scheme, num_cu, fused, needs, cache,
                wgrad_fp8):
        need_da, need_db = needs
        col_db = need_db and wgrad_fp8  # the FP8 variable-K wgrad needs a's column copy
        b_k = 1 if trans_b else 0
        need_b = {b_k, 1 - b_k} if need_da else {b_k}
        if isinstance(b, QuantizedTensor):
            qb = from_quantized(b, b_t, b_k, need_b)
        else:
            qb = _quantize_weight(scheme, b, need_b, cache)
        if _grouped_layout(scheme):
            x, col = _quantize_tokens(scheme, a, group_lens, group_offs, col_db, "input")
            wg = col
        else:
            need = {1} | ({0} if col_db else set())
            qa = from_quantized(a, a_t, 1, need) if isinstance(a, QuantizedTensor) else \
                quantize(scheme, a, need, "input", fused_rowwise=True)
            x = operand(qa, 1, False)
            wg = None
            if col_db:
                w = operand(qa, 0, False)
                data, scale = w.data, w.scale
                if w.t:  # a pair's K-major copy ([K, M]): the variable-K GEMM takes the M-major [M, K]
                    data, scale = data.t().contiguous(), scale.t().contiguous()
                wg = (data, scale, group_lens, group_offs)
        c = _mm(scheme, x, operand(qb, b_k, trans_b), group_lens, group_offs, out_dtype, num_cu)
        saved = [group_lens, group_offs]
        if need_da:
            yd = operand(qb, 1 - b_k, not trans_b)
            saved += [yd.data, yd.scale]
            ctx.yd_t = yd.t
        if need_db:
            saved += list(wg) if wgrad_fp8 else [a]
        if fused:
            saved.append(b)
        ctx.save_for_backward(*saved)
        ctx.need = (need_da, need_db)
        ctx.trans_b, ctx.scheme, ctx.num_cu, ctx.fused, ctx.wgrad_fp8 = trans_b, scheme, num_cu, fused, wgrad_fp8
        ctx.a_dtype, ctx.b_dtype = a.dtype, b.dtype
        return c

    @staticmethod
    def backward(ctx, grad_c):
        need_da, need_db = ctx.need
        saved = list(ctx.saved_tensors)
        group_lens, group_offs = saved.pop(0), saved.pop(0)
        scheme, num_cu = ctx.scheme, ctx.num_cu
        grad_c = grad_c.contiguous()
        col_db = need_db and ctx.wgrad_fp8
        xg = gcol = None
        if _grouped_layout(scheme) and (need_da or col_db):
            xg, gcol = _quantize_tokens(scheme, grad_c, group_lens, group_offs, col_db, "grad")
        elif need_da or col_db:
            qg = quantize(scheme, grad_c, ({1} if need_da else set()) | ({0} if col_db else set()), "grad",
                          fused_rowwise=True)
            xg = operand(qg, 1, False) if need_da else None
            if col_db:
                w = operand(qg, 0, False)
                gcol = (w.data, w.scale, group_lens, group_offs)
        grad_a = grad_b = None
        if need_da:
            yd = Operand(saved.pop(0), saved.pop(0), ctx.yd_t)
            # dA_g = dC_g @ op(B[g]).T; rows past the last group stay zero.
            grad_a = _mm(scheme, xg, yd, group_lens, group_offs, ctx.a_dtype, num_cu)
        if need_db and not ctx.wgrad_fp8:
            grad_b = _high_precision_wgrad(ctx, saved.pop(0), grad_c, group_lens, group_offs, saved)
        elif need_db:
            a_col = (saved.pop(0), saved.pop(0))
            lens_w, offs_w = saved.pop(0), saved.pop(0)
            # dB[g] = A_g.T @ dC_g over group g's rows, in b's layout ([G, N, K] when trans_b).
            if ctx.fused:
                b = saved.pop(0)
                _variable_k(scheme, a_col, gcol, lens_w, offs_w, trans_c=ctx.trans_b, num_cu=num_cu, out=b.main_grad)
                grad_b = fused_dummy_grad(b)
            else:
                grad_b = _variable_k(scheme, a_col, gcol, lens_w, offs_w, trans_c=ctx.trans_b, num_cu=num_cu,
                                     out_dtype=ctx.b_dtype)
        return grad_a, grad_b, None, None, None, None, None, None, None, None, None, None, None, None


def _high_precision_wgrad(ctx, a: Tensor, grad_c: Tensor, group_lens: Tensor, group_offs: Tensor, saved: list):
    """``dB[g] = A_g.T @ dC_g`` by the high-precision variable-K GEMM (dC cast to a's dtype), in b's
    layout and dtype, or accumulated into ``b.main_grad`` under the fused pattern."""
    a = a.contiguous()
    g = grad_c if grad_c.dtype == a.dtype else grad_c.to(a.dtype)
    if ctx.fused:
        b = saved.pop(0)
        launch_hp.grouped_gemm_variable_k(a, g, group_lens, group_offs, trans_c=ctx.trans_b, num_cu=ctx.num_cu,
                                          out=b.main_grad)
        return fused_dummy_grad(b)
    grad_b = launch_hp.grouped_gemm_variable_k(a, g, group_lens, group_offs, trans_c=ctx.trans_b, num_cu=ctx.num_cu)
    return grad_b if grad_b.dtype == ctx.b_dtype else grad_b.to(ctx.b_dtype)


def _run(a, b, group_lens, group_offs, trans_b, out_dtype, scheme: Scheme, num_cu, fuse_bgrad_accum_pattern,
         weight_cache, wgrad_fp8: bool = True):
    cache = op_cache(weight_cache)
    require_bool("wgrad_fp8", wgrad_fp8)
    a, a_t = unpair("a", a)
    b, b_t = unpair("b", b)
    check_operand("a", a, 2, scheme, grouped_ok=True)
    check_operand("b", b, 3, scheme)
    if isinstance(a, QuantizedTensor) and _grouped_layout(scheme):
        raise ValueError(f"a: a pre-quantized a is supported for TENSORWISE and ROWWISE only; "
                         f"{'FP4' if scheme.fp4 else scheme.granularity.value} quantizes the tokens in "
                         f"group-dependent layouts inside the op")
    if isinstance(a, QuantizedTensor) and not wgrad_fp8:
        raise ValueError("wgrad_fp8: False needs a high-precision a (its weight gradient reads a unquantized); "
                         "got a pre-quantized a")
    require_bool("trans_b", trans_b)
    check_grouped_inner_dim(a, b, trans_b)
    g = b.shape[0]
    check_group_lens(group_lens, g)
    offs_given = group_offs is not None
    if offs_given:
        check_group_offs(group_offs, g)
    else:
        group_offs = grouped_gemm_compute_offs(group_lens)
    check_num_cu_schedule(num_cu, "static")
    out_dtype = resolve_out_dtype(out_dtype, a, b)
    for name, x, x_t, fwd_dim in (("a", a, a_t, 1), ("b", b, b_t, 1 if trans_b else 0)):
        if isinstance(x, QuantizedTensor):
            check_quantized(name, x, x_t, fwd_dim)
    require_same_device(a=a, b=b, group_lens=group_lens, group_offs=group_offs)
    fused = check_pattern(fuse_bgrad_accum_pattern, b)
    if group_lens.device.type == "cpu":
        check_group_values(group_lens, group_offs if offs_given else None, a.shape[0])
    else:
        assert_group_values_async(group_lens, group_offs if offs_given else None, a.shape[0])
    if fused:
        b.grad_added_to_main_grad = True
    return _LowpGroupedGemmFunction.apply(a, b, b_t, a_t, group_lens, group_offs, trans_b, out_dtype, scheme,
                                          num_cu, fused, needs_grads(a, b, fused), cache, wgrad_fp8)


def grouped_gemm_fp8(a: Tensor | QuantizedTensor | QuantizedTensorPair, b: Tensor | QuantizedTensor | QuantizedTensorPair,
                     group_lens: Tensor, group_offs: Tensor | None = None, trans_b: bool = True,
                     out_dtype: torch.dtype | None = None, config: Float8QuantConfig | None = None,
                     num_cu: int | None = None, fuse_bgrad_accum_pattern: str | None = None, *,
                     weight_cache: WeightQuantCache | None = None, wgrad_fp8: bool = True) -> Tensor:
    """FP8 grouped GEMM with autograd: ``out_g = dequant(q(A_g)) @ dequant(q(op(B[g])))``.

    Args:
        a: ``[M_total, K]`` fp16/bf16/fp32, tokens packed by group along M (a pre-quantized
            :class:`QuantizedTensor` / pair is accepted for TENSORWISE and ROWWISE).
        b: ``[G, N, K]`` when ``trans_b`` (the default, as in Primus-Turbo: a GroupedLinear weight
            ``[G, out, in]``), else ``[G, K, N]``; fp16/bf16/fp32 or pre-quantized (3-D).
        group_lens: int64 ``[G]`` on a's device, non-negative, ``sum <= M_total``.
        group_offs: int64 ``[G + 1]``, their exclusive prefix sum; ``None`` computes it on the device.
        out_dtype: fp16/bf16/fp32; ``None`` means ``promote_types(a.dtype, b.dtype)``.
        config: :class:`Float8QuantConfig` (``None``: TENSORWISE E4M3); recipe in the module docstring.
        num_cu: ``None`` or a positive cap on compute units (a hint).
        fuse_bgrad_accum_pattern: ``None`` or ``"megatron"`` (the wgrad accumulates into
            ``b.main_grad``, any granularity).
        weight_cache: ``None`` or a :class:`~turbo_core.ops.weight_cache.WeightQuantCache`: b's
            quantized copies reused while b is unchanged, as in :func:`turbo_core.ops.gemm_fp8`.
        wgrad_fp8: ``True`` (the recipe above) or ``False``: the weight gradient by the high-precision
            variable-K GEMM on a and dC (a saved unquantized; a must not be pre-quantized), the
            forward and dgrad in FP8.

    Returns:
        ``[M_total, N]`` in ``out_dtype``; rows past ``sum(group_lens)`` are zero (and get a zero
        dgrad). The dgrad is a ``grouped_gemm_fp8`` primitive, the wgrad a variable-K one (in b's
        layout); a zero-length group gets a zero weight gradient. No host sync: group values are
        checked eagerly on the CPU, and on a GPU by a device-side assert with
        ``TURBO_DEVICE_ASSERTS=1`` (asynchronous, as in ``grouped_gemm``).
    """
    config = fp8_config(config)
    first = unpair("a", a)[0]
    scheme = fp8_scheme(config, first.device if isinstance(first, Tensor) else None)
    return _run(a, b, group_lens, group_offs, trans_b, out_dtype, scheme, num_cu, fuse_bgrad_accum_pattern,
                weight_cache, wgrad_fp8)


def grouped_gemm_fp4(a: Tensor | QuantizedTensor | QuantizedTensorPair, b: Tensor | QuantizedTensor | QuantizedTensorPair,
                     group_lens: Tensor, group_offs: Tensor | None = None, trans_b: bool = True,
                     out_dtype: torch.dtype | None = None, config: Float4QuantConfig | None = None,
                     num_cu: int | None = None, fuse_bgrad_accum_pattern: str | None = None, *,
                     weight_cache: WeightQuantCache | None = None) -> Tensor:
    """MXFP4 grouped GEMM with autograd (arguments as :func:`grouped_gemm_fp8` with a
    :class:`Float4QuantConfig`; ``a`` must be high precision). Recipe: the FP4 row of the module
    docstring; no random Hadamard transform; ``use_preshuffle=True`` is rejected. Both layouts of
    b are accepted (Primus-Turbo requires ``trans_b=True``)."""
    config = fp4_config(config)
    return _run(a, b, group_lens, group_offs, trans_b, out_dtype, fp4_scheme(config), num_cu,
                fuse_bgrad_accum_pattern, weight_cache)
