"""Backend DEEP_EP_BUFFER: ``moe_dispatch`` / ``moe_combine`` driven through a DeepEP ``Buffer``.

Any module exposing DeepEP's normal-mode ``Buffer`` API serves: ``deep_ep`` (DeepEP, and ROCm's
DeepEP port under the same name), ``uccl.ep`` / ``uccl_ep`` (UCCL-EP). ``TURBO_DEEPEP_MODULE``
(comma-separated module names) replaces that list. The API used (DeepEP's names):

- ``Buffer(group, num_nvl_bytes, num_rdma_bytes)``, sized from ``Buffer.get_dispatch_config(W)`` /
  ``get_combine_config(W)`` and their ``get_nvl_buffer_size_hint(hidden_bytes, W)`` /
  ``get_rdma_buffer_size_hint(hidden_bytes, W)``; one buffer per process group, reused while big
  enough (a larger hidden size re-creates it, on every rank alike: the constructor is collective);
- ``get_dispatch_layout(topk_idx, num_experts, previous_event=, async_finish=,
  allocate_on_comm_stream=)`` -> ``(num_tokens_per_rank, num_tokens_per_rdma_rank,
  num_tokens_per_expert, is_token_in_rank, event)``;
- ``dispatch(x | (x, x_scales), handle=, num_tokens_per_rank=, num_tokens_per_rdma_rank=,
  is_token_in_rank=, num_tokens_per_expert=, topk_idx=, topk_weights=, expert_alignment=,
  num_worst_tokens=, config=, previous_event=, async_finish=, allocate_on_comm_stream=)`` ->
  ``(recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event)``;
  with ``handle=`` it is the cached dispatch;
- ``combine(x, handle, topk_weights=, config=, previous_event=, async_finish=,
  allocate_on_comm_stream=)`` -> ``(combined_x, combined_topk_weights, event)``;
- ``Buffer.capture()`` (an event on the current stream) and ``event.current_stream_wait()``.

DeepEP's ``recv_topk_idx`` are already local ids (-1 elsewhere); its worst-case mode leaves the
padding rows of ``recv_x`` uninitialised and sets their ids to -1: this adapter zeroes those rows
and the probs of -1 slots, and counts ``tokens_per_expert`` on the device from the ids (DeepEP's
count comes back as a host list, and is empty in the worst-case mode). With ``async_finish`` or
``allocate_on_comm_stream`` the call runs asynchronously on DeepEP's stream after an event captured
on the current stream, and the current stream then waits for it (a device-side wait, no host sync).

What DeepEP takes (declined otherwise, with the reason): GPU tensors; a group of 2+ ranks of a size
the module has a config for; ``x`` bf16, or float8_e4m3fn with fp32 ``[T, H / 128]`` scales; hidden
rows a multiple of 16 bytes; combine of bf16 rows; ``num_worst_tokens`` within one node (<= 8 ranks).

The argument translation below is pure (CPU-testable with a fake ``Buffer``); the kernels at the
end import the module on first use.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any, NamedTuple

import torch

from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs, MoeDispatchHandle, group_size

__all__ = [
    "BACKEND", "BUFFERS", "DEFAULT_MODULES", "AdapterState", "BufferCache", "buffer_sizes", "can_handle_combine",
    "can_handle_dispatch", "clear_module_cache", "combine_kwargs", "dispatch_kwargs", "from_dispatch_result",
    "hidden_bytes", "layout_kwargs", "load_module", "module_candidates", "moe_combine", "moe_dispatch", "probe",
    "topk_idx_dtype", "zero_padding_rows",
]

BACKEND = "DEEP_EP_BUFFER"
DEFAULT_MODULES = ("deep_ep", "uccl.ep", "uccl_ep")
MODULE_ENV = "TURBO_DEEPEP_MODULE"
_NVL_PEERS = 8  # DeepEP's ranks per NVLink domain: larger groups take the internode path
_FP8_BLOCK = 128  # DeepEP's FP8 scale block along the hidden dimension
_REQUIRED = ("get_dispatch_layout", "dispatch", "combine", "get_dispatch_config", "get_combine_config", "capture")


# -- finding the module --------------------------------------------------------------------------

def module_candidates() -> tuple[str, ...]:
    env = os.environ.get(MODULE_ENV, "").strip()
    if env:
        return tuple(m.strip() for m in env.split(",") if m.strip())
    return DEFAULT_MODULES


_lock = threading.Lock()
_loaded: dict[tuple[str, ...], tuple[Any, str | None]] = {}


def load_module(candidates: tuple[str, ...] | None = None) -> tuple[Any, str | None]:
    """``(module, None)`` for the first candidate whose ``Buffer`` has DeepEP's API, else
    ``(None, reason)`` naming what each candidate lacked. Cached per candidate list."""
    names = module_candidates() if candidates is None else tuple(candidates)
    with _lock:
        if names in _loaded:
            return _loaded[names]
        problems = []
        found: tuple[Any, str | None] = (None, None)
        for name in names:
            try:
                mod = importlib.import_module(name)
            except Exception as exc:  # ImportError, or a broken extension: try the next one
                problems.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            buf = getattr(mod, "Buffer", None)
            missing = [a for a in _REQUIRED if buf is None or not hasattr(buf, a)]
            if missing:
                problems.append(f"{name}: no Buffer with {', '.join(missing)}")
                continue
            found = (mod, None)
            break
        if found[0] is None:
            found = (None, "no module with DeepEP's Buffer API is importable (" + "; ".join(problems) + ")")
        _loaded[names] = found
        return found


def clear_module_cache() -> None:
    """Forget which module :func:`load_module` found (after changing ``TURBO_DEEPEP_MODULE``)."""
    with _lock:
        _loaded.clear()


def probe() -> str | None:
    """Availability of DEEP_EP_BUFFER: a module with DeepEP's ``Buffer`` API imports."""
    return load_module()[1]


# -- pure argument translation -------------------------------------------------------------------

def hidden_bytes(x: torch.Tensor) -> int:
    """Bytes per token row that the buffer must hold: fp8 rows are sized as bf16 ones (DeepEP's
    combine sends bf16 rows back through the same buffer)."""
    return x.shape[1] * max(x.element_size(), 2)


def buffer_sizes(buffer_cls: Any, hidden: int, world: int) -> tuple[int, int]:
    """``(num_nvl_bytes, num_rdma_bytes)``: the larger of the dispatch and combine configs' hints."""
    nvl = rdma = 0
    for config in (buffer_cls.get_dispatch_config(world), buffer_cls.get_combine_config(world)):
        nvl = max(nvl, int(config.get_nvl_buffer_size_hint(hidden, world)))
        rdma = max(rdma, int(config.get_rdma_buffer_size_hint(hidden, world)))
    return nvl, rdma


def topk_idx_dtype(module: Any) -> torch.dtype:
    """The dtype DeepEP wants for ``topk_idx``: ``module.topk_idx_t`` where defined, else int64."""
    dt = getattr(module, "topk_idx_t", None)
    return dt if isinstance(dt, torch.dtype) else torch.int64


def _stream_kwargs(previous_event: Any, run_async: bool, alloc: bool) -> dict:
    # DeepEP: allocate_on_comm_stream needs previous_event and async_finish (run_async covers both)
    return {"previous_event": previous_event, "async_finish": run_async, "allocate_on_comm_stream": alloc}


def layout_kwargs(topk_idx: torch.Tensor, num_experts: int, previous_event: Any = None,
                  run_async: bool = False, alloc: bool = False) -> dict:
    """Keyword arguments of ``Buffer.get_dispatch_layout``."""
    return {"topk_idx": topk_idx, "num_experts": num_experts, **_stream_kwargs(previous_event, run_async, alloc)}


def dispatch_kwargs(x: torch.Tensor, x_scales: torch.Tensor | None, *, layout: tuple | None = None,
                    topk_idx: torch.Tensor | None = None, topk_weights: torch.Tensor | None = None,
                    handle: Any = None, num_worst_tokens: int = 0, config: Any = None,
                    previous_event: Any = None, run_async: bool = False, alloc: bool = False) -> dict:
    """Keyword arguments of ``Buffer.dispatch``: a fresh dispatch from ``layout`` (the first four
    results of ``get_dispatch_layout``) and the top-k tensors, or a cached one from ``handle``."""
    kw = {"x": x if x_scales is None else (x, x_scales)}
    if handle is not None:
        kw["handle"] = handle
    else:
        per_rank, per_rdma_rank, per_expert, in_rank = layout
        kw.update(num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank,
                  is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                  topk_idx=topk_idx, topk_weights=topk_weights)
    kw.update(expert_alignment=1, num_worst_tokens=num_worst_tokens, config=config,
              **_stream_kwargs(previous_event, run_async, alloc))
    return kw


def combine_kwargs(x: torch.Tensor, handle: Any, topk_weights: torch.Tensor | None, *, config: Any = None,
                   previous_event: Any = None, run_async: bool = False, alloc: bool = False) -> dict:
    """Keyword arguments of ``Buffer.combine``."""
    return {"x": x, "handle": handle, "topk_weights": topk_weights, "config": config,
            **_stream_kwargs(previous_event, run_async, alloc)}


def zero_padding_rows(t: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``t`` (``[R, C]``, any dtype) with the rows where ``valid`` is False set to zero bytes, in place."""
    if t.numel():
        t.view(torch.uint8).masked_fill_(~valid[:, None], 0)
    return t


def from_dispatch_result(result: tuple, *, fp8: bool, indices_dtype: torch.dtype, num_local_experts: int,
                         worst: bool) -> tuple:
    """DeepEP's fresh-dispatch result to ``(recv_x, recv_x_scales, recv_token_indices,
    recv_token_probs, tokens_per_expert, deep_handle, valid_rows, event)``: ids in
    ``indices_dtype`` (-1 kept), probs 0 where the id is -1, tokens_per_expert int64 ``[E_l]``
    counted on the device, and in the worst-case mode the padding rows (no local id) zeroed."""
    from turbo_deepep.all_to_all.layout import count_pairs

    recv, recv_idx, recv_w, _counts_list, deep_handle, event = result
    recv_x, recv_scales = recv if fp8 else (recv, None)
    idx = recv_idx.to(indices_dtype)
    has = idx >= 0
    probs = torch.where(has, recv_w.float(), torch.zeros((), dtype=torch.float32, device=recv_w.device))
    valid = has.any(dim=1) if worst else None
    if worst:
        zero_padding_rows(recv_x, valid)
        if recv_scales is not None:
            zero_padding_rows(recv_scales, valid)
    return recv_x, recv_scales, idx, probs, count_pairs(idx, num_local_experts), deep_handle, valid, event


# -- decline reasons -----------------------------------------------------------------------------

def _common_reason(group: Any, device: torch.device) -> str | None:
    if device.type == "cpu":
        return "DeepEP's Buffer moves GPU tensors only; these tensors are on the CPU"
    world = group_size(group)
    if world < 2:
        return "DeepEP's Buffer needs a process group of 2 or more ranks (single process: TORCH)"
    mod, reason = load_module()
    if mod is None:
        return reason
    for what in ("get_dispatch_config", "get_combine_config"):
        try:
            getattr(mod.Buffer, what)(world)
        except Exception as exc:
            return f"{mod.__name__}.Buffer.{what}({world}) failed: {type(exc).__name__}: {exc}"
    return None


def _x_reason(x: torch.Tensor, scales: torch.Tensor | None) -> str | None:
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if x.dtype == torch.bfloat16 and scales is None:
        pass
    elif fp8 is not None and x.dtype == fp8 and scales is not None:
        if x.shape[1] % _FP8_BLOCK or scales.shape[1] != x.shape[1] // _FP8_BLOCK:
            return (f"DeepEP's FP8 dispatch takes x_scales [T, H / {_FP8_BLOCK}] (one per {_FP8_BLOCK} columns);"
                    f" got H={x.shape[1]}, scales {tuple(scales.shape)}")
    else:
        got = str(x.dtype).replace("torch.", "") + ("" if scales is None else " with scales")
        return f"DeepEP dispatches bf16 tokens or (float8_e4m3fn, fp32 scales); got {got}"
    if (x.shape[1] * x.element_size()) % 16:
        return f"DeepEP needs hidden rows of a multiple of 16 bytes; got {x.shape[1]} x {x.element_size()} bytes"
    return None


def can_handle_dispatch(args: MoeDispatchArgs) -> str | None:
    if args.handle is not None and args.handle.backend != BACKEND:
        return f"the handle was made by backend {args.handle.backend or '(compiled region)'}, not {BACKEND}"
    reason = _common_reason(args.group, args.x.device) or _x_reason(args.x, args.x_scales)
    if reason is None and args.num_worst_tokens > 0 and group_size(args.group) > _NVL_PEERS:
        reason = (f"DeepEP's num_worst_tokens mode is intranode only (<= {_NVL_PEERS} ranks);"
                  f" this group has {group_size(args.group)}")
    return reason


def can_handle_combine(args: MoeCombineArgs) -> str | None:
    if args.handle.backend != BACKEND:
        return f"the handle was made by backend {args.handle.backend or '(compiled region)'}, not {BACKEND}"
    reason = _common_reason(args.group, args.x.device)
    if reason is None and args.x.shape[1] and args.x.dtype != torch.bfloat16:
        reason = f"DeepEP combines bf16 rows; got {str(args.x.dtype).replace('torch.', '')}"
    return reason


# -- the buffer per group ------------------------------------------------------------------------

class BufferCache:
    """One ``Buffer`` per process group (keyed by the group's name), re-created only when a call
    needs more bytes than it has. ``reset()`` forgets them all."""

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, buffer_cls: Any, group: Any, hidden: int) -> Any:
        world = group_size(group)
        nvl, rdma = buffer_sizes(buffer_cls, hidden, world)
        key = str(getattr(group, "group_name", id(group)))
        with self._lock:
            buf = self._buffers.get(key)
            if buf is None or buf.num_nvl_bytes < nvl or buf.num_rdma_bytes < rdma:
                if buf is not None:  # sizes only grow: keep the larger of old and new
                    nvl, rdma = max(nvl, buf.num_nvl_bytes), max(rdma, buf.num_rdma_bytes)
                buf = buffer_cls(group, nvl, rdma)
                self._buffers[key] = buf
            return buf

    def reset(self) -> None:
        with self._lock:
            self._buffers.clear()


BUFFERS = BufferCache()


class AdapterState(NamedTuple):
    """The private part of a DEEP_EP_BUFFER handle: the ``buffer`` and DeepEP's own ``deep_handle``;
    ``num_worst_tokens`` and ``valid`` (bool ``[R]``, rows holding a token) of a worst-case dispatch."""

    buffer: Any
    deep_handle: Any
    num_worst_tokens: int = 0
    valid: torch.Tensor | None = None


# -- kernels -------------------------------------------------------------------------------------

def _begin(buffer: Any, async_finish: bool, alloc: bool) -> dict:
    """Stream arguments: asynchronous after an event on the current stream when either hint is set."""
    run_async = bool(async_finish or alloc)
    return {"previous_event": buffer.capture() if run_async else None, "run_async": run_async, "alloc": alloc}


def _end(event: Any, stream: dict) -> None:
    if stream["run_async"] and event is not None:
        event.current_stream_wait()


def moe_dispatch(args: MoeDispatchArgs, module: Any = None):
    """Fresh or cached dispatch through ``module.Buffer`` (default: :func:`load_module`'s)."""
    x, scales = args.x.contiguous(), None if args.x_scales is None else args.x_scales.contiguous()
    if args.handle is not None:
        st: AdapterState = args.handle.state
        stream = _begin(st.buffer, args.async_finish, args.allocate_on_comm_stream)
        res = st.buffer.dispatch(**dispatch_kwargs(x, scales, handle=st.deep_handle,
                                                   num_worst_tokens=st.num_worst_tokens, **stream))
        _end(res[-1], stream)
        recv_x, recv_scales = res[0] if scales is not None else (res[0], None)
        if st.valid is not None:
            zero_padding_rows(recv_x, st.valid)
            if recv_scales is not None:
                zero_padding_rows(recv_scales, st.valid)
        return recv_x, recv_scales, None, None, None, args.handle
    mod = module if module is not None else load_module()[0]
    group, e, worst = args.group, args.num_experts, args.num_worst_tokens
    buffer = BUFFERS.get(mod.Buffer, group, hidden_bytes(x))
    stream = _begin(buffer, args.async_finish, args.allocate_on_comm_stream)
    topk_idx = args.token_indices.to(topk_idx_dtype(mod)).contiguous()
    weights = args.token_probs.contiguous()
    layout = buffer.get_dispatch_layout(**layout_kwargs(topk_idx, e, **stream))
    if stream["run_async"]:
        stream = {**stream, "previous_event": layout[-1]}
    res = buffer.dispatch(**dispatch_kwargs(x, scales, layout=layout[:4], topk_idx=topk_idx, topk_weights=weights,
                                            num_worst_tokens=worst, **stream))
    recv_x, recv_scales, idx, probs, tpe, deep_handle, valid, event = from_dispatch_result(
        res, fp8=scales is not None, indices_dtype=args.token_indices.dtype, num_local_experts=e // group_size(group),
        worst=worst > 0)
    _end(event, stream)
    state = AdapterState(buffer, deep_handle, worst, valid)
    handle = MoeDispatchHandle(BACKEND, group, x.shape[0], recv_x.shape[0], e // group_size(group), state)
    return recv_x, recv_scales, idx, probs, tpe, handle


def moe_combine(args: MoeCombineArgs):
    st: AdapterState = args.handle.state
    x = args.x.contiguous()
    width = x.shape[1]
    if width == 0:  # only probs to return (a dispatch backward without an x gradient): a dummy row
        x = torch.zeros((x.shape[0], 8), dtype=torch.bfloat16, device=x.device)
    probs = None if args.probs is None else args.probs.contiguous().float()
    stream = _begin(st.buffer, args.async_finish, args.allocate_on_comm_stream)
    combined, cprobs, event = st.buffer.combine(**combine_kwargs(x, st.deep_handle, probs, **stream))
    _end(event, stream)
    if width == 0:
        combined = combined[:, :0]
    return combined.to(args.x.dtype), (None if probs is None else cprobs.float())
