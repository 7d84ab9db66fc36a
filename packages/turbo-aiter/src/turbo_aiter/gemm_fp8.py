"""``gemm_fp8`` (ROWWISE and BLOCKWISE) over aiter's CK a8w8 GEMMs.

aiter functions called (amd-aiter 0.1.7.post2.dev18):

* ``aiter.gemm_a8w8(XQ, WQ, x_scale, w_scale, bias=None, dtype=...)``: ``Y[M, N] = (XQ[M, K] *
  x_scale[M, 1]) @ (WQ[N, K] * w_scale[1, N])^T``, fp32 scales, fp32 accumulation, bf16/fp16 out.
* ``aiter.gemm_a8w8_blockscale(XQ, WQ, x_scale, w_scale, dtype=...)``: the same with
  ``x_scale [M, K/128]`` (1x128 blocks along K, row-major) and ``w_scale [N/128, K/128]`` (128x128
  tiles of WQ, row-major): the layouts of the bundled CK ``DeviceGemmMultiD_ABScale`` with A
  row-major and B column-major (``MakeAScaleGridDesciptor_M_K`` / ``MakeBScaleGridDesciptor_N_K``).

Both operands are aiter's arch FP8 dtype (``aiter.dtypes.fp8``): ``float8_e4m3fnuz`` on gfx942,
``float8_e4m3fn`` on gfx950; XQ and WQ K-contiguous ("NT"). turbo's other layouts are served by
copying ``op(A)`` / ``op(B)^T`` to that form (an FP8 copy of the operand) and transposing scales to
match; ``trans_c`` transposes the result (a copy). Declined: TENSORWISE and MX_BLOCKWISE (other
aiter entry points), E5M2 and HYBRID pairs, fp32 results, accumulation into ``out`` (no beta=1
epilogue), BLOCKWISE with a block size other than 128, K not a multiple of 128 (BLOCKWISE), and b
scaled in 1x128 blocks (aiter takes 128x128 weight tiles).
"""

from __future__ import annotations

import torch

from turbo_aiter import library
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, cdiv, gemm_fp8_dims
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.low_precision import as_granularity

__all__ = [
    "BLOCK",
    "blockwise_operands",
    "can_handle",
    "decline_reason",
    "gemm_fp8",
    "nt_operands",
    "rowwise_scales",
]

#: aiter's blockscale GEMM: 1x128 blocks for A, 128x128 tiles for B.
BLOCK = 128
_OUT_DTYPES = (torch.bfloat16, torch.float16)
#: CK's FP8 GEMM instances load K in vectors of 16 values: a conservative bound for ROWWISE.
ROWWISE_K_MULTIPLE = 16


def _k_dims(args: GemmFp8Args) -> tuple[int, int]:
    """The dims K runs along in the stored a and b (as negative indices)."""
    return (-2 if args.trans_a else -1), (-1 if args.trans_b else -2)


def decline_reason(args: GemmFp8Args, arch: str | None) -> str | None:
    """Why aiter's a8w8 GEMMs decline these arguments on ``arch`` (metadata only), or ``None``."""
    gran = as_granularity(args.granularity, "granularity")
    if gran not in (G.ROWWISE, G.BLOCKWISE):
        return f"AITER gemm_fp8 serves ROWWISE and BLOCKWISE (aiter's a8w8 GEMMs), not {gran.value}"
    want = library.fp8_dtype(arch)
    if want is None:
        return f"AITER gemm_fp8: no aiter FP8 GEMM for arch {arch} (gfx942 and gfx950 only)"
    for name, t in (("a", args.a), ("b", args.b)):
        if t.dtype != want:
            return f"AITER gemm_fp8 ({arch}): aiter's a8w8 GEMMs take {want} operands on {arch}; {name} is {t.dtype}"
    if args.out is not None:
        return "AITER gemm_fp8: accumulation into out (beta=1) not served: aiter's a8w8 GEMMs have no beta epilogue"
    if args.out_dtype not in _OUT_DTYPES:
        return f"AITER gemm_fp8 ({arch}): aiter's a8w8 GEMMs write bf16/fp16, not {args.out_dtype}"
    for name, s in (("a_scale_inv", args.a_scale_inv), ("b_scale_inv", args.b_scale_inv)):
        if s.dtype != torch.float32:
            return f"AITER gemm_fp8: {name} must be fp32 for aiter, got {s.dtype}"
    _, _, k = gemm_fp8_dims(args)
    if gran == G.ROWWISE:
        if k % ROWWISE_K_MULTIPLE:
            return f"AITER gemm_fp8 ROWWISE: K={k} is not a multiple of {ROWWISE_K_MULTIPLE} (CK vector loads)"
        return None
    if args.block_size != BLOCK:
        return f"AITER gemm_fp8 BLOCKWISE: aiter's blockscale GEMM uses blocks of {BLOCK}, got {args.block_size}"
    if k % BLOCK:
        return f"AITER gemm_fp8 BLOCKWISE: K={k} is not a multiple of {BLOCK} (aiter's scale blocks along K)"
    a_k, b_k = _k_dims(args)
    if blockwise_layout(tuple(args.a.shape), tuple(args.a_scale_inv.shape), a_k, BLOCK) is None:
        return "AITER gemm_fp8 BLOCKWISE: a_scale_inv is neither 1x128 blocks along K nor 128x128 tiles"
    b_kind = blockwise_layout(tuple(args.b.shape), tuple(args.b_scale_inv.shape), b_k, BLOCK)
    n = args.b.shape[0] if args.trans_b else args.b.shape[1]
    if b_kind != "2d" and not (b_kind == "1d" and n == 1):
        return "AITER gemm_fp8 BLOCKWISE: b must be scaled in 128x128 tiles (aiter's w_scale), not 1x128 blocks"
    return None


def can_handle(args: GemmFp8Args) -> str | None:
    reason = library.gpu_reason(args.a, "gemm_fp8")
    if reason:
        return reason
    return decline_reason(args, library.arch_of(args.a))


def nt_operands(args: GemmFp8Args) -> tuple[torch.Tensor, torch.Tensor]:
    """``(XQ [M, K], WQ [N, K])``, both K-contiguous: ``op(A)`` and ``op(B)^T`` (views when the
    stored layout already is, else contiguous copies)."""
    x = args.a.t() if args.trans_a else args.a
    w = args.b if args.trans_b else args.b.t()
    return (x if x.stride(-1) == 1 else x.contiguous()), (w if w.stride(-1) == 1 else w.contiguous())


def rowwise_scales(args: GemmFp8Args) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_scale [M, 1], w_scale [1, N])`` fp32 contiguous from turbo's ROWWISE scales
    (a: ``[M, 1]`` or ``[1, M]`` when trans_a; b: ``[1, N]`` or ``[N, 1]`` when trans_b)."""
    m, n, _ = gemm_fp8_dims(args)
    return (args.a_scale_inv.reshape(m, 1).contiguous().float(),
            args.b_scale_inv.reshape(1, n).contiguous().float())


def blockwise_operands(args: GemmFp8Args) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_scale [M, K/128], w_scale [cdiv(N,128), K/128])`` fp32 contiguous, from turbo's
    BLOCKWISE scales.

    a with 1x128 blocks along K: transposed when trans_a. a with 128x128 tiles of the stored
    matrix: each tile's scale repeated on its 128 rows of ``op(A)`` (exact: every element of a
    row's 1x128 block lies in that tile). b in 128x128 tiles of the stored matrix: transposed when
    b is stored ``[K, N]``.
    """
    m, n, k = gemm_fp8_dims(args)
    a_k, b_k = _k_dims(args)
    sa, sb = args.a_scale_inv.float(), args.b_scale_inv.float()
    if blockwise_layout(tuple(args.a.shape), tuple(sa.shape), a_k, BLOCK) == "1d":
        xs = sa.t() if args.trans_a else sa
    else:
        tiles = sa.t() if args.trans_a else sa  # [cdiv(M), cdiv(K)]
        xs = tiles.repeat_interleave(BLOCK, dim=0)[:m]
    if blockwise_layout(tuple(args.b.shape), tuple(sb.shape), b_k, BLOCK) == "1d":  # n == 1: one tile column
        ws = (sb if args.trans_b else sb.t()).reshape(1, cdiv(k, BLOCK))
    else:
        ws = sb if args.trans_b else sb.t()
    return xs.contiguous(), ws.contiguous()


def gemm_fp8(args: GemmFp8Args) -> torch.Tensor:
    """``dequant(op(A)) @ dequant(op(B))`` as ``[M, N]`` (``[N, M]`` when trans_c) in ``out_dtype``."""
    m, n, k = gemm_fp8_dims(args)
    dtype = args.out_dtype
    if m == 0 or n == 0 or k == 0:
        shape = (n, m) if args.trans_c else (m, n)
        return torch.zeros(shape, dtype=dtype, device=args.a.device)
    aiter = library.load()
    x, w = nt_operands(args)
    if as_granularity(args.granularity, "granularity") == G.ROWWISE:
        xs, ws = rowwise_scales(args)
        y = aiter.gemm_a8w8(x, w, xs, ws, None, dtype)
    else:
        xs, ws = blockwise_operands(args)
        y = aiter.gemm_a8w8_blockscale(x, w, xs, ws, dtype)
    return y.t().contiguous() if args.trans_c else y
