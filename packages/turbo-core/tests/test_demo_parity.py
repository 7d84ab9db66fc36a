"""End-to-end parity of ``turbo demo``'s model: the turbo decoder (reference backend, fp32, CPU)
against a plain-PyTorch twin (torch.nn.Linear, F.scaled_dot_product_attention, a hand-written
RMSNorm, a dense loop over the experts) run in float64, with the same initial weights (copied by
state_dict) and the same Markov-chain batches, trained with AdamW.

Measured on the CPU (seed 0, tiny config, 8 steps): fp32 turbo vs float64 twin, max relative
loss difference ~1e-7 (tolerance 1e-4); FP8 tensorwise turbo vs the float64 twin, max relative
difference ~2e-3 (band 2e-2). Plus the CLI: ``turbo demo --steps 5`` prints step lines and the
per-op backend table, and exits 1 when the loss does not fall.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from turbo_core.cli.main import main
from turbo_core.demo import DemoConfig, TurboDecoder, fp8_recipe, train

STEPS = 8
CFG = DemoConfig()
FP32_RTOL = 1e-4  # measured ~1e-7 over 8 steps
FP8_BAND = 2e-2  # FP8 tensorwise vs the float64 twin; measured ~2e-3


class RefRMSNorm(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class RefExperts(torch.nn.Module):
    def __init__(self, e: int, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(e, n_out, n_in))


class RefAttention(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = torch.nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d))


def swiglu(h):
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


class RefDense(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(cfg.d_model, 2 * cfg.ffn, bias=False)
        self.down = torch.nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(swiglu(self.gate_up(x)))


class RefMoE(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.topk = cfg.topk
        self.router = torch.nn.Linear(cfg.d_model, cfg.experts, bias=False)
        self.gate_up = RefExperts(cfg.experts, cfg.d_model, 2 * cfg.expert_ffn)
        self.down = RefExperts(cfg.experts, cfg.expert_ffn, cfg.d_model)

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(x2d), dim=-1)
        top_p, top_i = probs.topk(self.topk, dim=-1)
        out = torch.zeros_like(x2d)
        for e in range(self.gate_up.weight.shape[0]):  # dense loop over experts
            rows, slot = (top_i == e).nonzero(as_tuple=True)
            h = swiglu(x2d[rows] @ self.gate_up.weight[e].T) * top_p[rows, slot, None]
            out = out.index_add(0, rows, h @ self.down.weight[e].T)
        return out.view(x.shape)


class RefBlock(torch.nn.Module):
    def __init__(self, cfg: DemoConfig, moe: bool) -> None:
        super().__init__()
        self.norm1, self.attn = RefRMSNorm(cfg.d_model), RefAttention(cfg)
        self.norm2, self.ffn = RefRMSNorm(cfg.d_model), (RefMoE(cfg) if moe else RefDense(cfg))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class RefDecoder(torch.nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = torch.nn.ModuleList(RefBlock(cfg, i % 2 == 1) for i in range(cfg.layers))
        self.norm = RefRMSNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def _twins(fp8: str = "none"):
    torch.manual_seed(0)
    turbo = TurboDecoder(CFG, fp8_recipe(fp8))
    ref = RefDecoder(CFG)
    ref.load_state_dict(turbo.state_dict(), strict=True)  # same names and shapes: the same initial weights
    return turbo, ref


@pytest.fixture(scope="module")
def ref_losses():
    _, ref = _twins()
    return train(CFG, steps=STEPS, model=ref, dtype=torch.float64).losses


def _max_rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def test_fp32_turbo_matches_plain_pytorch(ref_losses):
    turbo, _ = _twins()
    result = train(CFG, steps=STEPS, model=turbo)
    rel = _max_rel(result.losses, ref_losses)
    assert rel < FP32_RTOL, (rel, result.losses, ref_losses)
    assert ref_losses[-1] < 0.9 * ref_losses[0]  # the curve being compared really moves
    assert {b for _, b in result.calls} == {"TORCH"}
    assert result.calls[("grouped_gemm", "TORCH")] > 0 and result.calls[("moe_routing_fwd", "TORCH")] > 0


def test_fp8_tensorwise_stays_in_band(ref_losses):
    turbo, _ = _twins("tensorwise")
    result = train(CFG, steps=STEPS, model=turbo)
    rel = _max_rel(result.losses, ref_losses)
    assert rel < FP8_BAND, (rel, result.losses, ref_losses)
    assert result.calls[("gemm_fp8", "TORCH")] > 0 and result.calls[("grouped_gemm_fp8", "TORCH")] > 0
    assert ("gemm", "TORCH") not in result.calls  # every projection went through FP8


def test_cli_demo_prints_steps_and_backend_table(capsys, tmp_path):
    out_file = tmp_path / "demo.json"
    assert main(["demo", "--steps", "5", "--device", "cpu", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [int(line.split()[1]) for line in steps] == [1, 2, 3, 4, 5]
    assert all("loss" in line and "ms" in line for line in steps)
    table = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] and "TORCH" in line}
    for prim in ("gemm", "attention_fwd", "rmsnorm_fwd", "grouped_gemm", "moe_permute", "swiglu_fwd"):
        assert table[prim][1] == "TORCH" and int(table[prim][2]) > 0, prim
        assert table[prim][-1] == "us", prim  # a profiled time per call
    doc = json.loads(out_file.read_text())
    assert len(doc["losses"]) == 5 and doc["loss_fell"] is True
    assert {row["backend"] for row in doc["ops"]} == {"TORCH"}


def test_cli_demo_fails_when_loss_does_not_fall(capsys):
    assert main(["demo", "--steps", "1", "--device", "cpu", "--no-profile"]) == 1
    assert "did not fall" in capsys.readouterr().err
