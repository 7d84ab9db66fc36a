"""How an async tensor-parallel call cuts its work: ``num_splits`` and the chunk ``order``.

Each op takes ``num_splits`` and ``order`` (``turbo_core.ops.async_tp.layout``: ``"rank"`` or
``"split"``). What a call runs with, first answer wins:

1. **given**: ``num_splits`` passed (an int); ``order`` passed too, or the heuristic's order for
   the transport;
2. **tuned**: ``num_splits=None`` and the tuning database holds a choice for the call's key (exact,
   else its shape bucket: every size rounded up to a power of two);
3. **heuristic**: ``num_splits=None`` otherwise:

   ==========================  ==================================  ==================
   op, transport               num_splits                          order
   ==========================  ==================================  ==================
   all-gather, ``symm``        ``max(1, 4 // world)``              ``"rank"``
   reduce-scatter, ``symm``    ``max(1, 4 // world)``              ``"split"``
   either, ``nccl``            2                                   ``"split"``
   ==========================  ==================================  ==================

   With ``symm`` the ring already gives ``world`` chunks (the local one overlapping the first
   transfer); small worlds cut each rank's rows in two or four so that the transfer of one piece
   overlaps the GEMM of the one before. With ``nccl`` one collective per split; two splits let the
   second transfer overlap the first split's GEMMs. An ``order`` passed with ``num_splits=None``
   replaces the tuned or heuristic order.

The tuning database (``turbo_core.tuning``) stores a choice as a kernel config of the name
:data:`TUNER` for the op's name, keyed ``Key(arch, (M, N, K, world), (input dtype, output dtype),
"<layout>/<transport>")``: ``M`` the rows of the whole product (every rank's), ``N`` the output
columns (summed over the weights), ``K`` the contraction. Its config is ``{"num_splits": int,
"order": "rank" | "split"}``. ``turbo bench async-tp`` times the candidates (:data:`CANDIDATES`)
and records the fastest per case with :func:`record_choice` (saved to ``TURBO_TUNING_DB``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from turbo_core import tuning
from turbo_core.ops.async_tp.layout import ORDERS
from turbo_core.platform import platform_of
from turbo_core.tuning.keys import arch_of, dtype_name

__all__ = ["CANDIDATES", "OPS", "TUNER", "Plan", "heuristic", "key_of", "record_choice", "resolve"]

TUNER = "ASYNC_TP"
OPS = ("fused_all_gather_matmul", "fused_all_gather_scaled_matmul", "fused_matmul_reduce_scatter")
#: The (num_splits, order) pairs ``turbo bench async-tp`` times per case.
CANDIDATES = ((1, "rank"), (2, "rank"), (2, "split"), (4, "rank"), (4, "split"))


class Plan(NamedTuple):
    """What a call runs with. ``source``: ``"given"``, ``"tuned"`` or ``"heuristic"``;
    ``transport``: ``"symm"`` or ``"nccl"``, ``reason``: why ``nccl`` (None for ``symm``)."""

    num_splits: int
    order: str
    source: str
    transport: str
    reason: str | None = None


def heuristic(op: str, transport: str, world: int) -> tuple[int, str]:
    """``(num_splits, order)`` of the table in the module docstring."""
    if transport == "symm":
        return max(1, 4 // world), "split" if op == "fused_matmul_reduce_scatter" else "rank"
    return 2, "split"


def key_of(op: str, *, device: torch.device, m: int, n: int, k: int, world: int, dtype: torch.dtype,
           out_dtype: torch.dtype, layout: str, transport: str) -> tuning.Key:
    """The tuning-database key of a call (metadata only)."""
    return tuning.Key(arch_of(platform_of(device)), (int(m), int(n), int(k), int(world)),
                      (dtype_name(dtype), dtype_name(out_dtype)), f"{layout}/{transport}")


def _convert(config: dict) -> tuple[int, str]:
    splits, order = config.get("num_splits"), config.get("order")
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"num_splits: expected an int >= 1, got {splits!r}")
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {', '.join(ORDERS)}, got {order!r}")
    return splits, order


_read = tuning.ConfigReader(_convert, None, "async-TP", " (the heuristic choice is used)")


def resolve(op: str, key_args: dict, transport: str, reason: str | None, num_splits: int | None,
            order: str | None) -> Plan:
    """The :class:`Plan` of a call (module docstring); ``key_args`` are :func:`key_of`'s keywords
    but ``transport``, read only when the database is consulted."""
    world = key_args["world"]
    if num_splits is not None:
        return Plan(num_splits, order or heuristic(op, transport, world)[1], "given", transport, reason)
    config = tuning.kernel_config(TUNER, op, lambda: key_of(op, transport=transport, **key_args))
    tuned = _read(config) if config is not None else None
    if tuned is not None:
        return Plan(tuned[0], order or tuned[1], "tuned", transport, reason)
    splits, default_order = heuristic(op, transport, world)
    return Plan(splits, order or default_order, "heuristic", transport, reason)


def record_choice(op: str, key: tuning.Key, num_splits: int, order: str, *, time_us: float | None = None,
                  heuristic_time_us: float | None = None) -> tuning.Entry:
    """Add the tuned ``(num_splits, order)`` of ``op`` at ``key`` to this process's tuning database
    (``turbo_core.tuning.save`` writes it to ``TURBO_TUNING_DB``); returns the stored entry."""
    if op not in OPS:
        raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
    _convert({"num_splits": num_splits, "order": order})
    versions = {"torch": torch.__version__.split("+")[0]}
    choice = tuning.ConfigChoice(key, {"num_splits": num_splits, "order": order}, time_us, heuristic_time_us,
                                 versions)
    return tuning.record(tuning.Entry(op, key, configs={TUNER: choice}))
