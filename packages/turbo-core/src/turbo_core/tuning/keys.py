"""Tuning keys: what a tuned choice is keyed by, per primitive.

A :class:`Key` is ``(arch, shape, dtypes, layout)``:

* ``arch``: where it was tuned — the GPU arch (``"sm90"``, ``"gfx942"``), ``"cpu"``, or for a
  kernel-config key the label the backend's launcher uses (TRITON's interpreter: ``"interpreter"``);
* ``shape``: the problem's sizes (GEMM: ``(M, N, K)``);
* ``dtypes``: short dtype names (GEMM: operand and result, ``("bf16", "bf16")``);
* ``layout``: layout flags as a short string (GEMM: ``"NT"`` = ``trans_a=False, trans_b=True``,
  then ``"C"`` for ``trans_c`` and ``"+acc"`` when accumulating into ``out``; FP8 GEMM: the same,
  then ``/`` and the scaling: ``tensorwise``, ``rowwise``, ``mx``, or ``blockwise-`` with each
  operand's block layout, ``1d`` or ``2d``: ``"NT/blockwise-1d2d"`` is 1 x 128 activations times
  128 x 128 weights).

``gemm_fp8`` keys have dtypes ``(a, b, result)`` (``("float8_e4m3fn", "float8_e4m3fn", "bf16")``).

Backend-choice entries use the primitive's key function (:func:`key_for`, ``gemm`` here);
kernel-config entries use a key the backend builds from what its config choice depends on (see
``turbo_core.tuning.spaces``). Keys hold no tensors; building one reads metadata only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from turbo_core.platform import Platform

__all__ = ["Key", "args_for", "bucket", "dtype_name", "dtype_of", "gemm_fp8_args_for", "gemm_fp8_key", "gemm_key",
           "key_for", "register_key"]

_SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}
_LONG = {v: k for k, v in _SHORT.items()}


class Key(NamedTuple):
    arch: str
    shape: tuple[int, ...]
    dtypes: tuple[str, ...]
    layout: str

    def to_json(self) -> dict:
        return {"arch": self.arch, "shape": list(self.shape), "dtypes": list(self.dtypes), "layout": self.layout}

    @classmethod
    def from_json(cls, obj: Any, *, what: str = "key") -> Key:
        """A key from its JSON object; ``ValueError`` naming ``what`` and the bad field."""
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: expected an object with arch, shape, dtypes, layout; got {obj!r}")
        arch, shape, dtypes, layout = (obj.get(f) for f in ("arch", "shape", "dtypes", "layout"))
        if not isinstance(arch, str) or not arch:
            raise ValueError(f"{what}.arch: expected a non-empty string, got {arch!r}")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"{what}.shape: expected a list of sizes >= 0, got {shape!r}")
        if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
            raise ValueError(f"{what}.dtypes: expected a list of dtype names, got {dtypes!r}")
        if not isinstance(layout, str):
            raise ValueError(f"{what}.layout: expected a string, got {layout!r}")
        return cls(arch, tuple(shape), tuple(dtypes), layout)

    def label(self) -> str:
        return f"{self.arch} {'x'.join(map(str, self.shape))} {','.join(self.dtypes)} {self.layout}"


def bucket(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Each size rounded up to a power of two (0 and 1 stay): the shape bucket of a key."""
    return tuple(s if s <= 1 else 1 << (s - 1).bit_length() for s in shape)


def dtype_name(dtype: torch.dtype) -> str:
    """``"bf16"``, ``"fp16"``, ``"fp32"``; other dtypes by torch's name (``"float8_e4m3fn"``)."""
    return _SHORT.get(dtype) or str(dtype).replace("torch.", "")


def dtype_of(name: str) -> torch.dtype:
    """The inverse of :func:`dtype_name`."""
    dt = _LONG.get(name) or getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"dtypes: unknown dtype name {name!r}")
    return dt


def arch_of(platform: Platform) -> str:
    return platform.arch or platform.kind


def gemm_key(args: Any, platform: Platform) -> Key:
    """The key of a ``gemm`` call (``turbo_core.dispatch.specs.gemm.GemmArgs``)."""
    from turbo_core.dispatch.specs.gemm import gemm_dims

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


def gemm_fp8_key(args: Any, platform: Platform) -> Key:
    """The key of a ``gemm_fp8`` call (``GemmFp8Args``): metadata only (BLOCKWISE reads the scales'
    shapes to tell 1-D from 2-D blocks)."""
    from turbo_core.dispatch.specs.gemm_fp8 import blockwise_layout, gemm_fp8_dims
    from turbo_core.low_precision import ScalingGranularity as G
    from turbo_core.low_precision import as_granularity

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


def gemm_fp8_args_for(key: Key, device: str, generator: torch.Generator) -> Any:
    """Random ``GemmFp8Args`` of a gemm_fp8 key: normal bf16 operands quantized by turbo's
    quantizer at the key's scaling (BLOCKWISE ``1d``/``2d`` per operand). MX keys are not built."""
    from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
    from turbo_core.low_precision import ScalingGranularity as G
    from turbo_core.low_precision import ScalingRecipe
    from turbo_core.ops.quantization import quantize_fp8

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
        qa, sa = quantize_fp8(a, da, gran)
        qb, sb = quantize_fp8(b, db, gran)
    elif scaling == "rowwise":
        gran = G.ROWWISE
        qa, sa = quantize_fp8(a, da, gran, axis=ax_a)
        qb, sb = quantize_fp8(b, db, gran, axis=ax_b)
    elif scaling.startswith("blockwise-") and scaling[10:14] in ("1d1d", "1d2d", "2d1d", "2d2d"):
        gran, rest = G.BLOCKWISE, scaling[14:]
        block = int(rest[1:]) if rest.startswith("-") and rest[1:].isdigit() else 128
        if rest not in ("", f"-{block}"):
            raise ValueError(f"key.layout: bad block size in {key.layout!r}")

        def q(x, dt, kind, axis):
            if kind == "2d":
                return quantize_fp8(x, dt, gran, block_size=block, scaling_recipe=ScalingRecipe(use_2d_block=True))
            return quantize_fp8(x, dt, gran, block_size=block, axis=axis)

        qa, sa = q(a, da, scaling[10:12], ax_a)
        qb, sb = q(b, db, scaling[12:14], ax_b)
    else:
        raise ValueError(f"key.layout: expected a scaling of tensorwise, rowwise or blockwise-<1d|2d><1d|2d> "
                         f"after '/', got {key.layout!r}")
    out = torch.zeros(*((n, m) if tc else (m, n)), device=device, dtype=out_dt) if acc else None
    return GemmFp8Args(qa, sa, qb, sb, trans_a=ta, trans_b=tb, out_dtype=None if acc else out_dt, granularity=gran,
                       block_size=block, trans_c=tc, out=out)


def gemm_args_for(key: Key, device: str, generator: torch.Generator) -> Any:
    """Random ``GemmArgs`` of a gemm key's shape, dtypes and layout (for re-timing a stored entry)."""
    from turbo_core.dispatch.specs.gemm import GemmArgs

    if len(key.shape) != 3 or len(key.dtypes) != 2:
        raise ValueError(f"key: a gemm key has shape (M, N, K) and dtypes (operand, result), got {key}")
    m, n, k = key.shape
    ta, tb, tc, acc = _parse_layout(key.layout)
    dt, out_dt = dtype_of(key.dtypes[0]), dtype_of(key.dtypes[1])
    a = torch.randn(*((k, m) if ta else (m, k)), device=device, generator=generator).to(dt)
    b = torch.randn(*((n, k) if tb else (k, n)), device=device, generator=generator).to(dt)
    out = torch.zeros(*((n, m) if tc else (m, n)), device=device, dtype=out_dt) if acc else None
    return GemmArgs(a, b, ta, tb, out_dtype=None if acc else out_dt, trans_c=tc, out=out)


KeyFunction = Callable[[Any, Platform], Key]
_KEYS: dict[str, KeyFunction] = {"gemm": gemm_key, "gemm_fp8": gemm_fp8_key}
_ARGS: dict[str, Callable[..., Any]] = {"gemm": gemm_args_for, "gemm_fp8": gemm_fp8_args_for}


ArgsBuilder = Callable[[Key, str, torch.Generator], Any]


def register_key(primitive: str, key: KeyFunction, args: ArgsBuilder | None = None) -> None:
    """Make ``primitive`` tunable in the database: ``key(args, platform) -> Key`` (metadata only), and
    optionally ``args(key, device, generator)`` building random arguments of a key (for ``--check``)."""
    if not callable(key):
        raise TypeError(f"key: expected a callable, got {key!r}")
    _KEYS[primitive] = key
    if args is not None:
        _ARGS[primitive] = args


def key_for(primitive: str, args: Any, platform: Platform) -> Key | None:
    """The database key of a call, or ``None`` when ``primitive`` has no key function."""
    fn = _KEYS.get(primitive)
    return None if fn is None else fn(args, platform)


def args_for(primitive: str, key: Key, device: str, generator: torch.Generator) -> Any:
    fn = _ARGS.get(primitive)
    if fn is None:
        raise ValueError(f"primitive: no argument builder for {primitive!r} (known: {', '.join(sorted(_ARGS))})")
    return fn(key, device, generator)
