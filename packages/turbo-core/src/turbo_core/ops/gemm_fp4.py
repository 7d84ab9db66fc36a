"""Primus-Turbo's ``ops.gemm_fp4`` module: :func:`gemm_fp4` (defined with ``gemm_fp8``, whose
recipe it shares) and its autograd Function under Primus-Turbo's name, ``FP4GemmMXFunction``."""

from __future__ import annotations

import torch

from turbo_core.low_precision import Float4QuantConfig, Format, as_format, float4_e2m1_dtype
from turbo_core.ops.gemm_fp8 import _LowpGemmFunction, _prepare, fp4_config, fp4_scheme, gemm_fp4, needs_grads
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["FP4GemmMXFunction", "gemm_fp4"]


class FP4GemmMXFunction(_LowpGemmFunction):
    """The MXFP4 GEMM's autograd Function (the one :func:`gemm_fp4` runs), called with
    Primus-Turbo's arguments::

        FP4GemmMXFunction.apply(a, b, a_t, b_t, trans_a, trans_b, out_dtype, config,
                                fuse_bgrad_accum_pattern=None)

    ``a``, ``b``: high-precision tensors or :class:`QuantizedTensor`; ``a_t``, ``b_t``: ``None`` or
    the pre-quantized transposed copy of a pre-quantized ``a`` / ``b`` (used by the backward);
    ``out_dtype``: ``None`` for ``promote_types(a.dtype, b.dtype)``; ``config``: a
    :class:`Float4QuantConfig` or ``None``. Returns what ``gemm_fp4`` returns for the same
    arguments, with the same gradients (checked in the same way before any kernel runs).
    Differences from Primus-Turbo: ``trans_a``/``trans_b`` are honoured (Primus-Turbo always
    computes NT), it runs on every device (Primus-Turbo asserts gfx950), and ``forward`` /
    ``backward`` take turbo's internal arguments, so call ``apply``.
    """

    @staticmethod
    def get_fp4_dtype(format: Format | str) -> torch.dtype:
        """``torch.float4_e2m1fn_x2`` for ``Format.E2M1_X2``; ``ValueError`` for any other format."""
        if as_format(format) != Format.E2M1_X2:
            raise ValueError(f"format: FP4 is E2M1_X2, got {format!r}")
        return float4_e2m1_dtype()

    @classmethod
    def apply(cls, a: torch.Tensor | QuantizedTensor, b: torch.Tensor | QuantizedTensor,
              a_t: QuantizedTensor | None, b_t: QuantizedTensor | None, trans_a: bool, trans_b: bool,
              out_dtype: torch.dtype | None, config: Float4QuantConfig | None,
              fuse_bgrad_accum_pattern: str | None = None) -> torch.Tensor:
        config = fp4_config(config)
        scheme = fp4_scheme(config)
        pair_a = a if a_t is None else QuantizedTensorPair(a, a_t)
        pair_b = b if b_t is None else QuantizedTensorPair(b, b_t)
        a, a_t, b, b_t, out_dtype, fused = _prepare(pair_a, pair_b, trans_a, trans_b, out_dtype, scheme,
                                                    fuse_bgrad_accum_pattern)
        if fused:
            b.grad_added_to_main_grad = True
        return super().apply(a, b, a_t, b_t, trans_a, trans_b, out_dtype, scheme, fused, needs_grads(a, b, fused),
                             None)
