"""GPU sweep of the TRITON flash attention (``@pytest.mark.gpu``; skipped without a GPU).

Run on a GPU machine with the compiled kernels (the package conftest turns the interpreter on by
default): ``TRITON_INTERPRET=0 pytest -m gpu packages/turbo-triton/tests/test_attention_gpu.py``
(``nox -s gpu`` runs it with the other GPU tests).

TRITON against the reference backend on the same GPU (fp32 math) over sequences 1..16384 with odd
lengths, causal / window + sink / GQA / MQA, head dims 64/128/256 and MLA's 192/128, decode
(s_q = 1), and varlen packs with an empty and a one-token sequence; bf16 inputs. Before every call
the caching allocator's free blocks are filled with NaN, so an output element a kernel forgets to
write shows up. Gates: ``out`` element-wise at bf16's tolerance, ``lse`` at fp32's scaled to the
values (1e-4 relative; the kernel sums in base 2), gradients normwise (P and dS are rounded to bf16
in the kernels), ``dsink`` at bf16's tolerance; the deterministic backward must be bit-identical
across runs.
"""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.reference import attention as ref
from turbo_core.testing import assert_close_normwise, assert_close_to_reference

pytestmark = pytest.mark.gpu

# name -> (b, s_q, s_kv, h_q, h_kv, d_qk, d_v, kwargs)
DENSE = {
    "s128-causal": (2, 128, 128, 8, 8, 128, 128, dict(causal=True)),
    "s1000-full": (2, 1000, 1000, 8, 2, 128, 128, {}),
    "s333x1001-causal-gqa": (1, 333, 1001, 16, 4, 64, 64, dict(causal=True)),
    "s4096-causal-d64": (1, 4096, 4096, 4, 4, 64, 64, dict(causal=True)),
    "s4096-causal-d256": (1, 4096, 4096, 2, 1, 256, 256, dict(causal=True)),
    "s2048-mla192x128-causal": (1, 2048, 2048, 8, 8, 192, 128, dict(causal=True)),
    "s4100-swa128-sink": (1, 4100, 4100, 8, 1, 64, 64, dict(causal=True, window_size=(128, 0), sink=True)),
    "s16384-causal": (1, 16384, 16384, 2, 1, 128, 128, dict(causal=True)),
    "decode-s1x5000": (4, 1, 5000, 8, 1, 128, 128, dict(causal=True)),
}
VARLEN = {"varlen-causal": dict(causal=True), "varlen-win64-32": dict(window_size=(64, 32))}
VARLEN_LENGTHS = (1, 77, 1000, 0, 4097, 512)


@pytest.fixture(scope="module")
def launch():
    from turbo_triton import _runtime

    if _runtime.interpreting():
        pytest.skip("the compiled kernels: run with TRITON_INTERPRET=0 on a GPU machine")
    from turbo_triton.attention import launch as module

    return module


def _poison() -> None:
    """Fill the allocator's free blocks with NaN so that outputs allocated next start as NaN."""
    free = torch.cuda.mem_get_info()[0]
    t = torch.empty(int(min(free * 0.5, 8 << 30)) // 4, dtype=torch.float32, device="cuda")
    t.fill_(float("nan"))
    del t


def _check(launch, q, k, v, dout, **kw):
    args = AttentionFwdArgs(q, k, v, **kw)
    _poison()
    out, lse = launch.attention_fwd(args)
    want_out, want_lse = ref.attention_fwd(args)
    assert_close_to_reference(out, want_out, what="out")
    assert torch.equal(torch.isfinite(lse), torch.isfinite(want_lse)), "lse: -inf rows differ"
    fin = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[fin], want_lse[fin], rtol=1e-4, atol=1e-4, msg=lambda m: f"lse: {m}")
    first = None
    for det in (False, True):
        bwd = AttentionBwdArgs(dout, q, k, v, want_out, want_lse, **kw, deterministic=det)
        _poison()
        got = launch.attention_bwd(bwd)
        want = ref.attention_bwd(bwd)
        for name, g, w in zip(("dq", "dk", "dv"), got[:3], want[:3], strict=True):
            assert_close_normwise(g, w, dtype=q.dtype, what=f"{name} (deterministic={det})")
        if want[3] is not None:
            assert_close_to_reference(got[3], want[3], dtype=torch.bfloat16, what="dsink")
        if det:
            first = got
    again = launch.attention_bwd(AttentionBwdArgs(dout, q, k, v, want_out, want_lse, **kw, deterministic=True))
    for a, b in zip(first[:3], again[:3], strict=True):
        assert torch.equal(a, b), "deterministic backward: not bit-identical across runs"


def _rand(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


@pytest.mark.parametrize("name", list(DENSE))
def test_dense(launch, name):
    torch.manual_seed(0)
    b, s_q, s_kv, h_q, h_kv, d_qk, d_v, kw = DENSE[name]
    kw = dict(kw)
    if kw.pop("sink", False):
        kw["sink"] = torch.randn(h_q, device="cuda")
    _check(launch, _rand(b, s_q, h_q, d_qk), _rand(b, s_kv, h_kv, d_qk), _rand(b, s_kv, h_kv, d_v),
           _rand(b, s_q, h_q, d_v), **kw)


@pytest.mark.parametrize("name", list(VARLEN))
def test_varlen(launch, name):
    torch.manual_seed(0)
    lens = torch.tensor(VARLEN_LENGTHS, dtype=torch.int32)
    cu = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)]).cuda()
    total, longest = int(lens.sum()), int(lens.max())
    _check(launch, _rand(total, 8, 128), _rand(total, 2, 128), _rand(total, 2, 128), _rand(total, 8, 128),
           cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest, **VARLEN[name])
