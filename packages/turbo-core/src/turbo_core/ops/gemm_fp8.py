"""``gemm_fp8`` and ``gemm_fp4``: low-precision dense GEMM with autograd.

Every pass is composed of primitives: the forward quantizes ``a`` and ``b`` (``quantize_fp8`` /
``quantize_fp4`` and their ``_with_trans`` forms, through ``turbo_core.ops.quantization``) and runs
one ``gemm_fp8`` / ``gemm_fp4`` primitive; the backward quantizes ``grad_out`` (E5M2 under HYBRID)
and runs the dgrad and wgrad as two more low-precision GEMM primitives.

The quantization recipe (what each GEMM multiplies; every operand is scaled along that GEMM's
contraction dim, so the scales factor out of the sums):

============  ======================================================================================
granularity   operands of the forward, dgrad (``dA = dC @ op(B).T``) and wgrad (``dB = op(A).T @ dC``)
============  ======================================================================================
TENSORWISE    a, b and dC quantized once per tensor; each used in both of its GEMMs
ROWWISE       every operand quantized per row/column along the contraction dim of the GEMM using it:
              a along K (forward) and along M (wgrad), b along K and along N (dgrad), dC along N
              (dgrad) and along M (wgrad): two quantizations of the high-precision tensor each
BLOCKWISE     a and dC: 1 x bs blocks along each GEMM's contraction dim (a row copy and a column
              copy); b: bs x bs tiles (one quantization, valid both ways)
MX_BLOCKWISE  a and dC: 1x32 blocks along each contraction dim (row and col-wise copies, the
              col-wise one transposed by the quantizer, so every GEMM is NT); b: 32x32 tiles, row
              and col-wise copies (equal values both ways); E8M0 scales, K padded to 128
FP4 (MX)      as MX_BLOCKWISE with packed E2M1 data; ``use_gradient_sr`` rounds dC stochastically
============  ======================================================================================

The second (column) copies are made from the high-precision tensor in the forward and only when
the corresponding gradient is needed; only FP8/FP4 data and scales are saved for the backward.
ROWWISE column copies of 2-D operands are quantized from the transposed view
(``quantize_fp8(x.t(), axis=-1)``) and so stored transposed, like MX's: every ROWWISE GEMM of the
backward gets operands contiguous along its contraction dim (what cuBLASLt's and Hopper's FP8
kernels take) and no backend re-lays them. TENSORWISE copies, BLOCKWISE's ``_with_trans`` column
copies, 2-D weight tiles and the grouped op's weights keep the stored layout; a backend that needs
K-major operands re-lays those for the dgrad/wgrad.
Pre-quantized operands (:class:`QuantizedTensor`) are used as given; their second copy is the
``data_t`` of a :class:`QuantizedTensorPair`, else the tensor itself (TENSORWISE and 2-D tiles serve
both directions) or its dequantize + requantize along the other dim (what ``t()`` does).
With ``weight_cache=`` (what ``Float8Linear`` and ``GroupedLinear`` pass), b's copies are made once
per weight update and reused by later calls (``turbo_core.ops.weight_cache`` gives the rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from turbo_core.dispatch.launch import gemm_fp8 as launch
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    check_inner_dim,
    require_bool,
    require_dtype,
    require_same_device,
)
from turbo_core.low_precision import (
    Float4QuantConfig,
    Float8QuantConfig,
    ScalingGranularity,
    ScalingRecipe,
    float4_e2m1_dtype,
    fp8_dtype_for,
    is_fp4_dtype,
    is_fp8_dtype,
)
from turbo_core.ops import quantization as quant
from turbo_core.ops._grad_accum import check_pattern, dummy_grad
from turbo_core.ops.weight_cache import WeightQuantCache, check_cache, quantize_weight
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["gemm_fp4", "gemm_fp8"]

G = ScalingGranularity
Tensor = torch.Tensor


# -- quantized operands --------------------------------------------------------------------------------

class Operand(NamedTuple):
    """A quantized GEMM operand: ``data``/``scale`` as the primitive takes them, and ``t``: whether
    ``data`` holds the transpose of the logical matrix it stands for (the primitive's trans flag)."""

    data: Tensor
    scale: Tensor
    t: bool


class Quantized(NamedTuple):
    """One quantization of a stored tensor: ``dim`` is the stored dim (0 or 1 of the last two) its
    scales run along, ``None`` when it serves both (TENSORWISE, 2-D tiles); ``transposed``: the
    data holds the stored tensor's transpose (MX col-wise)."""

    data: Tensor
    scale: Tensor
    dim: int | None
    transposed: bool


@dataclass(frozen=True)
class Scheme:
    """What a low-precision GEMM op quantizes with (resolved from the config for the device)."""

    granularity: G
    block_size: int | None
    fwd_dtype: torch.dtype
    bwd_dtype: torch.dtype
    fp4: bool = False
    gradient_sr: bool = False

    @property
    def mx(self) -> bool:
        return self.granularity == G.MX_BLOCKWISE

    def per_tensor(self, role: str) -> bool:
        """Whether one quantization serves every direction for ``role``."""
        return self.granularity == G.TENSORWISE or (self.granularity == G.BLOCKWISE and role == "weight")


@torch.compiler.assume_constant_result
def _fp8_dtypes(fmt: str, device: torch.device | None) -> tuple[torch.dtype, torch.dtype]:
    # Constant for torch.compile: the device's FP8 flavour is looked up at trace time (the lookup
    # reads GPU properties through a cache that dynamo should not trace).
    return fp8_dtype_for(fmt, device, True), fp8_dtype_for(fmt, device, False)


#: Eager calls' schemes by (format, granularity, block size, device): a few entries a process.
_schemes: dict[tuple, Scheme] = {}


def fp8_scheme(config: Float8QuantConfig, device: torch.device | None) -> Scheme:
    """The scheme of ``config``'s current fields on ``device`` (eagerly from a memo keyed by those
    fields, so a config changed after construction gets its new scheme)."""
    if torch.compiler.is_compiling():
        fwd, bwd = _fp8_dtypes(config.format.value, device)
        return Scheme(config.granularity, config.block_size, fwd, bwd)
    key = (config.format, config.granularity, config.block_size, device)
    scheme = _schemes.get(key)
    if scheme is None:
        fwd, bwd = _fp8_dtypes(config.format.value, device)
        scheme = _schemes.setdefault(key, Scheme(config.granularity, config.block_size, fwd, bwd))
    return scheme


def fp4_scheme(config: Float4QuantConfig) -> Scheme:
    dtype = float4_e2m1_dtype()
    return Scheme(G.MX_BLOCKWISE, config.block_size, dtype, dtype, fp4=True, gradient_sr=config.use_gradient_sr)


def operand(qs: dict, dim: int, trans: bool) -> Operand:
    """The operand for a logical matrix ``L = stored.T if trans else stored`` whose GEMM contracts
    along stored dim ``dim``, from the quantizations ``qs`` (keyed by dim, or ``None``)."""
    q = qs[None] if None in qs else qs[dim]
    return Operand(q.data, q.scale, trans != q.transposed)


def _recipe(scheme: Scheme, role: str) -> ScalingRecipe:
    return ScalingRecipe(use_2d_block=role == "weight" and scheme.mx,
                         use_sr=role == "grad" and scheme.fp4 and scheme.gradient_sr)


def quantize(scheme: Scheme, x: Tensor, dims: set[int], role: str, *, k_major: bool = False,
             fused_rowwise: bool = False) -> dict:
    """Quantize the high-precision ``x`` (2-D, or 3-D grouped weights) for GEMMs contracting along
    its last-two dims ``dims`` (subset of {0, 1}). ``role``: ``"input"``, ``"weight"`` or ``"grad"``
    (``grad`` uses the backward dtype; ``weight`` uses 2-D tiles for BLOCKWISE/MX/FP4).

    ``fused_rowwise``: ROWWISE copies along both dims (without ``k_major``) from one
    ``quantize_fp8_with_trans`` call (x read twice, not three times), the same values and layouts as
    two calls. The grouped op asks for it (tokens, weights and gradients).

    ``k_major`` (the dense op; 3-D ``x`` too, for the grouped op's cached weights): a ROWWISE copy of
    ``x`` along its dim -2 is quantized from the transposed view (``quantize_fp8(x.transpose(-1, -2),
    axis=-1)``: the same values and scales, stored transposed), so the GEMM contracting along that dim
    gets it K-contiguous and no backend re-lays it (cuBLASLt and Hopper's FP8 MMA take only K-major
    operands); writing that layout in the quantizer costs less than a backend's copy (the ``gemm-fp8``
    suite measures the op). BLOCKWISE keeps its layout: its row and column copies come from one read
    (``quantize_fp8_with_trans``), which two K-major quantizations would cost more than. The grouped op
    asks for ``k_major`` only for a ROWWISE weight it quantizes into a weight cache, once for every
    micro-batch of a step: then the backend's transpose of the FP8 weight leaves every micro-batch's
    dgrad. Quantized per call, a K-major dgrad copy saved that transpose but measured no faster, so
    such weights keep their stored layout; its token copies keep the layouts its variable-K primitives
    take."""
    dtype = scheme.bwd_dtype if role == "grad" else scheme.fwd_dtype
    gran, bs = scheme.granularity, scheme.block_size
    if scheme.per_tensor(role):
        recipe = ScalingRecipe(use_2d_block=gran == G.BLOCKWISE)
        q, s = quant.quantize_fp8(x, dtype, gran, block_size=bs, scaling_recipe=recipe)
        return {None: Quantized(q, s, None, False)}
    recipe = _recipe(scheme, role)
    both = dims == {0, 1} and (scheme.mx or (gran == G.BLOCKWISE and x.dim() == 2)
                               or (fused_rowwise and gran == G.ROWWISE and not k_major))
    if both:
        fn = quant.quantize_fp4_with_trans if scheme.fp4 else quant.quantize_fp8_with_trans
        q_row, s_row, q_col, s_col = fn(x, dtype, gran, block_size=bs, scaling_recipe=recipe,
                                        scaling_recipe_for_trans=recipe)
        return {1: Quantized(q_row, s_row, 1, False), 0: Quantized(q_col, s_col, 0, scheme.mx)}
    out = {}
    fn = quant.quantize_fp4 if scheme.fp4 else quant.quantize_fp8
    for d in sorted(dims):
        flip = d == 0 and k_major and gran == G.ROWWISE and x.dim() in (2, 3)  # from the transposed view
        q, s = fn(x.transpose(-1, -2) if flip else x, dtype, gran, axis=-1 if flip else d - 2, block_size=bs,
                  scaling_recipe=recipe)
        out[d] = Quantized(q, s, d, flip or (scheme.mx and d == 0))
    return out


def _qt_entry(qt: QuantizedTensor, transposed_view: bool) -> tuple[int | None, Quantized]:
    """A :class:`Quantized` of the stored tensor from ``qt`` (``transposed_view``: ``qt`` holds the
    stored tensor's transpose, as ``data_t`` / ``t()`` do)."""
    axis = qt.quantized_axis
    if qt.granularity == G.TENSORWISE or axis is None:
        return None, Quantized(qt.qdata, qt.scale_inv, None, transposed_view)
    rel = axis - (qt.dim() - 2)  # 0 or 1 within the last two dims of qt
    mx_col = qt.granularity == G.MX_BLOCKWISE and rel == 0
    dim = (1 - rel) if transposed_view else rel
    return dim, Quantized(qt.qdata, qt.scale_inv, dim, transposed_view != mx_col)


def check_quantized(name: str, qt: QuantizedTensor, qt_t: QuantizedTensor | None, fwd_dim: int) -> None:
    """A pre-quantized operand must serve the forward GEMM (scales along ``fwd_dim`` of its last
    two dims, unless TENSORWISE / 2-D tiles); its ``data_t`` must be quantized along the other dim."""
    key, _ = _qt_entry(qt, False)
    if key is not None and key != fwd_dim:
        raise ValueError(f"{name}: a pre-quantized {name} must be quantized along its dim {fwd_dim - 2} (the "
                         f"contraction dim of the forward GEMM), got quantized_axis={qt.quantized_axis}")
    if qt_t is not None and key is not None:
        key_t, _ = _qt_entry(qt_t, True)
        if key_t not in (None, 1 - fwd_dim):
            raise ValueError(f"{name}: data_t must be quantized along its last dim (the transpose of {name} "
                             f"quantized along the backward GEMM's contraction dim), got quantized_axis="
                             f"{qt_t.quantized_axis}")


def from_quantized(qt: QuantizedTensor, qt_t: QuantizedTensor | None, fwd_dim: int, need: set[int]) -> dict:
    """The quantizations of a pre-quantized operand (checked by :func:`check_quantized`): ``qt``
    serves the forward (along ``fwd_dim``); the other direction, when in ``need``, is ``qt_t``, or
    else ``qt`` dequantized and quantized again along the other dim with its own dtype, block size
    and recipe (what ``qt.t()`` does, without building a tensor subclass, so torch.compile can
    trace it)."""
    key, q = _qt_entry(qt, False)
    qs = {key: q}
    if key is None or not (need - {fwd_dim}):
        return qs
    other = 1 - fwd_dim
    if qt_t is not None:
        qs[other] = _qt_entry(qt_t, True)[1]
        return qs
    fp4 = is_fp4_dtype(qt.real_dtype)
    fn = quant.quantize_fp4 if fp4 else quant.quantize_fp8
    data, scale = fn(qt.dequantize(torch.float32), qt.real_dtype, qt.granularity, axis=other - 2,
                     block_size=qt.block_size, scaling_recipe=qt.scaling_recipe)
    qs[other] = Quantized(data, scale, other, qt.granularity == G.MX_BLOCKWISE and other == 0)
    return qs


# -- validation helpers (shared with the grouped op) ---------------------------------------------------

def unpair(name: str, x: object) -> tuple[object, QuantizedTensor | None]:
    if isinstance(x, QuantizedTensorPair):
        return x.data, x.data_t
    return x, None


def check_operand(name: str, x: object, ndim: int, scheme: Scheme, *, grouped_ok: bool = False) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, QuantizedTensor or QuantizedTensorPair, "
                        f"got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected a float16/bfloat16/float32 tensor (quantized inside the op), got {x.dtype}")
    if isinstance(x, QuantizedTensor):
        if x.granularity != scheme.granularity:
            raise ValueError(f"{name}: pre-quantized with {x.granularity.value}, but the config asks for "
                             f"{scheme.granularity.value}")
        bs = x.block_size
        if scheme.granularity in (G.BLOCKWISE, G.MX_BLOCKWISE) and bs != scheme.block_size:
            raise ValueError(f"{name}: pre-quantized with block_size={bs}, but the config has "
                             f"block_size={scheme.block_size}")
        ok = is_fp4_dtype(x.real_dtype) if scheme.fp4 else is_fp8_dtype(x.real_dtype)
        if not ok:
            raise TypeError(f"{name}: pre-quantized data must be {'FP4' if scheme.fp4 else 'FP8'}, got {x.real_dtype}")
        if x.is_grouped and not grouped_ok:
            raise ValueError(f"{name}: a grouped (packed-M) QuantizedTensor cannot be a dense GEMM operand")
    return x


def resolve_out_dtype(out_dtype: object, a: Tensor, b: Tensor) -> torch.dtype:
    if out_dtype is None:
        return torch.promote_types(a.dtype, b.dtype)
    require_dtype("out_dtype", out_dtype, FLOAT_DTYPES)
    return out_dtype


#: The op's config when none is given (read only here; ``fp8_config(None)`` gives callers that keep
#: a config, such as ``Float8Linear``, their own).
_DEFAULT_FP8 = Float8QuantConfig()


def fp8_config(config: object) -> Float8QuantConfig:
    if config is None:
        return Float8QuantConfig()
    if not isinstance(config, Float8QuantConfig):
        raise TypeError(f"config: expected a Float8QuantConfig or None, got {type(config).__name__}")
    return config.validate()  # fields assigned since construction must agree


def fp4_config(config: object) -> Float4QuantConfig:
    if config is None:
        return Float4QuantConfig()
    if not isinstance(config, Float4QuantConfig):
        raise TypeError(f"config: expected a Float4QuantConfig or None, got {type(config).__name__}")
    if config.use_preshuffle:
        raise ValueError("config.use_preshuffle: pre-shuffled (AITER) FP4 layouts are not supported by this op")
    return config


# -- autograd ------------------------------------------------------------------------------------------

def _mm(scheme: Scheme, x: Operand, y: Operand, *, out_dtype: torch.dtype | None = None, trans_c: bool = False,
        out: Tensor | None = None) -> Tensor:
    if scheme.fp4:
        return launch.gemm_fp4(x.data, x.scale, y.data, y.scale, trans_a=x.t, trans_b=y.t, out_dtype=out_dtype,
                               trans_c=trans_c, out=out)
    return launch.gemm_fp8(x.data, x.scale, y.data, y.scale, trans_a=x.t, trans_b=y.t, out_dtype=out_dtype,
                           granularity=scheme.granularity, block_size=scheme.block_size, trans_c=trans_c, out=out)


def _operand_dirs(x: Tensor, x_t: QuantizedTensor | None, scheme: Scheme, fwd_dim: int, need: set[int],
                  role: str, cache: WeightQuantCache | None = None) -> dict:
    if isinstance(x, QuantizedTensor):
        return from_quantized(x, x_t, fwd_dim, need)
    return quantize_weight(cache, x, (scheme, "dense"), need,
                           lambda dims: quantize(scheme, x, dims, role, k_major=True))


def _forward(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, needs, cache):
    """``(c, qa, qb, a_k, b_k)``: the forward GEMM and the quantizations it made, with the second
    copy of an operand only where ``needs`` (dgrad, wgrad) asks for it; ``a_k``/``b_k`` the stored
    dims the forward contracts along."""
    need_da, need_db = needs
    a_k = 0 if trans_a else 1
    b_k = 1 if trans_b else 0
    qa = _operand_dirs(a, a_t, scheme, a_k, {a_k} | ({1 - a_k} if need_db else set()), "input")
    qb = _operand_dirs(b, b_t, scheme, b_k, {b_k} | ({1 - b_k} if need_da else set()), "weight", cache)
    c = _mm(scheme, operand(qa, a_k, trans_a), operand(qb, b_k, trans_b), out_dtype=out_dtype)
    return c, qa, qb, a_k, b_k


class _LowpGemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, needs, cache):
        need_da, need_db = needs
        c, qa, qb, a_k, b_k = _forward(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, needs, cache)
        saved = []
        if need_da:  # dgrad's b-operand: op(B).T, contracting along N
            yd = operand(qb, 1 - b_k, not trans_b)
            saved += [yd.data, yd.scale]
            ctx.yd_t = yd.t
        if need_db:  # wgrad's a-operand: op(A).T, contracting along M
            xw = operand(qa, 1 - a_k, not trans_a)
            saved += [xw.data, xw.scale]
            ctx.xw_t = xw.t
        if fused:
            saved.append(b)
        ctx.save_for_backward(*saved)
        ctx.need = (need_da, need_db)
        ctx.trans_a, ctx.trans_b, ctx.scheme, ctx.fused = trans_a, trans_b, scheme, fused
        ctx.a_dtype, ctx.b_dtype = a.dtype, b.dtype
        return c

    @staticmethod
    def backward(ctx, grad_c):
        need_da, need_db = ctx.need
        saved = list(ctx.saved_tensors)
        scheme = ctx.scheme
        grad_c = grad_c.contiguous()
        dims = ({1} if need_da else set()) | ({0} if need_db else set())
        qg = quantize(scheme, grad_c, dims, "grad", k_major=True)
        grad_a = grad_b = None
        if need_da:
            yd = Operand(saved.pop(0), saved.pop(0), ctx.yd_t)
            # dA = dC @ op(B).T, written in a's layout ([K, M] when trans_a).
            grad_a = _mm(scheme, operand(qg, 1, False), yd, out_dtype=ctx.a_dtype, trans_c=ctx.trans_a)
        if need_db:
            xw = Operand(saved.pop(0), saved.pop(0), ctx.xw_t)
            # dB = op(A).T @ dC, written in b's layout ([N, K] when trans_b).
            if ctx.fused:
                b = saved.pop(0)
                _mm(scheme, xw, operand(qg, 0, False), trans_c=ctx.trans_b, out=b.main_grad)
                grad_b = fused_dummy_grad(b)
            else:
                grad_b = _mm(scheme, xw, operand(qg, 0, False), out_dtype=ctx.b_dtype, trans_c=ctx.trans_b)
        return grad_a, grad_b, None, None, None, None, None, None, None, None, None


def fused_dummy_grad(b: Tensor) -> Tensor:
    """b's gradient under fused accumulation: the cached dummy (``_grad_accum.dummy_grad``), or a
    fresh zero tensor while torch.compile traces (the cache's lock cannot be traced)."""
    if torch.compiler.is_compiling():
        return torch.zeros_like(b)
    return dummy_grad(b)


def op_cache(weight_cache: object) -> WeightQuantCache | None:
    """The checked ``weight_cache`` argument; ``None`` while torch.compile traces (the compiled graph
    quantizes the weight itself, and a cache object would not be traced)."""
    cache = check_cache(weight_cache)
    return None if torch.compiler.is_compiling() else cache


def needs_grads(a: Tensor, b: Tensor, fused: bool) -> tuple[bool, bool]:
    """Which gradients the backward will compute (so the forward makes only the copies they need;
    ``ctx.needs_input_grad`` does not see ``torch.no_grad``)."""
    on = torch.is_grad_enabled()
    return on and a.requires_grad, on and (b.requires_grad or fused)


def _prepare(a, b, trans_a, trans_b, out_dtype, scheme, fuse_bgrad_accum_pattern):
    a, a_t = unpair("a", a)
    b, b_t = unpair("b", b)
    check_operand("a", a, 2, scheme)
    check_operand("b", b, 2, scheme)
    require_bool("trans_a", trans_a)
    require_bool("trans_b", trans_b)
    m, k = (a.shape[1], a.shape[0]) if trans_a else (a.shape[0], a.shape[1])
    k_b, n = (b.shape[1], b.shape[0]) if trans_b else (b.shape[0], b.shape[1])
    check_inner_dim(m, k, k_b, n, trans_a, trans_b)
    out_dtype = resolve_out_dtype(out_dtype, a, b)
    require_same_device(a=a, b=b)
    for name, x, x_t, fwd_dim in (("a", a, a_t, 0 if trans_a else 1), ("b", b, b_t, 1 if trans_b else 0)):
        if isinstance(x, QuantizedTensor):
            check_quantized(name, x, x_t, fwd_dim)
    fused = check_pattern(fuse_bgrad_accum_pattern, b)
    return a, a_t, b, b_t, out_dtype, fused


def gemm_fp8(a: Tensor | QuantizedTensor | QuantizedTensorPair, b: Tensor | QuantizedTensor | QuantizedTensorPair,
             trans_a: bool = False, trans_b: bool = False, out_dtype: torch.dtype | None = None,
             config: Float8QuantConfig | None = None, fuse_bgrad_accum_pattern: str | None = None, *,
             weight_cache: WeightQuantCache | None = None) -> Tensor:
    """FP8 GEMM with autograd: ``C = dequant(q(op(A))) @ dequant(q(op(B)))``.

    Args:
        a: ``[M, K]``, or ``[K, M]`` when ``trans_a``; fp16/bf16/fp32, or a pre-quantized
            :class:`QuantizedTensor` (its logical shape/dtype) / :class:`QuantizedTensorPair`.
        b: ``[K, N]``, or ``[N, K]`` when ``trans_b`` (a Linear weight ``[out, in]`` is NT); as a.
        trans_a, trans_b: operand layouts. Every layout works for every granularity (MX and the
            quantizers' col-wise copies turn each GEMM into NT; Primus-Turbo restricts ROWWISE and
            BLOCKWISE to ``trans_a=False`` and MX to NT: those calls work unchanged).
        out_dtype: fp16/bf16/fp32; ``None`` means ``torch.promote_types(a.dtype, b.dtype)``.
        config: :class:`Float8QuantConfig` (``None``: TENSORWISE E4M3). The FP8 dtypes are chosen for
            a's device at call time (FNUZ on gfx942); HYBRID quantizes a and b to E4M3 and
            ``grad_out`` to E5M2.
        fuse_bgrad_accum_pattern: ``None`` or ``"megatron"``: b's gradient is accumulated into
            ``b.main_grad`` by the wgrad GEMM (beta=1, any granularity) and a cached dummy is
            returned as b's grad (see ``turbo_core.ops._grad_accum``).
        weight_cache: ``None`` or a :class:`~turbo_core.ops.weight_cache.WeightQuantCache`: when b is
            a plain ``nn.Parameter``, its quantized copies (forward and, for the dgrad, column) are
            reused from the cache while the weight is unchanged (``_version``, storage, config,
            optimizer steps; the rule is in ``turbo_core.ops.weight_cache``). Same results, bit for bit.

    Returns:
        ``[M, N]`` in ``out_dtype``: the ``gemm_fp8`` primitive on the quantized operands (products
        accumulated in fp32 or wider, rounded once). The quantization recipe of every pass is in
        the module docstring; dgrad and wgrad come out in a's and b's (high-precision) dtype and
        layout. No host sync.

    Raises:
        TypeError / ValueError naming the argument before any kernel: config type, ranks, dtypes,
        the K match, devices, out_dtype, pre-quantized operands that do not match the config
        (granularity, block size, quantized axis), ``fuse_bgrad_accum_pattern``, ``main_grad`` and
        ``weight_cache``.
    """
    config = _DEFAULT_FP8 if config is None else fp8_config(config)
    cache = op_cache(weight_cache)
    first = unpair("a", a)[0]
    scheme = fp8_scheme(config, first.device if isinstance(first, Tensor) else None)
    a, a_t, b, b_t, out_dtype, fused = _prepare(a, b, trans_a, trans_b, out_dtype, scheme, fuse_bgrad_accum_pattern)
    if fused:
        b.grad_added_to_main_grad = True
    return _run(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, cache)


def _run(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, cache) -> Tensor:
    """The checked call: through the autograd ``Function`` when a gradient may be asked for (or
    while torch.compile traces, which sees the same graph either way), else the forward alone."""
    needs = needs_grads(a, b, fused)
    if needs[0] or needs[1] or torch.compiler.is_compiling():
        return _LowpGemmFunction.apply(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, needs, cache)
    return _forward(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, needs, cache)[0]


def gemm_fp4(a: Tensor | QuantizedTensor | QuantizedTensorPair, b: Tensor | QuantizedTensor | QuantizedTensorPair,
             trans_a: bool = False, trans_b: bool = False, out_dtype: torch.dtype | None = None,
             config: Float4QuantConfig | None = None, fuse_bgrad_accum_pattern: str | None = None, *,
             weight_cache: WeightQuantCache | None = None) -> Tensor:
    """MXFP4 GEMM with autograd: ``C = dequant(q(op(A))) @ dequant(q(op(B)))``, E2M1 values in 1x32
    blocks with E8M0 scales (a: 1x32 blocks along K; b: 32x32 tiles; ``grad_out``: 1x32 blocks,
    stochastically rounded when ``config.use_gradient_sr``). Each pass is one NT ``gemm_fp4``
    primitive (the quantizer's col-wise copies supply the transposes).

    Args are those of :func:`gemm_fp8` with a :class:`Float4QuantConfig` (``None``: the default
    one). Unlike Primus-Turbo, which always computes NT whatever the flags say, ``trans_a`` and
    ``trans_b`` are honoured. ``config.use_preshuffle=True`` is rejected (AITER layouts are a
    backend's business), and no random Hadamard transform is applied to the wgrad operands.

    Returns ``[M, N]`` in ``out_dtype`` (default ``promote_types(a.dtype, b.dtype)``); gradients in
    a's and b's dtype and layout; ``fuse_bgrad_accum_pattern="megatron"`` and ``weight_cache`` as in
    :func:`gemm_fp8`.
    """
    config = fp4_config(config)
    cache = op_cache(weight_cache)
    scheme = fp4_scheme(config)
    a, a_t, b, b_t, out_dtype, fused = _prepare(a, b, trans_a, trans_b, out_dtype, scheme, fuse_bgrad_accum_pattern)
    if fused:
        b.grad_added_to_main_grad = True
    return _run(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, cache)
