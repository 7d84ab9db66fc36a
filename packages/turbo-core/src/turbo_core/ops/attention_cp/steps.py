"""One attention call of a context-parallel step, through the dispatcher's attention primitives.

:class:`Kernels` runs a :class:`Call` on ``attention_fwd``/``attention_bwd`` (or the FP8 pair), with
the backward pinned to the backend its forward ran on. :func:`step_call` builds the call of a ring
step from the step kind (``layout.step_kind``): which query rows and which key/value rows take
part, and whether the local causal mask applies.

Dense steps slice the sequence dim (views). Varlen steps keep every row and describe the halves with
offsets instead: each sequence ``i`` (local rows ``[a_i, a_i + 2 c_i)``) becomes two segments, so that
``"kv_front"`` pairs all its queries with keys ``[a_i, a_i + c_i)`` (and no query with the back half),
and ``"q_back"`` pairs queries ``[a_i + c_i, a_i + 2 c_i)`` with all its keys (and the front queries
with none: out 0, lse -inf, which the merge weighs 0). No host sync, no gather.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from turbo_core.dispatch.launch import attention as launch
from turbo_core.dispatch.specs.attention import (
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
)
from turbo_core.ops.attention_cp.layout import CAUSAL, FULL, KV_FRONT, Q_BACK

__all__ = ["Call", "Kernels", "step_call"]


@dataclass(frozen=True, eq=False)
class Call:
    """One attention call: q ``[b, s_q, h_q, d]`` / ``[t_q, h_q, d]``, k, v likewise; ``rows``: the
    query rows it covers (``None``: all; else a slice of the sequence dim); ``kv_rows`` likewise for
    keys and values."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    window: tuple[int, int] = (-1, -1)
    cu_q: torch.Tensor | None = None
    cu_k: torch.Tensor | None = None
    max_q: int = 0
    max_k: int = 0
    rows: slice | None = None
    kv_rows: slice | None = None


class Kernels:
    """The attention primitives one context-parallel call runs on: ``fp8`` picks
    ``attention_fp8_fwd``/``_bwd`` (dense only) over ``attention_fwd``/``_bwd``."""

    def __init__(self, *, fp8: bool, scale: float, deterministic: bool) -> None:
        self.fp8, self.scale, self.deterministic = fp8, scale, deterministic

    def _fwd_args(self, c: Call):
        if self.fp8:
            return AttentionFp8FwdArgs(c.q, c.k, c.v, self.scale, c.causal, c.window, 0.0, self.deterministic)
        return AttentionFwdArgs(c.q, c.k, c.v, c.cu_q, c.cu_k, c.max_q, c.max_k, self.scale, c.causal, c.window,
                                None, 0.0, self.deterministic)

    def fwd(self, c: Call, backend: str | None = None) -> tuple[torch.Tensor, torch.Tensor, str | None]:
        """``(out, lse, backend)``; on ``backend`` when given, else the dispatcher's selection."""
        args = self._fwd_args(c)
        if torch.compiler.is_compiling():  # the custom op (the backward then selects its own backend)
            out, lse = (launch.attention_fp8_fwd if self.fp8 else launch.attention_fwd)(args)
            return out, lse, None
        if backend is None:
            run = launch.attention_fp8_fwd_eager if self.fp8 else launch.attention_fwd_eager
            return run(args)
        run = launch.attention_fp8_fwd if self.fp8 else launch.attention_fwd
        out, lse = run(args, backend=backend)
        return out, lse, backend

    def bwd(self, c: Call, dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
            backend: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(dq, dk, dv)`` of the call, from its forward's ``out`` and ``lse``, on ``backend``."""
        dout = dout.contiguous()
        if self.fp8:
            args = AttentionFp8BwdArgs(dout, c.q, c.k, c.v, out, lse, self.scale, c.causal, c.window, 0.0,
                                       self.deterministic)
            return launch.attention_fp8_bwd(args, backend=backend)
        args = AttentionBwdArgs(dout, c.q, c.k, c.v, out, lse, c.cu_q, c.cu_k, c.max_q, c.max_k, self.scale,
                                c.causal, c.window, None, 0.0, self.deterministic)
        dq, dk, dv, _ = launch.attention_bwd(args, backend=backend)
        return dq, dk, dv


def with_v(c: Call, v: torch.Tensor) -> Call:
    """The same call with other values (same rows)."""
    return replace(c, v=v)


def _interleave(a: torch.Tensor, b: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """``[a_0, b_0, a_1, b_1, ..., last]`` (int32)."""
    return torch.cat([torch.stack([a, b], dim=1).flatten(), last.reshape(1)]).to(torch.int32)


def step_call(kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, cu_q: torch.Tensor | None = None,
              cu_k: torch.Tensor | None = None, max_q: int = 0, max_k: int = 0) -> Call:
    """The call of a ring step of ``kind`` on the local queries and one key/value block (the
    ring-local offsets ``cu_q``/``cu_k`` and maxima for varlen)."""
    if kind in (FULL, CAUSAL):
        return Call(q, k, v, kind == CAUSAL, cu_q=cu_q, cu_k=cu_k, max_q=max_q, max_k=max_k)
    if cu_q is None:
        if kind == KV_FRONT:
            c = k.shape[1] // 2
            return Call(q, k[:, :c], v[:, :c], False, kv_rows=slice(0, c))
        assert kind == Q_BACK
        c = q.shape[1] // 2
        return Call(q[:, c:], k, v, False, rows=slice(c, None))
    # zigzag steps exist under a causal mask only, where cu_q and cu_k are the same offsets
    starts, last = cu_q[:-1], cu_q[-1]
    mids = starts + (cu_q[1:] - starts) // 2
    if kind == KV_FRONT:
        return Call(q, k, v, False, cu_q=_interleave(starts, cu_q[1:], last), cu_k=_interleave(starts, mids, last),
                    max_q=max_q, max_k=(max_k + 1) // 2)
    assert kind == Q_BACK
    return Call(q, k, v, False, cu_q=_interleave(starts, mids, last), cu_k=_interleave(starts, starts, last),
                max_q=(max_q + 1) // 2, max_k=max_k)
