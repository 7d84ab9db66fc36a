"""Inference through the patched models: greedy ``generate()`` (a prefill, then one-token decode
steps over the KV cache: query length 1, key length growing) gives the unpatched model's tokens,
with the decode steps on turbo's attention; a left-padded batch (a mask) runs SDPA, counted, and
still gives the unpatched tokens. The ``"turbo"`` attention function itself against SDPA in
float64: prefill, decode, a causal prefill over a longer static cache, grouped-query heads, MLA's
different q/k and v head dims."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5")

from hf_tiny import build, tokens, twin  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from turbo_core.dispatch import stats  # noqa: E402
from turbo_core.integrations.hf.attention import MARK, turbo_attention_forward  # noqa: E402
from turbo_core.integrations.transformers import apply_turbo, attention_fallbacks  # noqa: E402

MASKED = "an attention mask is present (padding, a chunked prefill or a static cache)"
NEW = 6


def _attention_calls() -> int:
    return sum(n for (prim, _b, _h), n in stats().items() if prim == "attention_fwd")


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen3_moe", "deepseek_v3"])
def test_greedy_generate_matches_unpatched(arch):
    model = build(arch).eval()
    ref = twin(model)
    apply_turbo(model)
    ids = tokens(batch=1, seq=5)
    want = ref.generate(ids, max_new_tokens=NEW, do_sample=False)
    masked = attention_fallbacks().get(MASKED, 0)
    got = model.generate(ids, max_new_tokens=NEW, do_sample=False)
    assert torch.equal(got, want)
    assert got.shape[1] == ids.shape[1] + NEW
    # the prefill and every decode step, every layer, on turbo's attention
    assert _attention_calls() == NEW * model.config.num_hidden_layers
    assert attention_fallbacks().get(MASKED, 0) == masked


@pytest.mark.filterwarnings("ignore:turbo attention")
def test_padded_batch_generates_through_sdpa_with_the_same_tokens():
    model = build("qwen3").eval()
    ref = twin(model)
    apply_turbo(model)
    ids = tokens(batch=2, seq=6)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding of the first row
    ids = ids.masked_fill(mask == 0, 0)
    kw = {"attention_mask": mask, "max_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
    want = ref.generate(ids, **kw)
    before = attention_fallbacks().get(MASKED, 0)
    got = model.generate(ids, **kw)
    assert torch.equal(got, want)
    assert attention_fallbacks()[MASKED] > before


class _Module(torch.nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.is_causal = True
        self.num_key_value_groups = groups
        setattr(self, MARK, True)


@pytest.mark.parametrize("s_q, s_kv, h_q, h_kv, d_qk, d_v", [
    (7, 7, 4, 2, 16, 16),   # prefill, grouped-query heads
    (1, 9, 4, 2, 16, 16),   # decode step over the cache
    (1, 9, 4, 4, 24, 16),   # decode, MLA head dims
    (3, 8, 4, 1, 16, 16),   # causal prefill over a longer (static) cache: the first s_q keys, as SDPA
])
def test_turbo_attention_matches_sdpa(s_q, s_kv, h_q, h_kv, d_qk, d_v):
    gen = torch.Generator().manual_seed(s_q * 100 + s_kv)
    q = torch.randn(2, h_q, s_q, d_qk, generator=gen)
    k = torch.randn(2, h_kv, s_kv, d_qk, generator=gen)
    v = torch.randn(2, h_kv, s_kv, d_v, generator=gen)
    module = _Module(h_q // h_kv)
    scale = 0.3
    out, weights = turbo_attention_forward(module, q, k, v, None, scaling=scale)
    ref, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), None, scaling=scale)
    assert weights is None and out.shape == (2, s_q, h_q, d_v) and out.is_contiguous()
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    assert _attention_calls() == 1
