"""``Attention`` (alias ``TurboAttention``): an ``nn.Module`` over ``flash_attn_func`` /
``flash_attn_fp8_func``, or their context-parallel forms ``flash_attn_usp_func`` /
``flash_attn_fp8_usp_func`` when it is given process groups."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.attention import check_window_size
from turbo_core.ops.attention import _check_fp8_config, flash_attn_fp8_func, flash_attn_func
from turbo_core.ops.attention_cp import flash_attn_fp8_usp_func, flash_attn_usp_func
from turbo_core.ops.attention_cp.comm import group_size
from turbo_core.ops.attention_cp.layout import RING_LAYOUTS

__all__ = ["Attention", "TurboAttention"]


class Attention(torch.nn.Module):
    """Flash attention as a module (Primus-Turbo's ``TurboAttention``).

    The settings are fixed at construction; ``fp8_config`` (not ``None``) selects
    :func:`~turbo_core.ops.flash_attn_fp8_func`, otherwise :func:`~turbo_core.ops.flash_attn_func`.
    With ``ulysses_group`` or ``ring_group`` set (either one; Primus-Turbo switches on
    ``ulysses_group``), the module runs the context-parallel forms
    :func:`~turbo_core.ops.flash_attn_usp_func` / :func:`~turbo_core.ops.flash_attn_fp8_usp_func`
    on each rank's shard of the sequence, split by ``ring_layout`` (``"contiguous"`` or
    ``"zigzag"``; see docs/context-parallel.md); ``sink`` is then not supported.
    ``alibi_slopes`` and ``return_attn_probs=True`` are rejected here, at construction. The module
    has no parameters (a learned sink, if any, belongs to the caller and is passed to ``forward``).
    Dropout applies in training mode only (``eval()`` runs with ``dropout_p = 0``).

    ``forward(q, k, v, bias=None, sink=None)``: q ``[b, s_q, h_q, d_qk]``, k ``[b, s_kv, h_kv, d_qk]``,
    v ``[b, s_kv, h_kv, d_v]`` (logical shapes, any strides); ``bias`` must be ``None``; ``sink``
    optional fp32 ``[h_q]`` (not with ``fp8_config``). Returns ``out`` ``[b, s_q, h_q, d_v]``, or
    ``(out, lse)`` with ``return_lse``.
    """

    def __init__(self, dropout_p: float = 0.0, softmax_scale: float | None = None, causal: bool = False,
                 window_size: tuple[int, int] = (-1, -1), alibi_slopes: torch.Tensor | None = None,
                 deterministic: bool = False, return_lse: bool = False, return_attn_probs: bool = False,
                 fp8_config=None, ulysses_group=None, ring_group=None, *,
                 ring_layout: str = "contiguous") -> None:
        super().__init__()
        if alibi_slopes is not None:
            raise ValueError("alibi_slopes: ALiBi is not supported by turbo's flash attention (pass None)")
        if return_attn_probs:
            raise ValueError("return_attn_probs: not supported (use return_lse=True for the log-sum-exp)")
        if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"dropout_p: expected a float in [0, 1), got {dropout_p!r}")
        _check_fp8_config(fp8_config)
        group_size("ulysses_group", ulysses_group)
        group_size("ring_group", ring_group)
        if ring_layout not in RING_LAYOUTS:
            raise ValueError(f"ring_layout: expected one of {RING_LAYOUTS}, got {ring_layout!r}")
        if (ulysses_group is not None or ring_group is not None) and dropout_p != 0.0:
            raise ValueError(f"dropout_p: context-parallel attention (ulysses_group/ring_group) supports 0.0 only, "
                             f"got {dropout_p!r}")
        self.dropout_p = float(dropout_p)
        self.softmax_scale = softmax_scale
        self.causal = causal
        self.window_size = check_window_size(window_size)
        self.alibi_slopes = None
        self.deterministic = deterministic
        self.return_lse = return_lse
        self.return_attn_probs = False
        self.fp8_config = fp8_config
        self.ulysses_group = ulysses_group
        self.ring_group = ring_group
        self.ring_layout = ring_layout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None,
                sink: torch.Tensor | None = None):
        common = dict(dropout_p=self.dropout_p if self.training else 0.0, softmax_scale=self.softmax_scale,
                      causal=self.causal, window_size=self.window_size, bias=bias, alibi_slopes=None,
                      deterministic=self.deterministic, return_lse=self.return_lse, return_attn_probs=False)
        if self.ulysses_group is not None or self.ring_group is not None:
            if sink is not None:
                raise ValueError("sink: not supported with ulysses_group/ring_group (context-parallel attention "
                                 "has no sink)")
            cp = dict(ulysses_group=self.ulysses_group, ring_group=self.ring_group, ring_layout=self.ring_layout)
            if self.fp8_config is not None:
                return flash_attn_fp8_usp_func(q, k, v, fp8_config=self.fp8_config, **common, **cp)
            return flash_attn_usp_func(q, k, v, **common, **cp)
        if self.fp8_config is not None:
            if sink is not None:
                raise ValueError("sink: not supported with fp8_config (flash_attn_fp8_func has no sink)")
            return flash_attn_fp8_func(q, k, v, fp8_config=self.fp8_config, **common)
        return flash_attn_func(q, k, v, sink=sink, **common)

    def extra_repr(self) -> str:
        parts = [f"causal={self.causal}", f"window_size={self.window_size}"]
        if self.softmax_scale is not None:
            parts.append(f"softmax_scale={self.softmax_scale}")
        if self.dropout_p:
            parts.append(f"dropout_p={self.dropout_p}")
        if self.deterministic:
            parts.append("deterministic=True")
        if self.return_lse:
            parts.append("return_lse=True")
        if self.fp8_config is not None:
            parts.append(f"fp8_config={self.fp8_config}")
        if self.ulysses_group is not None or self.ring_group is not None:
            parts.append(f"ulysses={group_size('ulysses_group', self.ulysses_group)}, "
                         f"ring={group_size('ring_group', self.ring_group)}, ring_layout={self.ring_layout!r}")
        return ", ".join(parts)


#: Primus-Turbo's name for :class:`Attention`.
TurboAttention = Attention
