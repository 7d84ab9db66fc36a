"""Pure translations between turbo's attention primitives and aiter's CK flash attention.

Facts about aiter (amd-aiter 0.1.7.post2.dev18, ``csrc/py_itfs_ck/mha_*_kernels.cu`` and the
bundled ck_tile fmha pipelines) that these functions encode:

* q, k, v, out, dout: fp16/bf16 only, unit stride in the head dim, head dims a multiple of 8 and at
  most 256; ``h_q % h_kv == 0`` (GQA: dk/dv come back with ``h_kv`` heads).
* Masks are bottom-right aligned (``"b:left,right"``), as turbo's. ``is_causal`` forces
  ``right = 0``. A window side ``>= seqlen_k`` (``max_seqlen_k`` for varlen) is rewritten to -1
  (unbounded) before the mask is built.
* LSE: natural log, fp32, ``[b, h_q, s_q]`` dense and ``[h_q, total_q]`` varlen (turbo's shapes);
  a row that sees no key gets ``-inf`` and ``out = 0`` (turbo's convention); the backward reads
  ``-inf`` as "no key". Varlen rows at or past ``cu_seqlens_q[-1]`` are never written (out, lse
  and dq are left as allocated, i.e. undefined; likewise dk/dv past ``cu_seqlens_k[-1]``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "HEAD_DIM_MULTIPLE",
    "MAX_HEAD_DIM",
    "aiter_mask_args",
    "clear_unowned_rows",
    "pad_head_dim",
    "padded_head_dim",
    "unpad_head_dim",
    "window_decline_reason",
]

#: aiter's CK attention takes head dims that are a multiple of 8, at most 256.
HEAD_DIM_MULTIPLE = 8
MAX_HEAD_DIM = 256


def padded_head_dim(d: int) -> int:
    """The smallest multiple of 8 that is ``>= d``."""
    return -(-d // HEAD_DIM_MULTIPLE) * HEAD_DIM_MULTIPLE


def pad_head_dim(t: torch.Tensor, d: int) -> torch.Tensor:
    """``t [..., d0]`` zero-padded to ``[..., d]`` along the last dim (``t`` itself when ``d0 == d``).

    Exact for attention: zero columns of q and k add nothing to ``q @ k^T``; zero columns of v
    (and of out and dout in the backward) give zero columns of out and of dv, dq, dk that
    :func:`unpad_head_dim` drops; ``rowsum(dout * out)`` is unchanged.
    """
    extra = d - t.shape[-1]
    if extra < 0:
        raise ValueError(f"pad_head_dim: cannot pad a head dim of {t.shape[-1]} down to {d}")
    return t if extra == 0 else F.pad(t, (0, extra))


def unpad_head_dim(t: torch.Tensor, d: int) -> torch.Tensor:
    """The first ``d`` columns of the last dim (``t`` itself when already ``d`` wide)."""
    return t if t.shape[-1] == d else t[..., :d]


def aiter_mask_args(causal: bool, window_size: tuple[int, int]) -> tuple[bool, int, int]:
    """``(is_causal, window_size_left, window_size_right)`` for aiter from turbo's arguments.

    turbo ignores a given right window when ``causal`` (flash-attn's rule); aiter forces
    ``right = 0`` when ``is_causal`` except for ``seqlen_q == 1``, where it drops causality and
    keeps the given window, so ``right = 0`` is passed explicitly to mean the same in every case.
    """
    left, right = window_size
    return (True, left, 0) if causal else (False, left, right)


def window_decline_reason(causal: bool, window_size: tuple[int, int], s_q: int, s_kv: int) -> str | None:
    """Why aiter's window rewrite would change the mask, or ``None``.

    aiter turns a window side ``>= s_kv`` into -1. For the left side that never changes which keys
    a row sees. For the right side it does when ``s_q - 1 > right``: with turbo's bottom-right
    rule, row ``i`` sees keys ``j <= i + s_kv - s_q + right``, which is not every key for the
    first rows. (``s_q``, ``s_kv``: the dense lengths, or ``max_seqlen_q``/``max_seqlen_k``.)
    """
    _, right = window_size
    if causal or right < 0 or right < s_kv:
        return None
    if right >= s_q - 1:
        return None
    return (f"AITER attention: window right={right} >= seqlen_k={s_kv} is read by aiter as unbounded, but with "
            f"seqlen_q={s_q} the first rows would see fewer keys (right < seqlen_q - 1)")


def clear_unowned_rows(cu_seqlens: torch.Tensor, lse_value: float = float("-inf"), *,
                       rows: torch.Tensor | None = None, lse: torch.Tensor | None = None) -> None:
    """In place, for varlen: rows at or past ``cu_seqlens[-1]`` of ``rows [total, h, d]`` become 0
    and the matching columns of ``lse [h, total]`` become ``lse_value`` (turbo: -inf).

    aiter never writes those rows; turbo specifies them. The mask is built on the device from
    ``cu_seqlens[-1]`` (no host sync).
    """
    for t in (rows, lse):
        if t is None:
            continue
        total = t.shape[0] if t is rows else t.shape[-1]
        unowned = torch.arange(total, device=t.device) >= cu_seqlens[-1].to(t.device)
        if t is rows:
            t.masked_fill_(unowned.view(-1, *([1] * (t.dim() - 1))), 0)
        else:
            t.masked_fill_(unowned.view(*([1] * (t.dim() - 1)), -1), lse_value)
