"""``swiglu_fwd_fp8`` / ``geglu_fwd_fp8``: the gated activation whose output comes out quantized to
FP8, ready to be the pre-quantized input of the FP8 GEMM that follows it (an MLP's down projection).

Both belong to the selection family ``glu`` (``TURBO_GLU_BACKEND`` selects them with the other GLU
primitives, per precision; ``TURBO_SWIGLU_FWD_FP8_BACKEND`` one alone), precision FP8.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.activation import ACTIVATIONS, GluFwdArgs, glu_primitive
from turbo_core.dispatch.specs.quantization import QUANTIZE_FP8, QuantizeFp8Args, fp8_scale_shape, mx_shapes
from turbo_core.dispatch.specs.validate import require_bool
from turbo_core.low_precision import ScalingGranularity, as_granularity

__all__ = ["GEGLU_FWD_FP8", "ROW_LOCAL", "SWIGLU_FWD_FP8", "GluFwdFp8Args", "glu_fp8_primitive",
           "glu_fwd_fp8_shapes"]

G = ScalingGranularity
#: The granularities whose scales a row's own pass can compute (each scale covers part of one row).
ROW_LOCAL = (G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE)


@dataclass(frozen=True, eq=False)
class GluFwdFp8Args:
    """``(q, scale_inv) = quantize_fp8(<kind>_fwd(x, probs, row_mask), out_dtype, granularity, axis=-1,
    block_size)``.

    The GLU fields (``x`` ``[T, 2H]`` with the gate in the first half, ``probs`` ``[T]`` fp32,
    ``row_mask``) are those of :class:`~turbo_core.dispatch.specs.activation.GluFwdArgs`, with its
    shapes, dtypes and rules. The quantization fields are those of ``quantize_fp8`` along the last
    dim of the ``[T, H]`` output (the contraction dim of the GEMM that reads it):

    * ``out_dtype``: an FP8 dtype (MX_BLOCKWISE: OCP only).
    * ``granularity``: ROWWISE (one scale per row), BLOCKWISE (``1 x block_size`` blocks along H) or
      MX_BLOCKWISE (``1 x 32`` blocks, E8M0 scales, H padded to 128): scales a row's own pass
      computes. TENSORWISE is not offered: its scale needs the amax of the whole output first.
    * ``block_size``: BLOCKWISE: required; MX_BLOCKWISE: 32; ROWWISE: ``None``.
    * ``store_y``: also return ``y`` in x's dtype (for a column copy quantized from it, which the
      down projection's wgrad needs in training).

    Numerics: exactly the backend's ``<kind>_fwd`` on the same arguments followed by its
    ``quantize_fp8`` of that ``y`` (x's dtype, rounded once) along axis -1: the same ``y`` bits, and
    the same ``q`` and ``scale_inv`` bits, as the two primitive calls. Inactive rows
    (``row_mask == 0``) are zero rows of ``y``: zero data and the all-zero block's scale. A backend
    fuses the two so that ``y`` need not be written and read back.

    Result: a 3-tuple ``(q, scale_inv, y)``: ``q`` and ``scale_inv`` with ``quantize_fp8``'s shapes
    for ``[T, H]`` along axis -1 (ROWWISE ``[T, H]`` / ``[T, 1]`` fp32; BLOCKWISE ``[T, H]`` /
    ``[T, cdiv(H, bs)]`` fp32; MX ``[T, H_pad]`` / ``[T, H_pad/32]`` E8M0); ``y`` ``[T, H]`` in x's
    dtype when ``store_y``, else ``None``. No output aliases an input.
    """

    x: torch.Tensor
    probs: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    block_size: int | None = None
    row_mask: torch.Tensor | None = None
    store_y: bool = False

    def glu_args(self) -> GluFwdArgs:
        return GluFwdArgs(self.x, self.probs, self.row_mask)

    def quant_args(self, y: torch.Tensor) -> QuantizeFp8Args:
        """The ``quantize_fp8`` arguments for ``y`` (or any tensor of its shape and dtype)."""
        return QuantizeFp8Args(y, self.out_dtype, as_granularity(self.granularity), -1, self.block_size)


def glu_fwd_fp8_shapes(args: GluFwdFp8Args) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of ``q`` and ``scale_inv`` (``quantize_fp8``'s for ``[T, H]`` along axis -1)."""
    shape = (args.x.shape[0], args.x.shape[1] // 2)
    gran = as_granularity(args.granularity)
    if gran == G.MX_BLOCKWISE:
        return mx_shapes(shape, -1)
    return shape, fp8_scale_shape(shape, gran, -1, args.block_size)


def _validate(args: GluFwdFp8Args, kind: str) -> None:
    glu_primitive(kind, "fwd").check_args(args.glu_args())
    gran = as_granularity(args.granularity)
    if gran not in ROW_LOCAL:
        raise ValueError(f"granularity: {kind}_fwd_fp8 takes ROWWISE, BLOCKWISE or MX_BLOCKWISE (scales within a "
                         f"row); {gran.value} needs the whole output's amax before any row is quantized")
    x = args.x
    QUANTIZE_FP8.check_args(args.quant_args(x.narrow(1, 0, x.shape[1] // 2)))
    require_bool("store_y", args.store_y)


def _validate_swiglu(args: GluFwdFp8Args) -> None:
    _validate(args, "swiglu")


def _validate_geglu(args: GluFwdFp8Args) -> None:
    _validate(args, "geglu")


def _define(kind: str) -> Primitive:
    return define_primitive(Primitive(
        name=f"{kind}_fwd_fp8",
        args_type=GluFwdFp8Args,
        precision=PrecisionType.FP8,
        family="glu",
        validate=_validate_swiglu if kind == "swiglu" else _validate_geglu,
        doc=f"{kind} forward (act = {ACTIVATIONS[kind]}) with its [T, H] output quantized to FP8 along H (ROWWISE,"
            f" BLOCKWISE 1 x bs, MX 1x32): the bits of {kind}_fwd then quantize_fp8; returns (q, scale_inv,"
            f" y or None).",
    ))


SWIGLU_FWD_FP8 = _define("swiglu")
GEGLU_FWD_FP8 = _define("geglu")

_BY_KIND = {"swiglu": SWIGLU_FWD_FP8, "geglu": GEGLU_FWD_FP8}


def glu_fp8_primitive(kind: str) -> Primitive:
    """The FP8-output forward primitive of ``kind`` (``"swiglu"`` / ``"geglu"``)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"kind: expected one of {sorted(_BY_KIND)}, got {kind!r}") from None
