"""The demo model in plain PyTorch: the oracle of the end-to-end parity tests.

:class:`PlainDecoder` computes what :class:`~turbo_core.demo.model.TurboDecoder` computes with
``torch.nn.Linear``, ``F.scaled_dot_product_attention`` (causal), a hand-written RMSNorm
(``x * rsqrt(mean(x^2) + 1e-6) * w``) and a dense loop over the experts (each expert runs on the
rows routed to it; outputs are summed with ``index_add``). No turbo op is called, so it runs in
any dtype torch supports, float64 included.

Its state_dict has the same keys and shapes as the turbo decoder's (FP8 or not), so
``plain.load_state_dict(turbo.state_dict())`` gives both the same weights.

Numerics, in the parameters' dtype except where stated: the router's logits are cast to fp32
(float64 in a float64 model) before the softmax and the top-k, as the turbo MoE block does (with
bf16 logits near-ties could route tokens differently), and each expert's SwiGLU output is scaled
by its routing probability in that precision, then rounded to the model dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_core.demo.model import DemoConfig

__all__ = ["PlainDecoder"]


class _RMSNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Experts(torch.nn.Module):
    """``weight [E, n_out, n_in]``, the layout of turbo's ``GroupedLinear``."""

    def __init__(self, e: int, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(e, n_out, n_in))


class _Attention(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = torch.nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d))


def _swiglu(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


class _Dense(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(cfg.d_model, 2 * cfg.ffn, bias=False)
        self.down = torch.nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_swiglu(self.gate_up(x)))


class _MoE(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.topk = cfg.topk
        self.router = torch.nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.gate_up = _Experts(cfg.experts, cfg.d_model, 2 * cfg.expert_ffn)
        self.down = _Experts(cfg.experts, cfg.expert_ffn, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1])
        wide = torch.promote_types(x2d.dtype, torch.float32)  # fp32, or float64 for the oracle
        probs = torch.softmax(self.router(x2d).to(wide), dim=-1)
        top_p, top_i = probs.topk(self.topk, dim=-1)
        out = torch.zeros_like(x2d)
        for e in range(self.gate_up.weight.shape[0]):  # dense loop over experts
            rows, slot = (top_i == e).nonzero(as_tuple=True)
            h = _swiglu(x2d[rows] @ self.gate_up.weight[e].T)
            h = (h.to(wide) * top_p[rows, slot, None]).to(x2d.dtype)
            out = out.index_add(0, rows, h @ self.down.weight[e].T)
        return out.view(x.shape)


class _Block(torch.nn.Module):
    def __init__(self, cfg: DemoConfig, moe: bool) -> None:
        super().__init__()
        self.norm1, self.attn = _RMSNorm(cfg.d_model), _Attention(cfg)
        self.norm2, self.ffn = _RMSNorm(cfg.d_model), (_MoE(cfg) if moe else _Dense(cfg))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class PlainDecoder(torch.nn.Module):
    """The demo decoder in plain PyTorch: ``tokens int64 [b, s] -> logits [b, s, vocab]`` in the
    parameters' dtype (any floating dtype; float64 for an oracle). Layers alternate dense (even)
    and MoE (odd) like the turbo decoder's."""

    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = torch.nn.ModuleList(_Block(cfg, i % 2 == 1) for i in range(cfg.layers))
        self.norm = _RMSNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
