"""``rmsnorm_fwd_fp8``: the RMSNorm forward whose output comes out quantized to FP8, ready to be the
pre-quantized input of the FP8 GEMM that follows the norm.

It belongs to the selection family ``rmsnorm`` (``TURBO_RMSNORM_BACKEND`` selects it with the other
RMSNorm primitives; ``TURBO_RMSNORM_FWD_FP8_BACKEND`` alone), precision FP8.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.normalization import RMSNORM_FWD, RmsNormFwdArgs
from turbo_core.dispatch.specs.quantization import QUANTIZE_FP8, QuantizeFp8Args, quantize_fp8_shapes
from turbo_core.dispatch.specs.validate import require_bool
from turbo_core.low_precision import ScalingGranularity, as_granularity

__all__ = ["RMSNORM_FWD_FP8", "RmsNormFwdFp8Args", "rmsnorm_fwd_fp8_shapes"]

G = ScalingGranularity
#: The granularities whose scales a row's own pass can compute (each scale covers part of one row).
ROW_LOCAL = (G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE)


@dataclass(frozen=True, eq=False)
class RmsNormFwdFp8Args:
    """``(q, scale_inv) = quantize_fp8(rmsnorm(x), out_dtype, granularity, axis=-1, block_size)``.

    The RMSNorm fields (``x`` ``[T, H]``, ``gamma``, ``eps``, ``zero_centered``, ``residual``) are
    those of :class:`~turbo_core.dispatch.specs.normalization.RmsNormFwdArgs`, with its shapes,
    dtypes and rules. The quantization fields are those of ``quantize_fp8`` along the last dim (the
    contraction dim of the GEMM that reads the result):

    * ``out_dtype``: an FP8 dtype (MX_BLOCKWISE: OCP only).
    * ``granularity``: ROWWISE (one scale per row), BLOCKWISE (``1 x block_size`` blocks along H) or
      MX_BLOCKWISE (``1 x 32`` blocks, E8M0 scales, H padded to 128): scales a row's own pass
      computes. TENSORWISE is not offered: its scale needs the amax of the whole output first.
    * ``block_size``: BLOCKWISE: required; MX_BLOCKWISE: 32; ROWWISE: ``None``.
    * ``store_y``: also return ``y`` in x's dtype (for a column copy quantized from it, which the
      wgrad needs in training).

    Numerics: ``y``, ``rstd`` and ``x_plus_r`` are the backend's ``rmsnorm_fwd`` on the same arguments
    (fp32 row statistics, ``y`` rounded once to x's dtype; ``x_plus_r`` the same bits). Compiled apart,
    the two kernels may sum a row in another order, so ``rstd`` may differ from a separate
    ``rmsnorm_fwd`` call in its last bit, and ``y`` by one rounding step where that moves it. ``q``
    and ``scale_inv`` are exactly the backend's ``quantize_fp8`` of the returned ``y`` along axis -1
    (the same bits). A backend fuses them so that ``y`` need not be written and read back.

    Result: a 5-tuple ``(q, scale_inv, y, rstd, x_plus_r)``: ``q`` and ``scale_inv`` with
    ``quantize_fp8``'s shapes for ``[T, H]`` along axis -1 (ROWWISE ``[T, H]`` / ``[T, 1]`` fp32;
    BLOCKWISE ``[T, H]`` / ``[T, cdiv(H, bs)]`` fp32; MX ``[T, H_pad]`` / ``[T, H_pad/32]`` E8M0);
    ``y`` ``[T, H]`` in x's dtype when ``store_y``, else ``None``; ``rstd`` ``[T]`` fp32;
    ``x_plus_r`` as in ``rmsnorm_fwd`` (``None`` without ``residual``). No output aliases an input.
    """

    x: torch.Tensor
    gamma: torch.Tensor | None
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    block_size: int | None = None
    eps: float = 1e-6
    zero_centered: bool = False
    residual: torch.Tensor | None = None
    store_y: bool = False

    def norm_args(self) -> RmsNormFwdArgs:
        return RmsNormFwdArgs(self.x, self.gamma, self.eps, self.zero_centered, self.residual)

    def quant_args(self, y: torch.Tensor) -> QuantizeFp8Args:
        """The ``quantize_fp8`` arguments for ``y`` (or any tensor of its shape and dtype)."""
        return QuantizeFp8Args(y, self.out_dtype, as_granularity(self.granularity), -1, self.block_size)


def rmsnorm_fwd_fp8_shapes(args: RmsNormFwdFp8Args) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``q`` and ``scale_inv``."""
    return quantize_fp8_shapes(args.quant_args(args.x))


def _validate(args: RmsNormFwdFp8Args) -> None:
    RMSNORM_FWD.check_args(args.norm_args())
    gran = as_granularity(args.granularity)
    if gran not in ROW_LOCAL:
        raise ValueError(f"granularity: rmsnorm_fwd_fp8 takes ROWWISE, BLOCKWISE or MX_BLOCKWISE (scales within a "
                         f"row); {gran.value} needs the whole output's amax before any row is quantized")
    QUANTIZE_FP8.check_args(args.quant_args(args.x))
    require_bool("store_y", args.store_y)


RMSNORM_FWD_FP8 = define_primitive(Primitive(
    name="rmsnorm_fwd_fp8",
    args_type=RmsNormFwdFp8Args,
    precision=PrecisionType.FP8,
    family="rmsnorm",
    validate=_validate,
    doc="RMSNorm forward with its output quantized to FP8 along H (ROWWISE, BLOCKWISE 1 x bs, MX 1x32): the"
        " bits of rmsnorm_fwd then quantize_fp8; returns (q, scale_inv, y or None, rstd, x_plus_r or None).",
))
