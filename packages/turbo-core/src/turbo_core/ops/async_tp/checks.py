"""Argument checks of the async tensor-parallel ops. Each raises ``ValueError`` naming the argument
and what was expected; the ops run every check before any communication."""

from __future__ import annotations

import torch
import torch.distributed as dist

from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_int
from turbo_core.low_precision import is_fp8_dtype
from turbo_core.ops.async_tp.layout import ORDERS

__all__ = ["check_a", "check_b", "check_common", "check_out", "check_outs", "gathered_shape", "per_weight",
           "resolve_group", "result_dtypes", "row_dim", "weight_count"]

LAYOUTS = ("NN", "NT")


def resolve_group(group_name):
    """``(group, world size, this rank)`` for ``group_name``: a ProcessGroup or its registered name."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group_name: torch.distributed is not initialized (call init_process_group first)")
    if isinstance(group_name, dist.ProcessGroup):
        group = group_name
    elif isinstance(group_name, str):
        try:
            group = dist.distributed_c10d._resolve_process_group(group_name)
        except Exception as exc:  # the registry raises a RuntimeError/ValueError for an unknown name
            raise ValueError(f"group_name: no process group is registered as {group_name!r}") from exc
    else:
        raise ValueError(f"group_name: expected a ProcessGroup or its registered name, got {type(group_name).__name__}")
    return group, dist.get_world_size(group), dist.get_rank(group)


def check_common(comm_method, num_splits, order, enable_sdma, streams: dict) -> None:
    if comm_method != "pipeline":
        raise ValueError(f"comm_method: only 'pipeline' is implemented here, got {comm_method!r}")
    if num_splits is not None:
        require_int("num_splits", num_splits, minimum=1)
    if order is not None and order not in ORDERS:
        raise ValueError(f"order: expected None or one of {', '.join(map(repr, ORDERS))}, got {order!r}")
    if enable_sdma:
        raise ValueError("enable_sdma: SDMA copies (AMD copy engines) are not implemented; pass False")
    for name, value in streams.items():
        if value is not None and not isinstance(value, (list, tuple)):
            raise ValueError(f"{name}: expected None or a list of streams, got {type(value).__name__}")


def check_a(name: str, a, what: str) -> None:
    if not isinstance(a, torch.Tensor) or a.dtype not in FLOAT_DTYPES or a.dim() < 2:
        got = f"{a.dtype} tensor of {a.dim()} dims" if isinstance(a, torch.Tensor) else type(a).__name__
        raise ValueError(f"{name}: expected a fp16/bf16/fp32 tensor [..., K] with {what}, got {got}")


def check_b(name: str, b, layout: str, a: torch.Tensor, *, fp8: bool | None = None) -> int:
    """N of ``op(b)`` after checking ``b`` against ``a`` and the layout: an FP8 weight when ``fp8``
    (default: when ``a`` is FP8), else ``a``'s dtype; ``a``'s device."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout of {name}: expected 'NN' (b is [K, N]) or 'NT' (b is [N, K]), got {layout!r}")
    if not isinstance(b, torch.Tensor) or b.dim() != 2:
        got = f"a tensor of {b.dim()} dims" if isinstance(b, torch.Tensor) else type(b).__name__
        raise ValueError(f"{name}: expected a 2-D weight, got {got}")
    fp8 = is_fp8_dtype(a.dtype) if fp8 is None else fp8
    if fp8 and (not is_fp8_dtype(b.dtype) or b.device != a.device):
        raise ValueError(f"{name}: expected an FP8 weight on {a.device}, got {b.dtype} on {b.device}")
    if not fp8 and (b.dtype != a.dtype or b.device != a.device):
        raise ValueError(f"{name}: expected {a.dtype} on {a.device} like the input, got {b.dtype} on {b.device}")
    k = b.shape[0] if layout == "NN" else b.shape[1]
    if k != a.shape[-1]:
        raise ValueError(f"{name}: K = {k} in layout {layout} does not match the input's last dim {a.shape[-1]}")
    return b.shape[1] if layout == "NN" else b.shape[0]


def row_dim(name: str, dim, a: torch.Tensor) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -a.dim() <= dim < a.dim():
        raise ValueError(f"{name}: expected a dim of the {a.dim()}-D input, got {dim!r}")
    dim %= a.dim()
    if dim == a.dim() - 1:
        raise ValueError(f"{name}: the last dim is the contraction dim K; pick a leading dim")
    return dim


def check_out(name: str, t, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype or t.device != device:
        got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected {shape} {dtype} on {device}, got {got}")


def weight_count(Bs, what: str) -> int:
    if not isinstance(Bs, (list, tuple)) or not Bs:
        raise ValueError(f"Bs: expected a non-empty list of {what}, got {type(Bs).__name__}")
    return len(Bs)


def per_weight(name: str, seq, count: int, *, optional: bool = True, noun: str = "entry") -> list:
    """``seq`` as a list of one ``noun`` per weight (``[None] * count`` for None when ``optional``)."""
    if seq is None and optional:
        return [None] * count
    if not isinstance(seq, (list, tuple)) or len(seq) != count:
        raise ValueError(f"{name}: expected {'None or ' if optional else ''}one {noun} per weight ({count}), got {seq!r}")
    return list(seq)


def result_dtypes(out_dtypes, count: int, default: torch.dtype) -> list[torch.dtype]:
    dtypes = [default if d is None else d for d in per_weight("out_dtypes", out_dtypes, count, noun="dtype")]
    for i, d in enumerate(dtypes):
        if d not in FLOAT_DTYPES:
            raise ValueError(f"out_dtypes[{i}]: expected fp16/bf16/fp32 or None, got {d}")
    return dtypes


def check_outs(name: str, given, shapes: list, dtypes: list, device: torch.device) -> list:
    """The caller's per-weight result buffers (None entries allowed), checked."""
    given = per_weight(name, given, len(shapes), noun="tensor")
    for i, (t, shape, dtype) in enumerate(zip(given, shapes, dtypes, strict=True)):
        check_out(f"{name}[{i}]", t, shape, dtype, device)
    return given


def gathered_shape(a_shard: torch.Tensor, dim: int, world: int) -> tuple:
    return (*a_shard.shape[:dim], a_shard.shape[dim] * world, *a_shard.shape[dim + 1:])
