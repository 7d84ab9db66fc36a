"""Strategies shared by the property modules: sizes, dtypes, memory layouts, value distributions,
group lengths and the FP8/FP4 formats and granularities.

Tensors are not drawn element by element: a case draws its shapes, flags and one ``seed``, and its
tensors come from ``torch.Generator().manual_seed(seed)`` on the CPU. The falsifying case hypothesis
prints (shapes, flags, seed) therefore rebuilds the very tensors that failed.

Sizes favour the ones that break kernels: 0, 1, odd sizes, primes, and powers of two with their
neighbours (tile edges); hypothesis shrinks a failure toward the smallest of them.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from turbo_core.low_precision import E8M0_DTYPE, FLOAT4_E2M1FN_X2

__all__ = [
    "FLOAT_DTYPES",
    "FNUZ_FP8",
    "FP4",
    "FP8_PAIRS",
    "LAYOUTS",
    "OCP_FP8",
    "VALUE_KINDS",
    "dims",
    "draw_values",
    "e8m0_bytes",
    "fp4_bytes",
    "fp8_data",
    "generator",
    "group_lens",
    "lay_out",
    "offsets",
    "seeds",
]

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OCP_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FNUZ_FP8 = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
#: (a, b) element formats of an FP8 GEMM: E4M3 x E4M3, E5M2 x E5M2, the two HYBRID pairs, in OCP
#: and FNUZ flavours (both operands of one flavour).
FP8_PAIRS = tuple((a, b) for fl in (OCP_FP8, FNUZ_FP8) for a in fl for b in fl)
FP4 = FLOAT4_E2M1FN_X2

#: Memory layouts of a drawn tensor (same logical values): row-major; column-major (the last two
#: dims swapped in memory); and a strided view of a larger buffer (every other element of the last
#: dim, from storage offset 1) whose other elements hold NaN (a kernel that reads past its view
#: shows it).
LAYOUTS = ("contiguous", "transposed", "strided")
#: Value distributions of quantizer inputs: standard normal; 2**-20 and 2**20 times it (scales far
#: from 1); whole rows of zeros; a constant; mixed magnitudes (each row scaled by 2**[-8, 8]).
VALUE_KINDS = ("normal", "tiny", "huge", "zero-rows", "constant", "mixed")

_SPECIAL = (0, 1, 2, 3, 5, 7, 8, 11, 13, 16, 17, 31, 32, 33, 37, 61, 64, 65, 97, 127, 128, 129, 131, 255, 256)


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def dims(lo: int = 0, hi: int = 40) -> st.SearchStrategy[int]:
    """A size in ``[lo, hi]``: a special size (0, 1, primes, powers of two and their neighbours) or
    any other."""
    special = [d for d in _SPECIAL if lo <= d <= hi]
    ints = st.integers(lo, hi)
    return st.one_of(st.sampled_from(special), ints) if special else ints


def group_lens(max_groups: int, max_len: int, *, min_groups: int = 1, huge: int | None = None,
               multiple: int = 1) -> st.SearchStrategy[list[int]]:
    """Group lengths: ``G`` in ``[min_groups, max_groups]`` lengths in ``[0, max_len]`` (zeros
    favoured), each a multiple of ``multiple``; sometimes one group ``huge`` long (default
    ``4 * max_len``) among short ones."""
    huge = 4 * max_len if huge is None else huge

    @st.composite
    def lens(draw) -> list[int]:
        g = draw(st.integers(min_groups, max_groups))
        out = draw(st.lists(st.one_of(st.just(0), dims(0, max_len)), min_size=g, max_size=g))
        if g and draw(st.booleans()):
            out[draw(st.integers(0, g - 1))] = huge
        return [-(-v // multiple) * multiple for v in out]

    return lens()


def offsets(lens: list[int]) -> list[int]:
    """The exclusive prefix sum ``[0, l0, l0 + l1, ...]``."""
    out = [0]
    for v in lens:
        out.append(out[-1] + v)
    return out


def lay_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values in the memory ``layout`` (:data:`LAYOUTS`); a 0-D or 1-D tensor has no
    transposed layout and keeps row-major for it."""
    if layout == "contiguous" or t.dim() == 0:
        return t.contiguous()
    if layout == "transposed":
        if t.dim() < 2:
            return t.contiguous()
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided":  # the elements between the view's hold NaN: nothing may read them
        shape = (*t.shape[:-1], 2 * t.shape[-1] + 1)
        fill = float("nan") if t.is_floating_point() else 0
        buf = torch.full(shape, fill, dtype=torch.float32, device=t.device).to(t.dtype)
        view = buf[..., 1::2]
        view.copy_(t)
        return view
    raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")


def draw_values(shape: tuple[int, ...], kind: str, g: torch.Generator) -> torch.Tensor:
    """fp32 values of ``shape`` from distribution ``kind`` (:data:`VALUE_KINDS`)."""
    x = torch.randn(shape, generator=g)
    if kind == "tiny":
        return x * 2.0**-20
    if kind == "huge":
        return x * 2.0**20
    if kind == "constant":
        return torch.full(shape, float(torch.randn((), generator=g)) * 3)
    if kind == "zero-rows" and len(shape) >= 1 and x.numel():
        rows = torch.rand(shape[:-1], generator=g) < 0.5
        return x.masked_fill(rows.unsqueeze(-1), 0.0)
    if kind == "mixed" and len(shape) >= 1 and x.numel():
        exps = torch.randint(-8, 9, shape[:-1], generator=g).to(torch.float32)
        return x * torch.exp2(exps).unsqueeze(-1)
    return x * 3


def fp8_data(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """FP8 values of ``dtype``: a normal sample times 3 rounded to the format (finite: far below
    its largest value), so GEMM operands need no quantizer."""
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def e8m0_bytes(shape: tuple[int, ...], g: torch.Generator, lo: int = 121, hi: int = 133) -> torch.Tensor:
    """E8M0 scales ``2**(byte - 127)`` with bytes in ``[lo, hi]``, in torch's E8M0 dtype (uint8 on
    a torch without one)."""
    b = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int32).to(torch.uint8)
    return b.view(E8M0_DTYPE) if E8M0_DTYPE is not None else b


def fp4_bytes(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Packed E2M1 data: every byte value (two codes each, both signs and zeros included)."""
    return torch.randint(0, 256, shape, generator=g, dtype=torch.int32).to(torch.uint8).view(FP4)
