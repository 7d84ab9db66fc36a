"""The tuning-database keys of the tuned primitives, ``gemm`` and ``gemm_fp8``, and random
arguments of a key (``turbo tune --check`` re-times stored entries with them).

Key format: ``turbo_core.tuning.keys``. Importing this module registers both primitives with
:func:`turbo_core.tuning.register_key` (``turbo_core.dispatch`` imports it): the tuning layer
reads keys through that registry and never imports the specs.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, blockwise_layout, gemm_fp8_dims
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.low_precision import ScalingRecipe, as_granularity
from turbo_core.platform import Platform
from turbo_core.tuning.keys import Key, arch_of, dtype_name, dtype_of, register_key

__all__ = ["gemm_args_for", "gemm_fp8_args_for", "gemm_fp8_key", "gemm_key"]

_PLAIN = ScalingRecipe()


def gemm_key(args: GemmArgs, platform: Platform) -> Key:
    """The key of a ``gemm`` call (:class:`GemmArgs`)."""
    layout = _layout_flags(args.trans_a, args.trans_b, args.trans_c, args.out is not None)
    return Key(arch_of(platform), gemm_dims(args), (dtype_name(args.a.dtype), dtype_name(args.result_dtype)), layout)


def _layout_flags(trans_a: bool, trans_b: bool, trans_c: bool, acc: bool) -> str:
    return ("T" if trans_a else "N") + ("T" if trans_b else "N") + ("C" if trans_c else "") + ("+acc" if acc else "")


def _parse_layout(layout: str) -> tuple[bool, bool, bool, bool]:
    """``(trans_a, trans_b, trans_c, acc)`` of a GEMM layout string (``ValueError`` naming it)."""
    acc = layout.endswith("+acc")
    flags = layout.removesuffix("+acc")
    if len(flags) not in (2, 3) or any(c not in "NT" for c in flags[:2]) or flags[2:] not in ("", "C"):
        raise ValueError(f"key.layout: expected NN/NT/TN/TT, optionally with C and +acc, got {layout!r}")
    return flags[0] == "T", flags[1] == "T", flags[2:] == "C", acc


def gemm_fp8_key(args: GemmFp8Args, platform: Platform) -> Key:
    """The key of a ``gemm_fp8`` call (``GemmFp8Args``): metadata only (BLOCKWISE reads the scales'
    shapes to tell 1-D from 2-D blocks)."""
    gran = as_granularity(args.granularity, "granularity")
    scaling = {G.TENSORWISE: "tensorwise", G.ROWWISE: "rowwise", G.MX_BLOCKWISE: "mx"}.get(gran)
    if scaling is None:
        bs = args.block_size or 128
        la = blockwise_layout(tuple(args.a.shape), tuple(args.a_scale_inv.shape), -2 if args.trans_a else -1, bs)
        lb = blockwise_layout(tuple(args.b.shape), tuple(args.b_scale_inv.shape), -1 if args.trans_b else -2, bs)
        scaling = f"blockwise-{la}{lb}" + ("" if bs == 128 else f"-{bs}")
    layout = _layout_flags(args.trans_a, args.trans_b, args.trans_c, args.out is not None) + "/" + scaling
    return Key(arch_of(platform), gemm_fp8_dims(args),
               (dtype_name(args.a.dtype), dtype_name(args.b.dtype), dtype_name(args.result_dtype)), layout)


def gemm_fp8_args_for(key: Key, device: str, generator: torch.Generator) -> GemmFp8Args:
    """Random ``GemmFp8Args`` of a gemm_fp8 key: normal bf16 operands quantized by the
    ``quantize_fp8`` primitive at the key's scaling (BLOCKWISE ``1d``/``2d`` per operand). MX keys
    are not built."""
    if len(key.shape) != 3 or len(key.dtypes) != 3:
        raise ValueError(f"key: a gemm_fp8 key has shape (M, N, K) and dtypes (a, b, result), got {key}")
    flags, _, scaling = key.layout.partition("/")
    ta, tb, tc, acc = _parse_layout(flags)
    m, n, k = key.shape
    da, db, out_dt = (dtype_of(d) for d in key.dtypes)
    a = torch.randn(*((k, m) if ta else (m, k)), device=device, generator=generator).to(torch.bfloat16)
    b = torch.randn(*((n, k) if tb else (k, n)), device=device, generator=generator).to(torch.bfloat16)
    ax_a, ax_b = (-2 if ta else -1), (-1 if tb else -2)  # each operand's contraction dim
    block = None
    if scaling == "tensorwise":
        gran = G.TENSORWISE
        qa, sa = _quantize(a, da, gran, None)
        qb, sb = _quantize(b, db, gran, None)
    elif scaling == "rowwise":
        gran = G.ROWWISE
        qa, sa = _quantize(a, da, gran, ax_a)
        qb, sb = _quantize(b, db, gran, ax_b)
    elif scaling.startswith("blockwise-") and scaling[10:14] in ("1d1d", "1d2d", "2d1d", "2d2d"):
        gran, rest = G.BLOCKWISE, scaling[14:]
        block = int(rest[1:]) if rest.startswith("-") and rest[1:].isdigit() else 128
        if rest not in ("", f"-{block}"):
            raise ValueError(f"key.layout: bad block size in {key.layout!r}")

        def q(x, dt, kind, axis):
            if kind == "2d":
                return _quantize(x, dt, gran, None, block, ScalingRecipe(use_2d_block=True))
            return _quantize(x, dt, gran, axis, block)

        qa, sa = q(a, da, scaling[10:12], ax_a)
        qb, sb = q(b, db, scaling[12:14], ax_b)
    else:
        raise ValueError(f"key.layout: expected a scaling of tensorwise, rowwise or blockwise-<1d|2d><1d|2d> "
                         f"after '/', got {key.layout!r}")
    out = torch.zeros(*((n, m) if tc else (m, n)), device=device, dtype=out_dt) if acc else None
    return GemmFp8Args(qa, sa, qb, sb, trans_a=ta, trans_b=tb, out_dtype=None if acc else out_dt, granularity=gran,
                       block_size=block, trans_c=tc, out=out)


def gemm_args_for(key: Key, device: str, generator: torch.Generator) -> GemmArgs:
    """Random ``GemmArgs`` of a gemm key's shape, dtypes and layout (for re-timing a stored entry)."""
    if len(key.shape) != 3 or len(key.dtypes) != 2:
        raise ValueError(f"key: a gemm key has shape (M, N, K) and dtypes (operand, result), got {key}")
    m, n, k = key.shape
    ta, tb, tc, acc = _parse_layout(key.layout)
    dt, out_dt = dtype_of(key.dtypes[0]), dtype_of(key.dtypes[1])
    a = torch.randn(*((k, m) if ta else (m, k)), device=device, generator=generator).to(dt)
    b = torch.randn(*((n, k) if tb else (k, n)), device=device, generator=generator).to(dt)
    out = torch.zeros(*((n, m) if tc else (m, n)), device=device, dtype=out_dt) if acc else None
    return GemmArgs(a, b, ta, tb, out_dtype=None if acc else out_dt, trans_c=tc, out=out)


def _quantize(x: torch.Tensor, dtype: torch.dtype, gran: G, axis: int | None, block: int | None = None,
              recipe: ScalingRecipe = _PLAIN) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale_inv)`` of ``x`` by the ``quantize_fp8`` primitive (whichever backend serves it)."""
    return call("quantize_fp8", QuantizeFp8Args(x, dtype, gran, axis, block, recipe))


register_key("gemm", gemm_key, gemm_args_for)
register_key("gemm_fp8", gemm_fp8_key, gemm_fp8_args_for)
