"""``sparse_mla_fwd`` / ``sparse_mla_bwd`` on Triton: capability check, tiles and launchers.

Any strides with unit stride in the last dim are read in place (``kv`` as its ``[num_kv, d_qk]``
view). Tiles: ``Tile(block_m, block_n, num_warps, num_stages)`` is ``block_m`` query heads of one
token by ``block_n`` top-k slots. The GPU tiles follow from the register and shared-memory budget
of DeepSeek's 576/512 layout (a ``block_n x 576`` gathered key tile per stage, a ``block_m x 512``
fp32 accumulator) and are not tuned yet; ``TURBO_TRITON_SPARSE_MLA_TILES="fwd=64,64,8,2;bwd=32,32,8,1"``
overrides them (for sweeps with ``turbo bench sparse-mla``). A tile that needs more shared memory
than the device has is shrunk and retried (``attention.launch.launch_tiled``).

The backward adds ``dkv`` with fp32 atomics (see ``kernels``): it is not bit-reproducible, and the
plugin registers it with ``deterministic=False``.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs, kv_rows, lse_shape, out_shape
from turbo_triton import _runtime
from turbo_triton.attention.configs import Tile, block_d, override
from turbo_triton.attention.launch import launch_tiled
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.sparse_mla.kernels import sparse_mla_bwd_kernel, sparse_mla_fwd_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Widest value part (``kv_lora_rank``) and rope part (``d_qk - kv_lora_rank``) the kernels keep in registers.
MAX_D_V = 512
MAX_D_ROPE = 128
TILES_ENV = "TURBO_TRITON_SPARSE_MLA_TILES"

_INTERP = Tile(16, 16, 4, 1)
_GPU = {"fwd": Tile(64, 64, 8, 2), "bwd": Tile(32, 32, 8, 1)}
_AMD = {"fwd": Tile(64, 32, 8, 1), "bwd": Tile(32, 32, 8, 1)}


def can_handle(args: SparseMlaFwdArgs | SparseMlaBwdArgs) -> str | None:
    reason = _runtime.device_reason(args.q)
    if reason:
        return reason
    if args.q.dtype not in _DTYPES:
        return f"TRITON sparse MLA takes fp16/bf16/fp32 inputs, not {args.q.dtype}"
    d_v = args.kv_lora_rank
    d_r = args.q.shape[-1] - d_v
    if d_v > MAX_D_V or d_r > MAX_D_ROPE:
        return (f"TRITON sparse MLA serves kv_lora_rank up to {MAX_D_V} and rope channels (d_qk - kv_lora_rank) "
                f"up to {MAX_D_ROPE} (got {d_v} and {d_r})")
    return None


def _tile(kernel: str, arch: str, heads: int, elem_bytes: int) -> Tile:
    if arch == "interpreter":
        return _INTERP
    tile = override(kernel, TILES_ENV)
    if tile is None:
        tile = (_AMD if arch.startswith("gfx") else _GPU)[kernel]
        if elem_bytes == 4:  # IEEE fp32 dots: half the rows
            tile = replace(tile, block_m=max(16, tile.block_m // 2), block_n=max(16, tile.block_n // 2))
    return replace(tile, block_m=max(16, min(tile.block_m, next_power_of_2(heads))))


class _Problem:
    """Shapes and compile-time facts shared by the two launchers."""

    def __init__(self, args) -> None:
        q = args.q
        self.kv = kv_rows(args.kv)
        self.tokens, self.heads, d_qk = q.shape
        self.num_kv = self.kv.shape[0]
        self.topk = args.topk_indices.shape[1]
        self.d_v = args.kv_lora_rank
        self.d_r = d_qk - self.d_v
        self.scale = args.softmax_scale
        self.arch = _runtime.device_facts(q)[0]
        interp = self.arch == "interpreter"
        self.consts = dict(BLOCK_DV=block_d(self.d_v), BLOCK_DR=block_d(max(self.d_r, 1)), D_V=self.d_v,
                           D_R=self.d_r, HAS_ROPE=self.d_r > 0, HAS_SINK=args.attn_sink is not None,
                           UPCAST=interp and q.dtype == torch.bfloat16,
                           PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
        self.key = (q.dtype, d_qk, self.d_v)
        self.elem = q.element_size()

    def grid(self, tile: Tile) -> tuple[int, int]:
        return (self.tokens, cdiv(self.heads, tile.block_m))


def sparse_mla_fwd(args: SparseMlaFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)``; see ``turbo_core.dispatch.specs.sparse_mla`` for shapes and semantics."""
    q, idx = args.q, args.topk_indices
    p = _Problem(args)
    out = torch.empty(out_shape(q, p.d_v), dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape(q), dtype=torch.float32, device=q.device)
    sink = args.attn_sink if args.attn_sink is not None else lse
    kernel_args = (q, p.kv, idx, sink, out, lse, q.stride(0), q.stride(1), p.kv.stride(0), idx.stride(0),
                   out.stride(0), out.stride(1), lse.stride(0), p.heads, p.num_kv, p.topk, p.scale)
    launch_tiled(sparse_mla_fwd_kernel, p.grid, _tile("fwd", p.arch, p.heads, p.elem), ("fwd", *p.key),
                 lambda t: kernel_args, **p.consts)
    return out, lse


def sparse_mla_bwd(args: SparseMlaBwdArgs):
    """``(dq, dkv, dsink | None)``; ``dkv`` sums in fp32 with atomics (not bit-reproducible)."""
    q, idx, out, dout = args.q, args.topk_indices, args.out, args.dout
    p = _Problem(args)
    lse = args.lse if args.lse.stride(-1) == 1 or p.heads == 1 else args.lse.contiguous()
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dkv = torch.zeros(p.kv.shape, dtype=torch.float32, device=q.device)
    has_sink = args.attn_sink is not None
    delta = torch.empty(lse_shape(q) if has_sink else (1,), dtype=torch.float32, device=q.device)
    kernel_args = (q, p.kv, idx, out, dout, lse, dq, dkv, delta,
                   q.stride(0), q.stride(1), p.kv.stride(0), idx.stride(0), out.stride(0), out.stride(1),
                   dout.stride(0), dout.stride(1), dq.stride(0), dq.stride(1), dkv.stride(0), lse.stride(0),
                   p.heads, p.num_kv, p.topk, p.scale)
    launch_tiled(sparse_mla_bwd_kernel, p.grid, _tile("bwd", p.arch, p.heads, p.elem), ("bwd", *p.key),
                 lambda t: kernel_args, **p.consts)
    dsink = None
    if has_sink:
        finite = torch.isfinite(lse)
        p_sink = torch.where(finite, torch.exp(args.attn_sink[None, :] - torch.where(finite, lse, 0.0)), 0.0)
        dsink = -(p_sink * delta).sum(0)
    return dq, dkv.to(args.kv.dtype).view(args.kv.shape), dsink
