"""``Buffer``: DeepEP's normal-mode ``Buffer`` API over turbo's own all-to-all (backend ``DEEP_EP``).

Code written for ``deep_ep.Buffer`` (Megatron-LM's ``fused_a2a``, Primus-Turbo's ``deep_ep``) runs
on it unchanged: ``get_dispatch_layout`` -> ``dispatch`` -> ``combine``, cached dispatch through
the handle, the events, ``Config`` and the size hints. Rows move through turbo's ``moe_dispatch`` /
``moe_combine`` primitives pinned to the ``DEEP_EP`` backend (``torch.distributed`` all-to-all:
NCCL, RCCL, gloo on the CPU; symmetric memory between GPUs of one host), never through DeepEP.

Semantics (DeepEP's):

- ``get_dispatch_layout(topk_idx [T, K], E)``: rank ``r`` holds experts ``[r * E/W, (r + 1) * E/W)``;
  a token goes once to every rank holding one of its ids (-1 = none).
- ``dispatch``: rank ``d`` receives the tokens with ``is_token_in_rank[t, d]``, grouped by source
  rank in rank order, each source's tokens in increasing index; ``recv_topk_idx`` holds the ids
  local to ``d`` (``id - d * E/W``) and -1 for ids held elsewhere, ``recv_topk_weights`` the
  weights of those slots and 0 elsewhere; ``num_recv_tokens_per_expert_list`` is, per local
  expert, the sum over the source ranks of their ``num_tokens_per_expert`` entries, each rounded
  up to a multiple of ``expert_alignment`` (a host list: one sync; empty with
  ``num_worst_tokens > 0``, where ``R = num_worst_tokens`` rows come back, those past the
  received ones zero with ids -1). A cached dispatch (``handle=``) re-sends new rows along the
  handle's layout.
- ``combine(x [R, H], handle)``: each token's rows are returned to its rank and summed there
  (fp32, float64 on the CPU, rounded once; **without** weights), likewise ``topk_weights``; a
  token sent nowhere gets 0; ``bias`` (one or two ``[T, H]``) is added before rounding.

Neither call is differentiable (as in DeepEP): they run under ``torch.no_grad()``. Autograd
goes through functions like Megatron's ``FusedDispatch`` / ``FusedCombine``, whose backward of
dispatch is a combine of the gradients (``topk_weights=`` the probs' gradients) and whose
backward of combine is a cached dispatch of the gradient.

Where it differs from DeepEP, see ``docs/deepep-compat.md`` of the repository; in short: a
superset of inputs (any float dtype, int32 or int64 ids, any number of FP8 scale columns, any
group size including one process), an opaque handle, synchronous calls on the current stream
with events that are already complete, no low-latency mode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from turbo_core.dispatch.launch import moe_dispatch as launch
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.moe import MoeDispatchHandle, check_expert_ids
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    require_bool,
    require_int,
    require_rows,
    require_same_device,
    require_shape,
    require_tensor,
)
from turbo_deepep.all_to_all.layout import compact_rows
from turbo_deepep.deep_ep.config import Config
from turbo_deepep.deep_ep.layout import aligned_counts, dispatch_layout, route
from turbo_deepep.deep_ep.utils import EventHandle, EventOverlap

__all__ = ["BACKEND", "Buffer", "DispatchHandle", "topk_idx_t"]

#: The backend the Buffer's exchanges are pinned to.
BACKEND = "DEEP_EP"
#: DeepEP's dtype for ``topk_idx`` (int32 is accepted too).
topk_idx_t = torch.int64
_PRIMITIVES = ("moe_dispatch", "moe_combine")


class DispatchHandle(NamedTuple):
    """The handle of :meth:`Buffer.dispatch` (opaque: pass it to ``combine`` or a cached
    ``dispatch``). Valid with any ``Buffer`` of the same process group.

    Attributes:
        is_token_in_rank: bool ``[T, W]``, the layout it was made from.
        num_recv_tokens: ``R``, the received rows.
        moe: ``W >= 2``: the handle of turbo's ``moe_dispatch``; ``None`` on one process.
        src_rows: one process: int64 ``[R]``, the token in each received row (``T``: a padding row).
        group_name: the process group's name (``""``: one process without a group).
    """

    is_token_in_rank: torch.Tensor
    num_recv_tokens: int
    moe: MoeDispatchHandle | None
    src_rows: torch.Tensor | None
    group_name: str


def _group_name(group: Any) -> str:
    return "" if group is None else str(getattr(group, "group_name", id(group)))


def _stream_args(previous_event: Any, async_finish: Any, allocate_on_comm_stream: Any) -> None:
    """Check the stream arguments (DeepEP's rule: ``allocate_on_comm_stream`` needs a
    ``previous_event`` and ``async_finish``), then make the current stream wait for the event."""
    if previous_event is not None and not isinstance(previous_event, EventOverlap):
        raise TypeError(f"previous_event: expected None or an EventOverlap, got {type(previous_event).__name__}")
    require_bool("async_finish", async_finish)
    require_bool("allocate_on_comm_stream", allocate_on_comm_stream)
    if allocate_on_comm_stream and (previous_event is None or not async_finish):
        raise ValueError("allocate_on_comm_stream: True needs a previous_event and async_finish=True (as in DeepEP)")
    if previous_event is not None and previous_event.event is not None:
        previous_event.event.current_stream_wait()


def _config(config: Any) -> None:
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"config: expected None or a Config, got {type(config).__name__}")


def _split_x(x: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ValueError(f"x: expected a tensor or (x, x_scales), got a sequence of {len(x)}")
        require_tensor("x", x[0], ndim=2)
        require_tensor("x_scales", x[1], ndim=2, dtypes=(torch.float32,))
        return x[0], x[1]
    require_tensor("x", x, ndim=2)
    return x, None


def _pad_take(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``t[rows]`` where row index ``len(t)`` is a zero row."""
    pad = torch.zeros((1, *t.shape[1:]), dtype=t.dtype, device=t.device)
    return torch.cat([t, pad])[rows]


def _acc_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type == "cpu" else torch.float32


def _sum_rows(x: torch.Tensor, src_rows: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """One process's combine: ``[T, C]`` in the accumulation dtype, row ``i`` of ``x`` added to
    token ``src_rows[i]`` (``T``: dropped)."""
    acc = torch.zeros((num_tokens + 1, x.shape[1]), dtype=_acc_dtype(x.device), device=x.device)
    acc.index_add_(0, src_rows, x.to(acc.dtype))
    return acc[:num_tokens]


class Buffer:
    """DeepEP's ``Buffer`` (normal mode) over turbo's all-to-all; see the module docstring.

    Args:
        group: a ``torch.distributed.ProcessGroup`` (any backend that can ``all_to_all_single`` the
            tensors: NCCL/RCCL for GPU tensors, gloo for CPU ones), or ``None`` for one process.
        num_nvl_bytes, num_rdma_bytes: DeepEP's buffer sizes (ints >= 0): recorded as attributes,
            nothing is allocated (turbo's exchange sizes its buffers per call).
        low_latency_mode: must be False (DeepEP's low-latency kernels are not provided).
        num_qps_per_rank, allow_nvlink_for_low_latency_mode, allow_mnnvl, enable_shrink: accepted
            for DeepEP's signature, unused.
        explicitly_destroy: as DeepEP: :meth:`destroy` is allowed only when set.
        comm: must be None (no MPI communicator path).

    Making a Buffer runs no collective. Attributes: ``rank``, ``group_size``, ``group``,
    ``num_nvl_bytes``, ``num_rdma_bytes``, ``low_latency_mode``, ``explicitly_destroy``, and the
    class attribute ``num_sms`` (:meth:`set_num_sms`), which only feeds the configs.
    """

    num_sms: int = 20

    def __init__(self, group: Any, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0, low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24, allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, enable_shrink: bool = False, comm: Any = None) -> None:
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"group: expected None or a torch.distributed.ProcessGroup, got {type(group).__name__}")
        self.num_nvl_bytes = require_int("num_nvl_bytes", num_nvl_bytes, minimum=0)
        self.num_rdma_bytes = require_int("num_rdma_bytes", num_rdma_bytes, minimum=0)
        require_bool("low_latency_mode", low_latency_mode)
        if low_latency_mode:
            raise ValueError("low_latency_mode: expected False: turbo's Buffer has no low-latency kernels"
                             " (normal-mode dispatch/combine only)")
        require_int("num_qps_per_rank", num_qps_per_rank, minimum=0)
        for name, value in (("allow_nvlink_for_low_latency_mode", allow_nvlink_for_low_latency_mode),
                            ("allow_mnnvl", allow_mnnvl), ("explicitly_destroy", explicitly_destroy),
                            ("enable_shrink", enable_shrink)):
            require_bool(name, value)
        if comm is not None:
            raise ValueError("comm: expected None: pass a torch.distributed process group as group")
        self.group = group
        self.rank = 0 if group is None else group.rank()
        self.group_size = 1 if group is None else group.size()
        self.low_latency_mode = False
        self.explicitly_destroy = explicitly_destroy
        self._group_name = _group_name(group)
        self._destroyed = False

    # -- DeepEP's static helpers -------------------------------------------------------------------

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """Set the SM count the configs carry (even, as DeepEP requires); it changes no exchange."""
        require_int("new_num_sms", new_num_sms, minimum=0)
        if new_num_sms % 2:
            raise ValueError(f"new_num_sms: expected an even number, got {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        """An event on the current stream (see :mod:`turbo_deepep.deep_ep.utils`)."""
        return EventOverlap(EventHandle())

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """``Config(Buffer.num_sms)`` with DeepEP's default chunk sizes, for any ``num_ranks >= 1``."""
        require_int("num_ranks", num_ranks, minimum=1)
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """As :meth:`get_dispatch_config`."""
        require_int("num_ranks", num_ranks, minimum=1)
        return Config(Buffer.num_sms)

    def destroy(self) -> None:
        """Release the buffer (DeepEP: only with ``explicitly_destroy=True``); later calls raise."""
        if not self.explicitly_destroy:
            raise RuntimeError("destroy: the Buffer was made without explicitly_destroy=True")
        self._destroyed = True

    def _alive(self, what: str) -> None:
        if self._destroyed:
            raise RuntimeError(f"{what}: this Buffer was destroyed")

    def _pin(self):
        return use_backend(BACKEND, primitives=_PRIMITIVES)

    def _handle(self, handle: Any) -> DispatchHandle:
        if not isinstance(handle, DispatchHandle):
            raise TypeError(f"handle: expected the handle returned by Buffer.dispatch, got {type(handle).__name__}")
        if handle.group_name != self._group_name:
            raise ValueError("handle: made by a dispatch on another process group than this Buffer's")
        return handle

    # -- layout ------------------------------------------------------------------------------------

    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int, previous_event: EventOverlap | None = None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """``(num_tokens_per_rank int32 [W], num_tokens_per_rdma_rank int32 [ceil(W / 8)] or None
        (None for W <= 8), num_tokens_per_expert int32 [E], is_token_in_rank bool [T, W], event)``.

        ``topk_idx``: int64 (or int32) ``[T, K]`` expert ids, -1 = none; ``num_experts``: ``E``, a
        multiple of ``W``. Computed on ``topk_idx``'s device, no host sync, no communication."""
        self._alive("get_dispatch_layout")
        require_tensor("topk_idx", topk_idx, ndim=2, dtypes=INDEX_DTYPES)
        e = require_int("num_experts", num_experts, minimum=1)
        if e % self.group_size:
            raise ValueError(f"num_experts: expected a multiple of the group's size {self.group_size}, got {e}")
        check_expert_ids("topk_idx", topk_idx, e)
        _stream_args(previous_event, async_finish, allocate_on_comm_stream)
        with torch.no_grad():
            layout = dispatch_layout(topk_idx, e, self.group_size)
        return (*layout, EventOverlap(EventHandle()))

    # -- dispatch ----------------------------------------------------------------------------------

    def _check_layout(self, x: torch.Tensor, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                      num_tokens_per_expert) -> int:
        """Check a fresh dispatch's layout arguments; return ``E``."""
        w, t = self.group_size, x.shape[0]
        for name, value in (("num_tokens_per_rank", num_tokens_per_rank), ("is_token_in_rank", is_token_in_rank),
                            ("num_tokens_per_expert", num_tokens_per_expert)):
            if value is None:
                raise ValueError(f"{name}: required for a fresh dispatch (no handle): pass get_dispatch_layout's")
        require_tensor("num_tokens_per_rank", num_tokens_per_rank, ndim=1, dtypes=INDEX_DTYPES)
        require_shape("num_tokens_per_rank", num_tokens_per_rank, (w,), "one per rank")
        if num_tokens_per_rdma_rank is not None:
            require_tensor("num_tokens_per_rdma_rank", num_tokens_per_rdma_rank, ndim=1, dtypes=INDEX_DTYPES)
        require_tensor("is_token_in_rank", is_token_in_rank, ndim=2, dtypes=(torch.bool,))
        require_shape("is_token_in_rank", is_token_in_rank, (t, w), "[tokens, ranks]")
        require_tensor("num_tokens_per_expert", num_tokens_per_expert, ndim=1, dtypes=INDEX_DTYPES)
        e = num_tokens_per_expert.shape[0]
        if e == 0 or e % w:
            raise ValueError(f"num_tokens_per_expert: expected [E] with E a positive multiple of the group's size {w},"
                             f" got shape {tuple(num_tokens_per_expert.shape)}")
        require_same_device(x=x, is_token_in_rank=is_token_in_rank,
                            num_tokens_per_expert=num_tokens_per_expert)
        return e

    def _check_topk(self, t: int, e: int, topk_idx, topk_weights) -> None:
        if (topk_idx is None) != (topk_weights is None):
            raise ValueError("topk_weights: pass topk_idx and topk_weights together, or neither")
        if topk_idx is None:
            return
        require_tensor("topk_idx", topk_idx, ndim=2, dtypes=INDEX_DTYPES)
        require_rows("topk_idx", topk_idx, t, "one per token of x")
        require_tensor("topk_weights", topk_weights, ndim=2, dtypes=(torch.float32,))
        require_shape("topk_weights", topk_weights, tuple(topk_idx.shape), "topk_idx's shape")
        check_expert_ids("topk_idx", topk_idx, e)

    def dispatch(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor], handle: DispatchHandle | None = None,
                 num_tokens_per_rank: torch.Tensor | None = None, num_tokens_per_rdma_rank: torch.Tensor | None = None,
                 is_token_in_rank: torch.Tensor | None = None, num_tokens_per_expert: torch.Tensor | None = None,
                 topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Config | None = None,
                 previous_event: EventOverlap | None = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False):
        """Send each token to the ranks ``is_token_in_rank`` marks (see the module docstring).

        Args:
            x: ``[T, H]`` bf16 (fp16/fp32 too), or ``(x fp8 [T, H], x_scales fp32 [T, S])``.
            handle: a previous dispatch's handle: a cached dispatch (no layout, no top-k).
            num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank, num_tokens_per_expert:
                :meth:`get_dispatch_layout`'s results (a fresh dispatch); ``E`` is
                ``num_tokens_per_expert``'s length.
            topk_idx, topk_weights: int64/int32 ``[T, K]`` and fp32 ``[T, K]``, together or not at all.
            expert_alignment: ``>= 1``, the rounding of ``num_recv_tokens_per_expert_list``.
            num_worst_tokens: ``> 0``: exactly this many rows come back and nothing is read on the
                host (every rank must then pass the same ``T``: turbo's fixed-slot exchange).
            config: ``None`` or a :class:`Config` (accepted, no effect).
            previous_event, async_finish, allocate_on_comm_stream: DeepEP's stream arguments.

        Returns:
            ``(recv_x [R, H] (a (recv_x, recv_x_scales) tuple for an FP8 x), recv_topk_idx [R, K]
            in topk_idx's dtype or None, recv_topk_weights fp32 [R, K] or None,
            num_recv_tokens_per_expert_list (list of E / W ints; [] with num_worst_tokens), handle,
            event)``; a cached dispatch returns ``(recv_x, None, None, None, None, event)``.
        """
        self._alive("dispatch")
        x, scales = _split_x(x)
        _config(config)
        alignment = require_int("expert_alignment", expert_alignment, minimum=1)
        worst = require_int("num_worst_tokens", num_worst_tokens, minimum=0)
        t = x.shape[0]
        if handle is not None:
            handle = self._handle(handle)
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("topk_idx: must be None for a cached dispatch (handle given), as topk_weights")
            require_rows("x", x, handle.is_token_in_rank.shape[0], "the handle's tokens")
            _stream_args(previous_event, async_finish, allocate_on_comm_stream)
            with torch.no_grad():
                if handle.moe is None:
                    recv_x = _pad_take(x, handle.src_rows)
                    recv_s = None if scales is None else _pad_take(scales, handle.src_rows)
                else:
                    with self._pin():
                        recv_x, recv_s = launch.moe_dispatch_cached(x.contiguous(), None if scales is None
                                                                    else scales.contiguous(), handle.moe,
                                                                    async_finish=async_finish,
                                                                    allocate_on_comm_stream=allocate_on_comm_stream)
            recv = recv_x if scales is None else (recv_x, recv_s)
            return recv, None, None, None, None, EventOverlap(EventHandle())
        e = self._check_layout(x, num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank,
                               num_tokens_per_expert)
        self._check_topk(t, e, topk_idx, topk_weights)
        if scales is not None:
            require_rows("x_scales", scales, t, "one per token")
        require_same_device(x=x, x_scales=scales, topk_idx=topk_idx, topk_weights=topk_weights)
        if self.group_size == 1 and 0 < worst < t:
            raise ValueError(f"num_worst_tokens: expected 0 or >= the number of tokens ({t}) on one process, got {worst}")
        _stream_args(previous_event, async_finish, allocate_on_comm_stream)
        with torch.no_grad():
            if self.group_size == 1:
                out = self._dispatch_local(x, scales, is_token_in_rank, topk_idx, topk_weights, worst)
            else:
                out = self._dispatch_group(x, scales, is_token_in_rank, topk_idx, topk_weights, e, worst,
                                           async_finish, allocate_on_comm_stream)
            recv_x, recv_s, recv_idx, recv_w, handle = out
            counts = [] if worst else self._recv_counts(num_tokens_per_expert, alignment)
        recv = recv_x if scales is None else (recv_x, recv_s)
        return recv, recv_idx, recv_w, counts, handle, EventOverlap(EventHandle())

    def _recv_counts(self, num_tokens_per_expert: torch.Tensor, alignment: int) -> list[int]:
        """The sum over the source ranks of their ``num_tokens_per_expert`` for this rank's experts
        (one ``all_to_all_single`` of ``E`` int64), aligned, on the host."""
        send = num_tokens_per_expert.to(torch.int64).contiguous()
        if self.group_size == 1:
            return aligned_counts(send, alignment)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return aligned_counts(recv.view(self.group_size, -1).sum(dim=0), alignment)

    def _dispatch_group(self, x, scales, in_rank, topk_idx, topk_weights, e, worst, async_finish, alloc):
        ids, probs = route(in_rank, topk_idx, topk_weights, e // self.group_size)
        with self._pin():
            recv_x, recv_s, recv_ids, recv_probs, _, moe = launch.moe_dispatch(
                x.contiguous(), None if scales is None else scales.contiguous(), ids, probs, e, self.group,
                async_finish=async_finish, allocate_on_comm_stream=alloc, num_worst_tokens=worst)
        recv_idx = recv_w = None
        if topk_idx is not None:
            k = topk_idx.shape[1]
            recv_idx = recv_ids[:, :k].to(topk_idx.dtype).contiguous()
            recv_w = recv_probs[:, :k].contiguous()
        handle = DispatchHandle(in_rank, recv_x.shape[0], moe, None, self._group_name)
        return recv_x, recv_s, recv_idx, recv_w, handle

    def _dispatch_local(self, x, scales, in_rank, topk_idx, topk_weights, worst):
        """One process: the marked tokens in order (``worst``: padded to ``worst`` rows, no host read)."""
        valid = in_rank[:, 0]
        rows = worst or int(valid.sum())
        src, _ = compact_rows(valid, rows)
        recv_x = _pad_take(x, src)
        recv_s = None if scales is None else _pad_take(scales, src)
        recv_idx = recv_w = None
        if topk_idx is not None:
            ids = torch.where(topk_idx >= 0, topk_idx, torch.full_like(topk_idx, -1))
            recv_idx = _pad_take(ids + 1, src) - 1  # padding rows: -1
            recv_w = torch.where(recv_idx >= 0, _pad_take(topk_weights, src), torch.zeros((), device=x.device))
        return recv_x, recv_s, recv_idx, recv_w, DispatchHandle(in_rank, rows, None, src, self._group_name)

    # -- combine -----------------------------------------------------------------------------------

    def combine(self, x: torch.Tensor, handle: DispatchHandle, topk_weights: torch.Tensor | None = None,
                bias: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None, config: Config | None = None,
                previous_event: EventOverlap | None = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """Return each received row to its token's rank and sum them there (see the module docstring).

        Args:
            x: ``[R, H]`` bf16 (fp16/fp32 too), in the received layout of the dispatch that made ``handle``.
            handle: that dispatch's handle.
            topk_weights: ``None`` or fp32 ``[R, K]``, summed alongside.
            bias: ``None``, a ``[T, H]`` tensor or a tuple of one or two, added before rounding.
            config, previous_event, async_finish, allocate_on_comm_stream: as :meth:`dispatch`.

        Returns:
            ``(combined_x [T, H] in x's dtype, combined_topk_weights fp32 [T, K] or None, event)``.
        """
        self._alive("combine")
        handle = self._handle(handle)
        require_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
        require_rows("x", x, handle.num_recv_tokens, "the dispatch's received rows")
        if topk_weights is not None:
            require_tensor("topk_weights", topk_weights, ndim=2, dtypes=(torch.float32,))
            require_rows("topk_weights", topk_weights, handle.num_recv_tokens, "the dispatch's received rows")
        t = handle.is_token_in_rank.shape[0]
        biases = [] if bias is None else list(bias) if isinstance(bias, (tuple, list)) else [bias]
        if len(biases) > 2:
            raise ValueError(f"bias: expected a tensor or a tuple of at most two, got {len(biases)}")
        for i, b in enumerate(biases):
            require_tensor(f"bias[{i}]", b, ndim=2, dtypes=FLOAT_DTYPES)
            require_shape(f"bias[{i}]", b, (t, x.shape[1]), "[tokens, hidden]")
        _config(config)
        _stream_args(previous_event, async_finish, allocate_on_comm_stream)
        with torch.no_grad():
            send = x.float() if biases and x.dtype != torch.float32 else x  # sum and bias rounded once
            if handle.moe is None:
                combined = _sum_rows(send, handle.src_rows, t)
                cw = None if topk_weights is None else _sum_rows(topk_weights, handle.src_rows, t).float()
            else:
                with self._pin():
                    combined, cw = launch.moe_combine(send.contiguous(), handle.moe, probs=None if topk_weights is None
                                                      else topk_weights.contiguous(), async_finish=async_finish,
                                                      allocate_on_comm_stream=allocate_on_comm_stream)
            if biases:
                combined = combined.float() + sum(b.float() for b in biases)
            combined = combined.to(x.dtype)
        return combined, cw, EventOverlap(EventHandle())
