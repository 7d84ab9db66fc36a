"""The integer codes that cross into the C++ extension (``csrc/turbo_blaslt.cpp`` has the same
enums): dtypes, scale modes, epilogues. Pure: imports torch only for the dtype objects. The dtype codes
are the ones both compiled backends share (``turbo_core.plugins.extension.DTYPE_CODES``)."""

from __future__ import annotations

import torch

from turbo_core.plugins.extension import DTYPE_CODES

__all__ = ["DTYPE_CODES", "EPILOGUE_CODES", "FP8_CODES", "SCALE_BLOCK128", "SCALE_CODES", "SCALE_NONE",
           "SCALE_OUTER_VEC", "SCALE_SCALAR", "SCALE_VEC128", "dtype_code"]

FP8_CODES = frozenset({3, 4, 5, 6})

#: Scale modes of an operand (``A_SCALE_MODE`` / ``B_SCALE_MODE``): no scale pointer, one fp32 scalar,
#: one fp32 per outer-dim row (``OUTER_VEC_32F``), one fp32 per 1x128 block along K (``VEC128_32F``),
#: one fp32 per 128x128 tile (``BLK128x128_32F``).
SCALE_NONE, SCALE_SCALAR, SCALE_OUTER_VEC, SCALE_VEC128, SCALE_BLOCK128 = -1, 0, 1, 2, 3
SCALE_CODES = {"none": SCALE_NONE, "scalar": SCALE_SCALAR, "outer_vec": SCALE_OUTER_VEC, "vec128": SCALE_VEC128,
               "blk128x128": SCALE_BLOCK128}

#: Epilogues: the library's DEFAULT, BIAS, GELU, GELU_BIAS.
EPILOGUE_CODES = {None: 0, "bias": 1, "gelu": 2, "gelu_bias": 3}


def dtype_code(dtype: torch.dtype) -> int | None:
    """The extension's code for ``dtype``, or ``None`` when it has none."""
    return DTYPE_CODES.get(dtype)
