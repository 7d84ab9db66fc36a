"""The transport and plan of one async tensor-parallel call, and what the bench and users can ask
about them without calling an op."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.validate import require_int
from turbo_core.ops.async_tp import transport
from turbo_core.ops.async_tp.checks import resolve_group
from turbo_core.ops.async_tp.layout import ORDERS
from turbo_core.ops.async_tp.plan import OPS, Plan, resolve

__all__ = ["async_tp_plan", "async_tp_transport", "plan_call"]


def plan_call(op: str, group, world: int, device: torch.device, *, m: int, n: int, k: int, dtype: torch.dtype,
              out_dtype: torch.dtype, layout: str, num_splits: int | None, order: str | None) -> Plan:
    """The transport (collective on a group's first call) and the plan of an op's call."""
    choice = transport.choose(group, world, device)
    key_args = {"device": device, "m": m, "n": n, "k": k, "world": world, "dtype": dtype, "out_dtype": out_dtype,
                "layout": layout}
    return resolve(op, key_args, choice.name, choice.reason, num_splits, order)


def async_tp_transport(group_name, device: torch.device | str | None = None) -> transport.TransportChoice:
    """``(name, reason)``: the transport the async-TP ops use on ``group_name`` (a ProcessGroup or its
    registered name) for tensors on ``device`` (default: the current CUDA device when CUDA is
    available, else the CPU): ``"symm"`` (symmetric memory, copy engines over NVLink) or ``"nccl"``
    (the process group's async collectives), with the reason ``symm`` is not used (None for
    ``symm``). The first call per group and device is collective (every rank calls it at the same
    point), like an op's first call; later calls read the cached answer."""
    group, world, _ = resolve_group(group_name)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else \
            torch.device("cpu")
    return transport.choose(group, world, torch.device(device))


def async_tp_plan(op: str, *, m: int, n: int, k: int, world: int, dtype: torch.dtype,
                  device: torch.device | str, transport_name: str, out_dtype: torch.dtype | None = None,
                  layout: str = "NT", num_splits: int | None = None, order: str | None = None) -> Plan:
    """The :class:`~turbo_core.ops.async_tp.plan.Plan` (``num_splits``, ``order``, ``source``) that
    ``op`` runs a call with (``turbo_core.ops.async_tp.plan``: given, tuned, heuristic); no
    communication. ``m``: rows of the whole product (every rank's); ``n``: output columns (summed
    over the weights); ``k``: the contraction; ``dtype``: what travels (the FP8 dtype for the scaled
    op); ``layout``: the weights' layouts joined by ``","`` (the scaled op: then ``"/tensorwise"`` or
    ``"/rowwise"``); ``transport_name``: ``"symm"`` or ``"nccl"`` (:func:`async_tp_transport`)."""
    if op not in OPS:
        raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
    for name, value, low in (("m", m, 0), ("n", n, 0), ("k", k, 0), ("world", world, 1)):
        require_int(name, value, minimum=low)
    if transport_name not in transport.TRANSPORTS:
        raise ValueError(f"transport_name: expected one of {', '.join(transport.TRANSPORTS)}, got {transport_name!r}")
    if num_splits is not None:
        require_int("num_splits", num_splits, minimum=1)
    if order is not None and order not in ORDERS:
        raise ValueError(f"order: expected None or one of {', '.join(ORDERS)}, got {order!r}")
    key_args = {"device": torch.device(device), "m": m, "n": n, "k": k, "world": world, "dtype": dtype,
                "out_dtype": out_dtype or dtype, "layout": layout}
    return resolve(op, key_args, transport_name, None, num_splits, order)
