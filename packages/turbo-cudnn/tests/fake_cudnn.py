"""A CPU model of PyTorch's cuDNN attention operators, as their schemas and meta functions describe
them: ``[b, h, s, d]`` inputs (any strides), ``out`` in q's memory order, ``logsumexp`` fp32
``[b, h_q, s_q, 1]`` (natural log), causal aligned top-left, GQA by head groups; the backward
recomputes ``P`` from the ``logsumexp`` it is given and ``D = rowsum(dout * out)`` from the ``out``
it is given. Float64 math. Records every call's arguments."""

from __future__ import annotations

import torch


def _scores(q, k, scale, causal):
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    s = (q.double() @ k.transpose(-1, -2)) * scale
    if causal:
        s_q, s_kv = s.shape[-2:]
        keep = torch.ones(s_q, s_kv, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s, group


def _like(t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(t)
    out.copy_(values)
    return out


class FakeCudnn:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def forward(self, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                return_debug_mask=False, *, scale=None):
        self.calls.append(("fwd", (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask),
                           {"scale": scale}))
        assert q.dim() == 4 and attn_bias is None and compute_log_sumexp and dropout_p == 0.0
        s, group = _scores(q, k, scale, is_causal)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.exp(s - lse)
        out = p @ v.double().repeat_interleave(group, dim=1)
        seed = torch.empty((), dtype=torch.int64)
        return (_like(q, out.to(q.dtype)), lse.float(), None, None, q.shape[2], k.shape[2], seed, seed, None)

    def backward(self, dout, q, k, v, out, lse, seed, offset, attn_bias, cum_q, cum_k, max_q, max_k, dropout_p,
                 is_causal, *, scale=None):
        self.calls.append(("bwd", (dout, q, k, v, out, lse, seed, offset, attn_bias, cum_q, cum_k, max_q, max_k,
                                   dropout_p, is_causal), {"scale": scale}))
        assert lse.shape == (*q.shape[:3], 1) and lse.dtype == torch.float32
        assert attn_bias is None and cum_q is None and cum_k is None and dropout_p == 0.0
        assert (max_q, max_k) == (q.shape[2], k.shape[2])
        s, group = _scores(q, k, scale, is_causal)
        p = torch.exp(s - lse.double())
        do = dout.double()
        vv = v.double().repeat_interleave(group, dim=1)
        dv = p.transpose(-1, -2) @ do
        dp = do @ vv.transpose(-1, -2)
        d = (do * out.double()).sum(-1, keepdim=True)
        ds = p * (dp - d)
        dq = ds @ k.double().repeat_interleave(group, dim=1) * scale
        dk = ds.transpose(-1, -2) @ q.double() * scale
        b, h_kv = k.shape[:2]
        dk = dk.reshape(b, h_kv, group, *dk.shape[2:]).sum(2)
        dv = dv.reshape(b, h_kv, group, *dv.shape[2:]).sum(2)
        return _like(q, dq.to(q.dtype)), _like(k, dk.to(k.dtype)), _like(v, dv.to(v.dtype))
