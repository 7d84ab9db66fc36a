"""``attention_fp8_fwd`` / ``attention_fp8_bwd`` on Triton: capability check, tiles and launchers.

Dense ``[b, s, h, d]`` only (as the spec), causal / window / GQA. The forward quantizes q and k
rows-major and v head-dim-major (``fp8_quant``), then runs ``attn_fp8_fwd_kernel``. The backward
quantizes q, k, v and dout again (the primitive saves no quantized tensors), runs the ``dq`` kernel
(which also computes the spec's ``delta = rowsum(P * dP)``) and then the ``dk/dv`` kernel; it is
deterministic (no atomics), so ``deterministic=True`` is served as is.

Tiles: ``Tile(block_m, block_n, num_warps, num_stages)`` per kernel ("fwd", "dq", "dkdv"); the
forward's ``block_n`` and the dk/dv kernel's ``block_m`` divide 64 (the tile's keys, resp. query
rows, share one scale of v, resp. dout, the operand they multiply in an FP8 dot), and every tile
edge divides ``fp8_quant.ROW_PAD``. The sm90 tiles for d=128 are tuned on sm90 (the ``attention`` suite
measures them); the others are picked by ptxas's spill counts for sm_90a (compiled ahead of time without
a GPU). ``TURBO_TRITON_ATTN_FP8_TILES="fwd=128,64,8,3;dq=128,64,8,2;dkdv=64,128,8,2"`` overrides them.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.attention import AttentionFp8BwdArgs, AttentionFp8FwdArgs, lse_shape, out_shape
from turbo_triton import _runtime
from turbo_triton.attention.configs import Tile, override
from turbo_triton.attention.fp8_quant import ROW_PAD, block_d, quantize_blocks
from turbo_triton.attention.launch import input_reason, launch_tiled, window_bounds
from turbo_triton.intmath import cdiv

# sm90, d=128: tuned at B4 H16 S4096, causal and not, each kernel alone (the `attention` suite measures them).
_SM90 = {
    64: {"fwd": Tile(128, 64, 4, 3), "dq": Tile(128, 64, 8, 2), "dkdv": Tile(64, 128, 8, 2)},
    128: {"fwd": Tile(64, 64, 4, 3), "dq": Tile(128, 64, 8, 3), "dkdv": Tile(32, 128, 8, 3)},
    256: {"fwd": Tile(128, 32, 8, 2), "dq": Tile(64, 32, 8, 2), "dkdv": Tile(64, 32, 8, 2)},
}
_GFX950 = {d: {"fwd": Tile(128, 64, 4, 1), "dq": Tile(64, 64, 4, 1), "dkdv": Tile(64, 64, 4, 1)} for d in (64, 128)}
_GFX950[256] = {"fwd": Tile(64, 32, 4, 1), "dq": Tile(32, 32, 4, 1), "dkdv": Tile(32, 32, 4, 1)}
_DEFAULT = {d: {"fwd": Tile(64, 64, 4, 2), "dq": Tile(64, 64, 4, 2), "dkdv": Tile(64, 64, 4, 2)} for d in (64, 128)}
_DEFAULT[256] = {"fwd": Tile(64, 32, 4, 2), "dq": Tile(32, 32, 4, 2), "dkdv": Tile(32, 32, 4, 2)}
_INTERP = Tile(16, 16, 4, 1)


def _arch_reason(arch: str) -> str | None:
    """E4M3 (OCP) dots: NVIDIA sm89+ and AMD gfx950 (gfx942 has the FNUZ format only)."""
    if arch == "interpreter":
        return None
    if arch.startswith("sm") and arch[2:].isdigit() and int(arch[2:]) >= 89:
        return None
    if arch.startswith("gfx950"):
        return None
    return f"TRITON FP8 attention needs OCP E4M3 dots (sm89+ or gfx950), not {arch}"


def can_handle(args: AttentionFp8FwdArgs | AttentionFp8BwdArgs) -> str | None:
    return input_reason(args, "TRITON FP8 attention") or _arch_reason(_runtime.device_facts(args.q)[0])


# -- tiles ---------------------------------------------------------------------------------------

def _check_tile(kernel: str, tile: Tile) -> Tile:
    if kernel == "fwd" and 64 % tile.block_n:
        raise ValueError(f"TURBO_TRITON_ATTN_FP8_TILES: the fwd block_n must divide 64, got {tile.block_n}")
    if kernel == "dkdv" and 64 % tile.block_m:
        raise ValueError(f"TURBO_TRITON_ATTN_FP8_TILES: the dkdv block_m must divide 64, got {tile.block_m}")
    if ROW_PAD % tile.block_m or ROW_PAD % tile.block_n:
        raise ValueError(f"TURBO_TRITON_ATTN_FP8_TILES: {kernel} tile edges must divide {ROW_PAD}, got {tile}")
    return tile


def pick(kernel: str, arch: str, head_dim: int) -> Tile:
    """The tile of ``kernel`` ("fwd", "dq", "dkdv") for the larger of the two head dims."""
    if arch == "interpreter":
        return _INTERP
    tile = override(kernel, "TURBO_TRITON_ATTN_FP8_TILES")
    if tile is None:
        bucket = 64 if head_dim <= 64 else 128 if head_dim <= 128 else 256
        table = _SM90 if arch.startswith("sm9") or arch.startswith("sm1") else \
            _GFX950 if arch.startswith("gfx950") else _DEFAULT
        tile = table[bucket][kernel]
    return _check_tile(kernel, tile)


def _shrink(kernel: str, tile: Tile) -> Tile | None:
    """The next smaller tile (same constraints) when one needs more shared memory than the device has."""
    if tile.num_stages > 1:
        return Tile(tile.block_m, tile.block_n, tile.num_warps, tile.num_stages - 1)
    if tile.block_n > 32 and kernel != "fwd" or tile.block_n > 64:
        return Tile(tile.block_m, tile.block_n // 2, tile.num_warps, 1)
    if tile.block_m > 32:
        return Tile(tile.block_m // 2, tile.block_n, max(4, tile.num_warps // 2), 1)
    return None


def _launch(kernel, name: str, grid_of, tile: Tile, key: tuple, *args, **consts) -> None:
    """``launch.launch_tiled`` with this kernel's shrink rule."""
    launch_tiled(kernel, grid_of, tile, key, lambda t: args, shrink=lambda t: _shrink(name, t), **consts)


# -- shared facts --------------------------------------------------------------------------------

class _Problem:
    def __init__(self, args) -> None:
        q, k, v = args.q, args.k, args.v
        self.batch, self.seq_q, self.h_q, self.d_qk = q.shape
        self.seq_k, self.h_kv, self.d_v = k.shape[1], k.shape[2], v.shape[-1]
        self.group = self.h_q // self.h_kv
        self.left, self.right, self.has_left, self.has_right = window_bounds(args)
        self.scale = args.scale
        self.soft = _runtime.interpreting()
        self.arch = _runtime.device_facts(q)[0]
        self.block_dqk, self.block_dv = block_d(self.d_qk), block_d(self.d_v)

    def tile(self, kernel: str) -> Tile:
        return pick(kernel, self.arch, max(self.d_qk, self.d_v))

    def window(self) -> tuple:
        return self.group, self.scale, self.left, self.right

    def consts(self) -> dict:
        return dict(BLOCK_DQK=self.block_dqk, BLOCK_DV=self.block_dv, HAS_LEFT=self.has_left,
                    HAS_RIGHT=self.has_right, SOFT=self.soft)


# -- forward -------------------------------------------------------------------------------------

def attention_fp8_fwd(args: AttentionFp8FwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)``: ``out [b, s_q, h_q, d_v]`` (q's dtype), ``lse`` fp32 ``[b, h_q, s_q]``; see
    ``fp8_fwd_kernel`` for the numerics and ``turbo_core.dispatch.specs.attention`` for the spec."""
    from turbo_triton.attention.fp8_fwd_kernel import attn_fp8_fwd_kernel

    q, k, v = args.q, args.k, args.v
    p = _Problem(args)
    out = torch.empty(out_shape(q, v), dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape(q, False), dtype=torch.float32, device=q.device)
    if out.numel() == 0 or p.seq_k == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    q_q, _, s_q = quantize_blocks(q)
    k_q, _, s_k = quantize_blocks(k)
    _, v_qt, s_v = quantize_blocks(v, rows=False, trans=True)
    _launch(attn_fp8_fwd_kernel, "fwd", lambda t: (cdiv(p.seq_q, t.block_m), p.h_q, p.batch), p.tile("fwd"),
            ("fwd", q.dtype, p.d_qk, p.d_v),
            q_q, k_q, v_qt, s_q, s_k, s_v, out, lse, out.stride(0), out.stride(1), out.stride(2),
            p.seq_q, p.seq_k, q_q.shape[2], k_q.shape[2], *p.window(), D_V=p.d_v, **p.consts())
    return out, lse


# -- backward ------------------------------------------------------------------------------------

def attention_fp8_bwd(args: AttentionFp8BwdArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` in the inputs' shapes and dtypes; see ``fp8_bwd_kernels`` for the numerics."""
    from turbo_triton.attention.fp8_bwd_kernels import attn_fp8_bwd_dkdv_kernel, attn_fp8_bwd_dq_kernel

    q, k, v, dout = args.q, args.k, args.v, args.dout
    p = _Problem(args)
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    # every row is written by the kernels: dq by its query tile, dk/dv (0 where unseen) by their key tile
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    lse = args.lse.contiguous()
    q_q, _, s_q = quantize_blocks(q)
    k_q, _, s_k = quantize_blocks(k)
    v_q, _, s_v = quantize_blocks(v)
    do_q, do_qt, s_do = quantize_blocks(dout, trans=True)
    delta = torch.empty_like(lse)
    rows_q, rows_k = q_q.shape[2], k_q.shape[2]
    key = (q.dtype, p.d_qk, p.d_v)
    _launch(attn_fp8_bwd_dq_kernel, "dq", lambda t: (cdiv(p.seq_q, t.block_m), p.h_q, p.batch),
            p.tile("dq"), ("dq", *key),
            q_q, k_q, v_q, do_q, s_q, s_k, s_v, s_do, lse, delta, dq, dq.stride(0), dq.stride(1), dq.stride(2),
            p.seq_q, p.seq_k, rows_q, rows_k, *p.window(), D_QK=p.d_qk, **p.consts())
    _launch(attn_fp8_bwd_dkdv_kernel, "dkdv", lambda t: (cdiv(p.seq_k, t.block_n), p.h_kv, p.batch),
            p.tile("dkdv"), ("dkdv", *key),
            q_q, k_q, v_q, do_q, do_qt, s_q, s_k, s_v, s_do, lse, delta, dk, dv,
            dk.stride(0), dk.stride(1), dk.stride(2), dv.stride(0), dv.stride(1), dv.stride(2),
            p.seq_q, p.seq_k, rows_q, rows_k, *p.window(), D_QK=p.d_qk, D_V=p.d_v, **p.consts())
    return dq, dk, dv
