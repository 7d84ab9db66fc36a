"""Checks of context-parallel (ring) attention: a float64 oracle, an in-process ring of threads, and
one ring case run end to end on any device and backend.

:func:`check_ring_case` runs the ring driver of ``turbo_core.ops.attention_cp`` (forward and
backward, every step's calls through the dispatcher) for ``R`` ranks as threads of this process,
joined by :class:`ThreadRing` (the ``Ring`` interface over in-memory mailboxes), and compares each
rank's results with :func:`attention_oracle` on the whole sequence: a backend's attention primitives
pass if ring attention built on them does. No process group, so it runs on one GPU, or on the CPU
for kernels that run in an interpreter.
"""

from __future__ import annotations

import contextlib
import queue
import threading

import torch

from turbo_core.dispatch.manager import use_backend
from turbo_core.ops.attention_cp.layout import usp_positions, usp_varlen_positions
from turbo_core.ops.attention_cp.ring import RingPlan, ring_backward, ring_forward
from turbo_core.ops.attention_cp.steps import Kernels
from turbo_core.testing.numerics import assert_close_normwise, snr_db

__all__ = ["FP8_SNR_DB", "ThreadRing", "attention_oracle", "check_ring_case"]

#: The FP8 attention gate of the attention spec: SNR against unquantized float64 math.
FP8_SNR_DB = 20.0

_TIMEOUT_S = 120.0


def _dense_oracle(q, k, v, causal: bool, scale: float, window: tuple[int, int]):
    """``q [b, s_q, h_q, d]``, ``k/v [b, s_k, h_kv, d]`` -> out ``[b, s_q, h_q, d_v]``, lse ``[b, h_q, s_q]``."""
    group = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    s = (qh @ kh.transpose(-1, -2)) * scale
    s_q, s_k = q.shape[1], k.shape[1]
    key = torch.arange(s_k, device=q.device)[None, :]
    diag = torch.arange(s_q, device=q.device)[:, None] + s_k - s_q
    left, right = window[0], (0 if causal else window[1])
    seen = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        seen &= key <= diag + right
    if left >= 0:
        seen &= key >= diag - left
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.where(seen.any(-1)[:, None], torch.softmax(s, dim=-1), torch.zeros_like(s))
    return (p @ vh).transpose(1, 2), lse


def attention_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                     scale: float | None = None, window: tuple[int, int] = (-1, -1), cu_q: list[int] | None = None,
                     cu_k: list[int] | None = None):
    """Softmax attention in the inputs' dtype (pass float64), differentiable: ``(out, lse)``.

    Dense ``[b, s, h, d]`` (causal and ``window = (left, right)`` aligned to the bottom-right
    corner, -1 unbounded; GQA by head groups), or THD ``[t, h, d]``
    with the offsets ``cu_q``/``cu_k`` (Python lists; rows past the last offset: out 0, lse -inf).
    ``lse``: ``[b, h_q, s_q]`` / ``[h_q, t_q]``; ``-inf`` where a row sees no key.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if cu_q is None:
        return _dense_oracle(q, k, v, causal, scale, window)
    outs, lses = [], []
    for (a, b), (c, d) in zip(zip(cu_q, cu_q[1:], strict=False), zip(cu_k, cu_k[1:], strict=False), strict=True):
        o, s = _dense_oracle(q[None, a:b], k[None, c:d], v[None, c:d], causal, scale, window)
        outs.append(o[0])
        lses.append(s[0])
    pad = q.shape[0] - cu_q[-1]
    outs.append(q.new_zeros(pad, q.shape[1], v.shape[-1]))
    lses.append(q.new_full((q.shape[1], pad), float("-inf")))
    return torch.cat(outs), torch.cat(lses, dim=1)


class _Pending:
    def __init__(self, ring: ThreadRing, box: queue.Queue) -> None:
        self._ring, self._box = ring, box

    def wait(self) -> torch.Tensor:
        # the only place a rank blocks: it lets the other ranks run meanwhile
        self._ring.turn.release()
        try:
            waited = 0.0
            while True:
                if self._ring.failed.is_set():
                    raise RuntimeError("another ring rank failed")
                try:
                    return self._box.get(timeout=0.05)
                except queue.Empty:
                    waited += 0.05
                    if waited > _TIMEOUT_S:
                        raise TimeoutError(f"no message within {_TIMEOUT_S} s") from None
        finally:
            self._ring.turn.acquire()


class _RingMember:
    """Rank ``rank`` of a :class:`ThreadRing`: the ``Ring`` interface (``size``, ``rank``, ``start``)."""

    def __init__(self, ring: ThreadRing, rank: int) -> None:
        self._ring, self.rank, self.size = ring, rank, ring.size

    def start(self, send: torch.Tensor, tag: int) -> _Pending:
        self._ring.box((self.rank + 1) % self.size, tag).put(send.clone())
        return _Pending(self._ring, self._ring.box(self.rank, tag))


class ThreadRing:
    """A ring of ``size`` ranks that are threads of one process: what a rank starts to send arrives,
    in order per tag, in the next rank's mailbox. One rank runs at a time (``turn``), and a rank
    yields its turn only while it waits for a message, so kernels never run concurrently (the
    Triton interpreter is not thread-safe) and a failing rank stops the others (``failed``)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.turn = threading.Lock()
        self.failed = threading.Event()
        self._boxes: dict[tuple[int, int], queue.Queue] = {}
        self._lock = threading.Lock()

    def box(self, rank: int, tag: int) -> queue.Queue:
        with self._lock:
            return self._boxes.setdefault((rank, tag), queue.Queue())

    def member(self, rank: int) -> _RingMember:
        return _RingMember(self, rank)

    def run(self, fn) -> list:
        """``[fn(0), ..., fn(size - 1)]``, each rank on its own thread; the first exception is raised."""
        results: list = [None] * self.size
        errors: list = []

        def body(rank: int) -> None:
            with self.turn:
                try:
                    results[rank] = fn(rank)
                except BaseException as exc:  # reported below, on the caller's thread
                    errors.append(exc)
                    self.failed.set()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(2 * _TIMEOUT_S)
        if errors:
            raise errors[0]
        if any(t.is_alive() for t in threads):
            raise TimeoutError(f"a ring rank did not finish within {2 * _TIMEOUT_S} s")
        return results


def _inputs(shape_q, shape_kv, d_v: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(shape_kv, generator=g, dtype=torch.float64)
    v = torch.randn((*shape_kv[:-1], d_v), generator=g, dtype=torch.float64)
    dout = torch.randn((*shape_q[:-1], d_v), generator=g, dtype=torch.float64)
    return q, k, v, dout


def _compare(what: str, got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, fp8: bool) -> None:
    if fp8:
        db = snr_db(want, got)
        assert db >= FP8_SNR_DB, f"{what}: SNR {db:.1f} dB < {FP8_SNR_DB} dB"
    else:
        assert_close_normwise(got, want, dtype=dtype, what=what)


def check_ring_case(device: torch.device | str, *, ring_size: int, layout: str, causal: bool, varlen: bool = False,
                    fp8: bool = False, dtype: torch.dtype = torch.float32, backend: str | None = None,
                    heads: tuple[int, int] = (2, 1), head_dim: int = 16, seqlen: int = 32, seed: int = 0) -> None:
    """Run ring attention (forward and backward) for ``ring_size`` thread ranks on ``device`` and
    assert that out, lse and the gradients match :func:`attention_oracle` on the whole sequence
    (dtype's normwise gate; FP8: SNR >= ``FP8_SNR_DB``, lse within 0.25). ``backend`` pins every
    primitive call (``None``: the dispatcher's selection). Varlen packs sequences of ``seqlen``,
    ``seqlen / 2`` and ``3 seqlen / 2`` rows plus ``2 ring_size`` rows of padding; ``seqlen`` must
    split over ``4 ring_size`` (zigzag)."""
    h_q, h_kv = heads
    device = torch.device(device)
    if varlen:
        lens = [seqlen, seqlen // 2, 3 * seqlen // 2]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        total = cu[-1] + 2 * ring_size
        q, k, v, dout = _inputs((total, h_q, head_dim), (total, h_kv, head_dim), head_dim, seed)
        positions = [usp_varlen_positions(cu, total, ring_rank=r, ring_size=ring_size, ring_layout=layout)
                     for r in range(ring_size)]
        seq_dim, max_len = 0, max(lens)
    else:
        cu, total = None, seqlen
        q, k, v, dout = _inputs((2, seqlen, h_q, head_dim), (2, seqlen, h_kv, head_dim), head_dim, seed)
        positions = [usp_positions(seqlen, ring_rank=r, ring_size=ring_size, ring_layout=layout)
                     for r in range(ring_size)]
        seq_dim, max_len = 1, 0
    # the oracle sees the inputs as the kernels do (rounded to dtype)
    q, k, v, dout = (t.to(dtype).to(torch.float64) for t in (q, k, v, dout))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want_out, want_lse = attention_oracle(*leaves, causal=causal, cu_q=cu, cu_k=cu)
    want_out.backward(dout)
    want = (want_out.detach(), want_lse.detach(), *(t.grad for t in leaves))

    cu_local = None
    if varlen:
        cu_local = torch.tensor([c // ring_size for c in cu], dtype=torch.int32, device=device)
    ring = ThreadRing(ring_size)
    scale = head_dim ** -0.5

    def rank_fn(rank: int):
        pos = positions[rank].to(device)
        local = [t.to(device=device, dtype=dtype).index_select(seq_dim, pos) for t in (q, k, v, dout)]
        kern = Kernels(fp8=fp8, scale=scale, deterministic=False)
        plan = RingPlan(causal=causal, layout=layout, cu_q=cu_local, cu_k=cu_local,
                        max_q=-(-max_len // ring_size), max_k=-(-max_len // ring_size))
        member = ring.member(rank)
        with use_backend(backend) if backend else contextlib.nullcontext():
            out, lse, backends = ring_forward(kern, member, plan, *local[:3])
            grads = ring_backward(kern, member, plan, local[3], *local[:3], out, lse, backends)
        return out, lse, *grads

    results = ring.run(rank_fn)
    names = ("out", "lse", "dq", "dk", "dv")
    for i, name in enumerate(names):
        got = torch.zeros_like(want[i])
        lse_dim = -1 if name == "lse" else seq_dim
        for rank, res in enumerate(results):
            got.index_copy_(lse_dim if lse_dim >= 0 else got.dim() - 1, positions[rank],
                            res[i].detach().to("cpu", torch.float64))
        what = f"{name} (ring {ring_size}, {layout}, causal={causal}, varlen={varlen}, fp8={fp8}, {dtype})"
        if name == "lse":
            finite = torch.isfinite(want[i])
            assert torch.equal(torch.isfinite(got), finite), f"{what}: -inf rows differ"
            err = (got[finite] - want[i][finite]).abs().max().item() if finite.any() else 0.0
            # E4M3 scores move the lse of a row with few keys by ~0.1 (flash_attn_fp8_func's as well)
            limit = 0.25 if fp8 else 1e-3
            assert err <= limit, f"{what}: max |error| {err:.3g} > {limit}"
        else:
            _compare(what, got, want[i], dtype, fp8)
