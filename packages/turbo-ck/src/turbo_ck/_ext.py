"""The compiled extension ``turbo_ck._C`` (shipped by a wheel built where hipcc and CK were found), loaded
by :class:`turbo_core.plugins.extension.Extension`. There is no build on first use: compiling the CK
instances takes minutes per arch, so it happens at wheel build time only."""

from __future__ import annotations

from turbo_ck._toolchain import NO_TOOLKIT
from turbo_core.plugins.extension import Extension

__all__ = ["EXTENSION"]


def _absent() -> str:
    return (f"{NO_TOOLKIT} when this wheel was built (the compiled extension turbo_ck._C is missing; rebuild "
            "the wheel where ROCm's hipcc and Composable Kernel's headers are installed, TURBO_CK_BUILD=1 to insist)")


EXTENSION = Extension("turbo_ck._C", absent=_absent)
