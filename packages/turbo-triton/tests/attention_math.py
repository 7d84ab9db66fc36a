"""Independent float64 attention for the TRITON attention tests (not the reference backend's code)."""

from __future__ import annotations

import torch


def f64_attention(q, k, v, scale, causal, window):
    """float64 softmax attention of ``[b, s, h, d]`` float64 inputs (GQA by repeat, bottom-right
    masks: query ``i`` sees key ``j`` iff ``i + s_k - s_q - left <= j <= i + s_k - s_q + right``,
    causal sets ``right = 0``, -1 is unbounded); rows that see no key give 0. Differentiable."""
    _, s_q, h_q, _ = q.shape
    s_k, h_k = k.shape[1], k.shape[2]
    qd, kd, vd = (t.transpose(1, 2) for t in (q, k, v))
    kd, vd = kd.repeat_interleave(h_q // h_k, 1), vd.repeat_interleave(h_q // h_k, 1)
    i = torch.arange(s_q)[:, None] + (s_k - s_q)
    j = torch.arange(s_k)[None, :]
    left, right = window
    right = 0 if causal else right
    ok = torch.ones(s_q, s_k, dtype=torch.bool)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    s = (qd @ kd.transpose(-1, -2) * scale).masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # empty rows: all -inf -> NaN -> 0
    return (p @ vd).transpose(1, 2)
