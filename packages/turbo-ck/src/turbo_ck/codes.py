"""Integer codes crossing into ``turbo_ck._C`` (``csrc/ck_problem.h`` has the same enums). Pure. The dtype
codes are the ones both compiled backends share (``turbo_core.plugins.extension.DTYPE_CODES``)."""

from __future__ import annotations

import torch

from turbo_core.plugins.extension import DTYPE_CODES

__all__ = ["ARCH_CODES", "ARCH_FP8", "DTYPE_CODES", "KIND_BLOCKWISE", "KIND_PLAIN", "KIND_ROWWISE", "arch_code"]

#: What a GEMM applies: nothing (16-bit), per-row/per-column fp32 vectors, 1x128 x 128x128 blocks.
KIND_PLAIN, KIND_ROWWISE, KIND_BLOCKWISE = 0, 1, 2
#: arch -> the ``arch`` argument of ``_C.gemm``.
ARCH_CODES = {"gfx942": 942, "gfx950": 950}
#: arch -> the FP8 dtypes its instances read (CK's f8/bf8 types there): gfx942 FNUZ, gfx950 OCP.
ARCH_FP8 = {"gfx942": (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz),
            "gfx950": (torch.float8_e4m3fn, torch.float8_e5m2)}


def arch_code(name: str) -> str | None:
    """``"gfx942"``/``"gfx950"`` from a device's ``gcnArchName`` (``"gfx942:sramecc+:xnack-"``), else None."""
    base = name.split(":", 1)[0].strip()
    return base if base in ARCH_CODES else None
