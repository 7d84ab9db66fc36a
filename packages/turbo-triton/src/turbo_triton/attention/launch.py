"""``attention_fwd`` / ``attention_bwd`` on Triton: capability check, tiles and launchers.

Dense ``[b, s, h, d]`` and varlen THD (``cu_seqlens``) calls share the kernels: varlen passes
batch strides of 0 and each program reads its sequence's start and length from ``cu_seqlens``
on the device (no host sync; the grid is sized by ``max_seqlen_*``). Any strides with a unit
head-dim stride are read in place; on Hopper the forward reads contiguous 16-bit q/k/v with
power-of-two head dims through TMA descriptors. The backward is deterministic when asked: ``dq``
then comes from its own kernel instead of fp32 atomics (see ``bwd_kernels``); it also is when
that kernel is the faster one (``configs.atomic_dq``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs, lse_shape, out_shape
from turbo_triton import _runtime
from turbo_triton.attention import configs
from turbo_triton.attention.bwd_kernels import (
    attn_bwd_dkdv_kernel,
    attn_bwd_dq_kernel,
    attn_bwd_preprocess_kernel,
)
from turbo_triton.attention.configs import Tile
from turbo_triton.attention.fwd_kernel import attn_fwd_kernel
from turbo_triton.intmath import cdiv
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest head dim (of q/k or v) the kernels keep in registers.
MAX_HEAD_DIM = 256


def input_reason(args, what: str = "TRITON attention") -> str | None:
    """Device, input dtype, dropout and head-dim limits (shared with the FP8 kernels)."""
    reason = _runtime.device_reason(args.q)
    if reason:
        return reason
    if args.q.dtype not in _DTYPES:
        return f"{what} takes fp16/bf16/fp32 inputs, not {args.q.dtype}"
    if args.dropout_p != 0.0:
        return f"{what} implements dropout_p=0.0 only (got {args.dropout_p})"
    d_qk, d_v = args.q.shape[-1], args.v.shape[-1]
    if max(d_qk, d_v) > MAX_HEAD_DIM:
        return f"{what} serves head dims up to {MAX_HEAD_DIM} (got q/k {d_qk}, v {d_v})"
    return None


def can_handle(args: AttentionFwdArgs | AttentionBwdArgs) -> str | None:
    return input_reason(args)


# -- argument plumbing ---------------------------------------------------------------------------

def _bsh(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    """(batch, sequence, head) strides; varlen tensors have no batch stride."""
    if varlen:
        return 0, t.stride(0), t.stride(1)
    return t.stride(0), t.stride(1), t.stride(2)


def _lse_strides(lse: torch.Tensor, varlen: bool) -> tuple[int, int]:
    """(batch, head) strides of lse; its rows are contiguous (checked by the allocation)."""
    if varlen:
        return 0, lse.stride(0)
    return lse.stride(0), lse.stride(1)


def window_bounds(args) -> tuple[int, int, bool, bool]:
    """``(left, right, has_left, has_right)`` for the kernels: causal sets ``right = 0``; an unbounded
    side (-1) becomes 0 with its flag off."""
    left, right = args.window_size
    if args.causal:
        right = 0
    return max(left, 0), max(right, 0), left >= 0, right >= 0


class _Problem:
    """Shapes and launch facts shared by the forward and the backward."""

    def __init__(self, args) -> None:
        q, k, v = args.q, args.k, args.v
        self.varlen = args.is_varlen
        self.h_q, self.h_kv = q.shape[-2], k.shape[-2]
        self.group = self.h_q // self.h_kv
        self.d_qk, self.d_v = q.shape[-1], v.shape[-1]
        if self.varlen:
            self.batch = args.cu_seqlens_q.shape[0] - 1
            self.seq_q, self.seq_k = int(args.max_seqlen_q), int(args.max_seqlen_k)
            self.cu_q, self.cu_k = args.cu_seqlens_q, args.cu_seqlens_k
        else:
            self.batch = q.shape[0]
            self.seq_q, self.seq_k = q.shape[1], k.shape[1]
            self.cu_q = self.cu_k = q.new_empty(1, dtype=torch.int32)
        self.left, self.right, self.has_left, self.has_right = window_bounds(args)
        self.scale = args.scale
        self.interp = _runtime.interpreting()
        self.arch = _runtime.device_facts(q)[0]
        self.upcast = self.interp and q.dtype == torch.bfloat16
        self.precision = "ieee" if q.dtype == torch.float32 else "tf32"
        self.block_dqk, self.block_dv = configs.block_d(self.d_qk), configs.block_d(self.d_v)
        self.elem = q.element_size()

    def tile(self, kernel: str) -> Tile:
        walk = self.seq_q if kernel == "dkdv" else self.seq_k
        return configs.pick(kernel, self.arch, max(self.d_qk, self.d_v), self.elem, walk, d_v=self.d_v)

    def consts(self) -> dict:
        return dict(BLOCK_DQK=self.block_dqk, BLOCK_DV=self.block_dv, D_QK=self.d_qk, D_V=self.d_v,
                    VARLEN=self.varlen, HAS_LEFT=self.has_left, HAS_RIGHT=self.has_right, UPCAST=self.upcast,
                    PRECISION=self.precision)


def _shrink(tile: Tile) -> Tile | None:
    """The next smaller tile when one needs more shared memory than the device has: a stage fewer,
    else half the key rows, else half the query rows."""
    if tile.num_stages > 1:
        return replace(tile, num_stages=tile.num_stages - 1)
    if tile.block_n > 16:
        return replace(tile, block_n=tile.block_n // 2, num_stages=1)
    if tile.block_m > 16:
        return replace(tile, block_m=tile.block_m // 2, block_n=max(16, tile.block_n // 2),
                       num_warps=max(4, tile.num_warps // 2), num_stages=1)
    return None


def launch_tiled(kernel, grid_of, tile: Tile, key: tuple, args_of, shrink=_shrink, **consts) -> None:
    """Launch ``kernel`` on the grid ``grid_of(tile)`` with the positional arguments ``args_of(tile)``
    (descriptors depend on the tile); ``_runtime.launch_fitted`` retries smaller tiles on
    OutOfResources and remembers the one that fitted per ``key``. An empty grid launches nothing."""

    takes_ws = "WS" in kernel.arg_names
    if tile.warp_specialize and not takes_ws:
        raise ValueError(f"attention tile {tile}: {kernel.fn.__name__} has no warp-specialized loop")

    def run(t: Tile) -> None:
        grid = grid_of(t)
        if min(grid) > 0:
            ws = {"WS": t.warp_specialize} if takes_ws else {}
            fast_kernel(kernel)[grid](*args_of(t), BLOCK_M=t.block_m, BLOCK_N=t.block_n, num_warps=t.num_warps,
                         num_stages=t.num_stages, **ws, **consts)

    _runtime.launch_fitted(run, tile, (kernel.fn.__name__, *key), shrink=shrink)


# -- forward -------------------------------------------------------------------------------------

def _tma_ok(args: AttentionFwdArgs, p: _Problem) -> bool:
    """Tensor descriptors for q/k/v: Hopper, contiguous tensors (dense bshd or THD), power-of-two
    head dims (a block is one head's full width), 16-bit inputs."""
    if p.interp or not _runtime.tma_arch(p.arch) or args.q.element_size() != 2:
        return False
    if p.d_qk != p.block_dqk or p.d_v != p.block_dv:
        return False
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (args.q, args.k, args.v))


def _descriptors(args: AttentionFwdArgs, p: _Problem, tile: Tile):
    from triton.tools.tensor_descriptor import TensorDescriptor

    def desc(t, block_rows, d):
        return TensorDescriptor.from_tensor(t.view(-1, t.shape[-2] * d), [block_rows, d])

    return (desc(args.q, tile.block_m, p.d_qk), desc(args.k, tile.block_n, p.d_qk),
            desc(args.v, tile.block_n, p.d_v))


def attention_fwd(args: AttentionFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)``; see ``turbo_core.dispatch.specs.attention`` for shapes and semantics."""
    q, k, v = args.q, args.k, args.v
    p = _Problem(args)
    alloc = torch.zeros if p.varlen else torch.empty
    out = alloc(out_shape(q, v), dtype=q.dtype, device=q.device)
    if p.varlen:  # rows of no sequence: lse -inf
        lse = torch.full(lse_shape(q, True), float("-inf"), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty(lse_shape(q, False), dtype=torch.float32, device=q.device)
    sink = args.sink if args.sink is not None else lse
    tma = _tma_ok(args, p)
    rest = (out, lse, sink, p.cu_q, p.cu_k,
            *_bsh(q, p.varlen), *_bsh(k, p.varlen), *_bsh(v, p.varlen), *_bsh(out, p.varlen),
            *_lse_strides(lse, p.varlen), p.seq_q, p.seq_k, p.group, p.scale, p.left, p.right)
    launch_tiled(attn_fwd_kernel, lambda t: (cdiv(p.seq_q, t.block_m), p.h_q, p.batch), p.tile("fwd"),
                 ("fwd", tma, q.dtype, p.d_qk, p.d_v),
                 lambda t: (*(_descriptors(args, p, t) if tma else (q, k, v)), *rest),
                 HAS_SINK=args.sink is not None, TMA=tma, **p.consts())
    return out, lse


# -- backward ------------------------------------------------------------------------------------

def _preprocess(args: AttentionBwdArgs, p: _Problem) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``delta = rowsum(dout * out)`` (lse's layout) and ``dsink`` (fp32 ``[h_q]``) or None."""
    lse = args.lse
    delta = torch.empty_like(lse)
    block_m = 16 if p.interp else 64
    tiles = cdiv(p.seq_q, block_m)
    has_sink = args.sink is not None
    part = torch.zeros((p.batch, p.h_q, tiles) if has_sink else (1,), dtype=torch.float32, device=lse.device)
    grid = (tiles, p.h_q, p.batch)
    if min(grid) > 0:
        fast_kernel(attn_bwd_preprocess_kernel)[grid](
            args.out, args.dout, lse, delta, args.sink if has_sink else lse, part, p.cu_q,
            *_bsh(args.out, p.varlen), *_bsh(args.dout, p.varlen), *_lse_strides(lse, p.varlen), p.seq_q,
            BLOCK_M=block_m, BLOCK_DV=p.block_dv, D_V=p.d_v, VARLEN=p.varlen, HAS_SINK=has_sink, num_warps=4)
    dsink = part.sum(dim=(0, 2)) if has_sink else None
    return delta, dsink


def attention_bwd(args: AttentionBwdArgs):
    """``(dq, dk, dv, dsink | None)``; bit-reproducible when ``args.deterministic``."""
    q, k, v, dout, lse = args.q, args.k, args.v, args.dout, args.lse
    p = _Problem(args)
    if lse.stride(-1) != 1:
        lse = lse.contiguous()
    delta, dsink = _preprocess(args, p)
    alloc = torch.zeros if p.varlen else torch.empty
    dk = alloc(k.shape, dtype=k.dtype, device=k.device)
    dv = alloc(v.shape, dtype=v.dtype, device=v.device)
    atomic = not args.deterministic and configs.atomic_dq(p.arch, max(p.d_qk, p.d_v), args.causal)
    dq = torch.zeros(q.shape, dtype=torch.float32 if atomic else q.dtype, device=q.device) if atomic or p.varlen \
        else torch.empty(q.shape, dtype=q.dtype, device=q.device)
    common = (*_bsh(q, p.varlen), *_bsh(k, p.varlen), *_bsh(v, p.varlen), *_bsh(dout, p.varlen),
              *_bsh(dq, p.varlen))
    tail = (*_lse_strides(lse, p.varlen), p.seq_q, p.seq_k, p.group, p.scale, p.left, p.right)
    key = (q.dtype, p.d_qk, p.d_v)
    dkdv_args = (q, k, v, dout, lse, delta, dq, dk, dv, p.cu_q, p.cu_k, *common,
                 *_bsh(dk, p.varlen), *_bsh(dv, p.varlen), *tail)
    launch_tiled(attn_bwd_dkdv_kernel, lambda t: (cdiv(p.seq_k, t.block_n), p.h_kv, p.batch),
                 p.tile("dkdv"), ("dkdv", atomic, *key), lambda t: dkdv_args, ATOMIC_DQ=atomic, **p.consts())
    if atomic:
        dq = dq.to(q.dtype)
    else:
        dq_args = (q, k, v, dout, lse, delta, dq, p.cu_q, p.cu_k, *common, *tail)
        launch_tiled(attn_bwd_dq_kernel, lambda t: (cdiv(p.seq_q, t.block_m), p.h_q, p.batch),
                     p.tile("dq"), ("dq", *key), lambda t: dq_args, **p.consts())
    return dq, dk, dv, dsink
