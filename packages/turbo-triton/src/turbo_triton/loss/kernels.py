"""Triton cross-entropy kernels over rows of contiguous ``[N, V]`` logits; all math in fp32.

One program per row; the row is walked in ``BLOCK_V`` chunks (the tail chunk masked), so any
vocabulary fits and registers hold one chunk.

Forward: an online log-sum-exp. The running max ``m`` and the sum ``s = sum exp(x - m)`` are scalars:
each chunk rescales ``s`` by ``exp(m_old - m_new)`` and adds its own ``sum exp(x - m_new)``, one
``exp`` per logit. While the max is still ``-Inf`` (a chunk of masked classes) the shift is taken as
0, so ``exp(-Inf - -Inf)`` never appears; a NaN or ``+Inf`` logit makes ``s`` NaN, hence ``lse`` NaN,
as the spec says. The target's logit is one masked scalar load (never outside the row), and with
label smoothing the chunk sums of ``x`` give ``mean_j x[j]``. The loss is written as
``(m - x[t]) + log(s)`` (and ``(m - mean) + log(s)``) rather than ``lse - x[t]``: ``m - x[t]`` is
exact where the two are close, so a loss that is a small difference of large logits is off by about
fp32's epsilon, not by the spacing of fp32 numbers at the logits' magnitude.

Backward: ``dloss * (exp(x - lse) - (1 - eps) [j == t] - eps / V)`` chunk by chunk, one ``exp`` per
logit, rounded once to logits' dtype.

Ignored rows (``target == ignore_index``) read nothing but their target: the forward writes 0 to
``loss`` and ``lse``, the backward writes zeros. A target outside ``[0, V)`` that is not ignored gives
a NaN loss and a NaN gradient row (the spec's rule where the host cannot check the targets). Row
offsets are int64. ``ROUND_BF16``: the interpreter's bf16 conversion truncates, so the launcher asks
for round-to-nearest-even there (``turbo_triton.normalization.kernels.to_out``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.normalization.kernels import to_out


@triton.jit
def cross_entropy_fwd_kernel(
    x_ptr, t_ptr, loss_ptr, lse_ptr, V, ignore_index, smoothing,
    SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """Row ``pid``: ``loss[pid]`` and ``lse[pid]`` (fp32). ``SMOOTHING``: ``smoothing > 0``."""
    row = tl.program_id(0)
    t = tl.load(t_ptr + row)
    if t == ignore_index:
        tl.store(loss_ptr + row, 0.0)
        tl.store(lse_ptr + row, 0.0)
        return
    x_row = x_ptr + row.to(tl.int64) * V
    cols = tl.arange(0, BLOCK_V)
    m = -float("inf")
    s = 0.0
    total = 0.0
    for start in range(0, V, BLOCK_V):
        c = start + cols
        ok = c < V
        x = tl.load(x_row + c, mask=ok, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
        if SMOOTHING:
            total += tl.sum(tl.where(ok, x, 0.0), axis=0)
    log_s = tl.log(s)
    valid = (t >= 0) & (t < V)
    xt = tl.load(x_row + t, mask=valid, other=0.0).to(tl.float32)
    nll_weight = 1.0 - smoothing
    loss = tl.where(nll_weight != 0.0, nll_weight * ((m - xt) + log_s), 0.0)
    if SMOOTHING:
        loss += smoothing * ((m - total / V) + log_s)
    tl.store(loss_ptr + row, tl.where(valid, loss, float("nan")))
    tl.store(lse_ptr + row, m + log_s)


@triton.jit
def cross_entropy_bwd_kernel(
    dloss_ptr, x_ptr, t_ptr, lse_ptr, dx_ptr, V, ignore_index, smoothing,
    SMOOTHING: tl.constexpr, ROUND_BF16: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """Row ``pid`` of ``dx`` (logits' dtype) from ``dloss``, ``lse`` and the logits."""
    row = tl.program_id(0)
    t = tl.load(t_ptr + row)
    offs = row.to(tl.int64) * V
    cols = tl.arange(0, BLOCK_V)
    if t == ignore_index:
        zero = to_out(tl.zeros([BLOCK_V], dtype=tl.float32), dx_ptr, ROUND_BF16)
        for start in range(0, V, BLOCK_V):
            c = start + cols
            tl.store(dx_ptr + offs + c, zero, mask=c < V)
        return
    lse = tl.load(lse_ptr + row)
    d = tl.load(dloss_ptr + row)
    d = tl.where((t >= 0) & (t < V), d, float("nan"))
    nll_weight = 1.0 - smoothing
    uniform = smoothing / V
    for start in range(0, V, BLOCK_V):
        c = start + cols
        ok = c < V
        x = tl.load(x_ptr + offs + c, mask=ok, other=0.0).to(tl.float32)
        g = tl.exp(x - lse)
        if SMOOTHING:
            g = g - uniform
        g = tl.where(c == t, g - nll_weight, g)
        tl.store(dx_ptr + offs + c, to_out(g * d, dx_ptr, ROUND_BF16), mask=ok)
