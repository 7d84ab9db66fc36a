"""The ``"turbo"`` attention implementation of transformers' ``AttentionInterface``.

:func:`register` adds :func:`turbo_attention_forward` to ``ALL_ATTENTION_FUNCTIONS`` and
transformers' SDPA mask builder to ``ALL_MASK_ATTENTION_FUNCTIONS`` under the same name, so that a
model with ``attn_implementation="turbo"`` gets SDPA's masks: ``None`` whenever the mask is plain
causal attention (no padding: training batches, a prefill, a one-token decode step), a 4-D mask
otherwise.

A call without a mask runs turbo's :func:`~turbo_core.ops.flash_attn_func` (grouped-query heads
as they are, no repeat). A call with a mask (left padding, a chunked prefill over a filled cache, a
static cache's unfilled tail), with dropout, a ``softcap`` or attention sinks runs transformers'
SDPA implementation instead; each such reason is counted (:func:`fallbacks`) and warned about
once.
"""

from __future__ import annotations

import warnings
from collections import Counter

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import AttentionInterface

from turbo_core.ops.attention import flash_attn_func

__all__ = ["NAME", "fallbacks", "register", "turbo_attention_forward"]

#: The implementation's name in transformers' registries (``attn_implementation="turbo"``).
NAME = "turbo"
#: The attribute ``apply_turbo`` sets on the attention modules it patches; a module without it
#: (an excluded one) runs SDPA.
MARK = "_turbo_attention"

_FALLBACKS: Counter = Counter()


def fallbacks() -> dict[str, int]:
    """How many attention calls ran SDPA instead of turbo, by reason, since the process started."""
    return dict(_FALLBACKS)


def _fallback(reason: str, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
    if reason not in _FALLBACKS:
        warnings.warn(f"turbo attention: {reason}; this call runs transformers' sdpa", stacklevel=3)
    _FALLBACKS[reason] += 1
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def turbo_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                            is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-interface signature: ``query [b, h_q, s_q, d_qk]``, ``key
    [b, h_kv, s_kv, d_qk]``, ``value [b, h_kv, s_kv, d_v]`` (``h_q % h_kv == 0``) ->
    ``(out [b, s_q, h_q, d_v] contiguous, None)``.

    Without a mask: ``flash_attn_func(q, k, v, softmax_scale=scaling, causal=...)`` on the
    ``[b, s, h, d]`` views. Causal attention (``is_causal``, else ``module.is_causal``) is aligned
    to the bottom-right corner, so a decode step (``s_q < s_kv``) sees the whole cache; a
    ``sliding_window`` w keeps keys ``i - w < j <= i`` (window ``(w - 1, 0)``). As in transformers'
    SDPA path, a causal prefill of more than one token whose keys run past the queries (a static
    cache's unfilled tail, which SDPA's mask builder leaves out only then) attends to the first
    ``s_q`` keys. Softmax and ``P @ v`` accumulate in fp32; the output is q's dtype.
    """
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    reason = None
    if not getattr(module, MARK, False):
        reason = "module excluded from turbo"
    elif attention_mask is not None:
        reason = "an attention mask is present (padding, a chunked prefill or a static cache)"
    elif dropout:
        reason = "attention dropout > 0"
    elif kwargs.get("softcap") is not None:
        reason = "logit softcap"
    elif kwargs.get("s_aux") is not None:
        reason = "attention sinks (s_aux)"
    elif kwargs.get("position_bias") is not None:
        reason = "a position bias"
    if reason is not None:
        return _fallback(reason, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    s_q, s_kv = query.shape[2], key.shape[2]
    if causal and 1 < s_q < s_kv:
        key, value = key[:, :, :s_q], value[:, :, :s_q]
    window = (-1, -1)
    sliding = kwargs.get("sliding_window")
    if causal and sliding is not None and sliding > 0:
        window = (int(sliding) - 1, 0)
    # q is made bshd-contiguous (a no-op when rotary embedding left it so) so that the output is too;
    # k and v go as bshd views of the cache (unit stride in the head dim, no copy).
    q = query.transpose(1, 2).contiguous()
    out = flash_attn_func(q, key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling,
                          causal=causal, window_size=window)
    return out, None


def register() -> None:
    """Register ``"turbo"`` in transformers' attention and attention-mask registries (idempotent)."""
    AttentionInterface.register(NAME, turbo_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
