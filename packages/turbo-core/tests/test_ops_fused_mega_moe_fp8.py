"""The FP8 split form that Primus code imports (``fused_mega_moe_fp8_stage1`` /
``fused_mega_moe_fp8_stage2``, in Primus-Turbo's argument order with its opaque ``state``), and the
expert weights of the FP8 Mega MoE quantized once per weight version (the process-wide weight cache,
``advance_weight_generation``): outputs and gradients against the float64 loop over experts of
``turbo_core.testing.mega_moe_reference`` by SNR; the quantization primitives each call runs; the
cached copies freed with the weight and by ``advance_weight_generation``; the argument checks."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from turbo_core import dispatch
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.ops import (
    MegaMoEFP8State,
    advance_weight_generation,
    fused_mega_moe_fp8,
    fused_mega_moe_fp8_stage1,
    fused_mega_moe_fp8_stage2,
    fused_mega_moe_stage1,
    weight_cache_disabled,
)
from turbo_core.ops import _mega_moe_fp8 as mega_fp8
from turbo_core.testing import snr_db
from turbo_core.testing.mega_moe_reference import mega_moe_reference

F64 = torch.float64
NAMES = ("y", "grad x", "grad topk_weights", "grad w1", "grad w2")
MX = Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE)
#: E4M3, two chained FP8 GEMMs and the gradient quantized in both backwards (as test_ops_fused_mega_moe);
#: below 40 dB: FP8's error, not bf16's.
SNR_FLOOR, SNR_CEIL = 20.0, 40.0


@pytest.fixture(autouse=True)
def _no_cached_weights():
    advance_weight_generation()
    yield
    advance_weight_generation()


def _inputs(seed, t=24, h=32, inter=32, e=3, k=2):
    """float64 ``(x, topk_idx, topk_weights, w1, w2, grad_y)``: a -1 slot, an id repeated in a row."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, e, (t, k), generator=g)
    idx[0] = 1
    idx[1] = -1
    x = torch.randn((t, h), generator=g, dtype=F64)
    w = torch.rand((t, k), generator=g, dtype=F64)
    w1 = torch.randn((e, 2 * inter, h), generator=g, dtype=F64) / h ** 0.5
    w2 = torch.randn((e, h, inter), generator=g, dtype=F64) / inter ** 0.5
    return x, idx, w, w1, w2, torch.randn((t, h), generator=g, dtype=F64)


def _reference(x, idx, w, w1, w2, gy):
    ins = [x.detach().double().requires_grad_(), idx, w.detach().double().requires_grad_(),
           w1.detach().double().requires_grad_(), w2.detach().double().requires_grad_()]
    y = mega_moe_reference(*ins)
    y.backward(gy)
    return [y.detach()] + [ins[i].grad for i in (0, 2, 3, 4)]


def _assert_fp8_close(got, want):
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert SNR_FLOOR <= snr_db(b, a) < SNR_CEIL, (name, snr_db(b, a))


def _calls(fn):
    """``(fn(), {primitive: calls})`` of the primitives ``fn`` runs."""
    before = dispatch.stats()
    out = fn()
    counts: dict[str, int] = {}
    for key, n in dispatch.stats().items():
        if n - before.get(key, 0):
            counts[key[0]] = counts.get(key[0], 0) + n - before.get(key, 0)
    return out, counts


class _Layer:
    """The FP8 Mega MoE with its weights as ``torch.nn.Parameter`` (bf16), as a module holds them."""

    def __init__(self, data, fn=fused_mega_moe_fp8):
        self.data, self.fn = data, fn
        self.w1 = torch.nn.Parameter(data[3].bfloat16())
        self.w2 = torch.nn.Parameter(data[4].bfloat16())

    def step(self):
        """Forward and backward of a fresh batch; returns ``[y, grads...]`` and leaves no weight grad."""
        x, idx, w, _, _, gy = self.data
        xs, ws = x.bfloat16().requires_grad_(), w.float().requires_grad_()
        y = self.fn(None, xs, idx, ws, self.w1, self.w2, config=MX)
        y.backward(gy.bfloat16())
        out = [y.detach(), xs.grad, ws.grad, self.w1.grad, self.w2.grad]
        self.w1.grad = self.w2.grad = None
        return out

    def reference(self):
        x, idx, w, _, _, gy = self.data
        return _reference(x, idx, w, self.w1, self.w2, gy)


# -- the FP8 stages, Primus-Turbo's call form -------------------------------------------------------

def test_fp8_stages_against_float64_loop_and_the_fused_op():
    data = _inputs(seed=0)
    x, idx, w, w1, w2, gy = data
    ins = [x.bfloat16().requires_grad_(), w.float().requires_grad_(), w1.bfloat16().requires_grad_(),
           w2.bfloat16().requires_grad_()]
    l1_out, dispatch_weights, handle, state = fused_mega_moe_fp8_stage1(ins[0], idx, ins[1], ins[2], None)
    assert l1_out.dtype == torch.bfloat16 and l1_out.shape[1] == 64 and dispatch_weights.dtype == torch.float32
    assert isinstance(state, MegaMoEFP8State) and handle.config.granularity == ScalingGranularity.MX_BLOCKWISE
    y = fused_mega_moe_fp8_stage2(l1_out, dispatch_weights, handle, state, idx, ins[1], ins[3], None)
    y.backward(gy.bfloat16())
    got = [y.detach()] + [t.grad for t in ins]
    _assert_fp8_close(got, _reference(*data))

    # the same computation as the fused FP8 op with Primus-Turbo's recipe (MXFP8)
    ins2 = [t.detach().clone().requires_grad_() for t in ins]
    y2 = fused_mega_moe_fp8(None, ins2[0], idx, ins2[1], ins2[2], ins2[3], config=MX)
    y2.backward(gy.bfloat16())
    for name, a, b in zip(NAMES, got, [y2.detach()] + [t.grad for t in ins2], strict=True):
        assert torch.equal(a, b), name


def test_fp8_stage_argument_errors():
    x, idx, w, w1, w2, _ = (t.float() if t.is_floating_point() else t for t in _inputs(seed=1))
    h, row_w, handle, state = fused_mega_moe_fp8_stage1(x, idx, w, w1, None)
    other = fused_mega_moe_fp8_stage1(x, idx, w, w1, None)[3]
    with pytest.raises(ValueError, match="state: expected the MegaMoEFP8State .* of another call"):
        fused_mega_moe_fp8_stage2(h, row_w, handle, other, idx, w, w2, None)
    with pytest.raises(ValueError, match="state: expected the MegaMoEFP8State .* got NoneType"):
        fused_mega_moe_fp8_stage2(h, row_w, handle, None, idx, w, w2, None)
    plain = fused_mega_moe_stage1(x, idx, w, w1, None)
    with pytest.raises(TypeError, match="handle: expected .* fused_mega_moe_fp8_stage1, got one of .* x's precision"):
        fused_mega_moe_fp8_stage2(plain[0], plain[1], plain[2], state, idx, w, w2, None)
    with pytest.raises(ValueError, match="w2"):
        fused_mega_moe_fp8_stage2(h, row_w, handle, state, idx, w, w2[:, :, 1:], None)
    with pytest.raises(TypeError, match="config: expected a Float8QuantConfig"):
        fused_mega_moe_fp8_stage1(x, idx, w, w1, None, config="mx")


# -- FP8 weights once per weight version ------------------------------------------------------------

def test_fp8_weights_are_quantized_once_per_weight_version():
    layer = _Layer(_inputs(seed=2))
    first, c1 = _calls(layer.step)
    second, c2 = _calls(layer.step)
    # MX: each weight's row and column copies come from one quantize_fp8_with_trans call; the tokens
    # and gradients use quantize_fp8 / grouped_quantize_fp8, on every call
    assert c1["quantize_fp8_with_trans"] == 2 and "quantize_fp8_with_trans" not in c2
    assert c2["quantize_fp8"] > 0 and c2["grouped_quantize_fp8"] > 0
    assert {k: v for k, v in c1.items() if k != "quantize_fp8_with_trans"} == c2
    for name, a, b in zip(NAMES, second, first, strict=True):
        assert torch.equal(a, b), name
    _assert_fp8_close(second, layer.reference())
    with weight_cache_disabled():
        _, plain = _calls(layer.step)
    assert plain == c1  # a miss quantizes what the op quantizes without the cache

    # an optimizer step (in place, through the Parameter) makes new copies of both weights
    opt = torch.optim.SGD([layer.w1, layer.w2], lr=0.5)
    layer.w1.grad, layer.w2.grad = first[3], first[4]
    opt.step()
    third, c3 = _calls(layer.step)
    assert c3 == c1
    assert not torch.equal(third[0], first[0])
    _assert_fp8_close(third, layer.reference())

    # an in-place write to one weight: that weight alone
    with torch.no_grad():
        layer.w2.mul_(-0.5)
    fourth, c4 = _calls(layer.step)
    assert c4["quantize_fp8_with_trans"] == 1
    _assert_fp8_close(fourth, layer.reference())

    # a write through .data is not seen by the version counter; advance_weight_generation drops the copies
    layer.w1.data.mul_(-1.0)
    advance_weight_generation()
    fifth, c5 = _calls(layer.step)
    assert c5 == c1
    _assert_fp8_close(fifth, layer.reference())


def test_compiled_with_parameter_weights_traces_whole(monkeypatch):
    """torch.compile(fullgraph=True) before any eager call has made the cache: the graph quantizes
    the weights itself, the cache is neither made nor read; results equal eager mode's."""
    monkeypatch.setattr(mega_fp8, "_cache", None)
    data = _inputs(seed=4, t=8)
    torch._dynamo.reset()
    compiled = _Layer(data, torch.compile(fused_mega_moe_fp8, fullgraph=True, backend="aot_eager")).step()
    assert mega_fp8._cache is None
    for name, a, b in zip(NAMES, compiled, _Layer(data).step(), strict=True):
        assert torch.equal(a, b), name


def _cached_copies(dims=(0, 1)):
    """Weak references to the cached copies of w1 and w2 along ``dims`` (1: the forward's, contracting
    along H / I; 0: the dgrad's)."""
    cache = mega_fp8.weight_cache()
    return [weakref.ref(t) for entry in cache._entries.values() for d, q in entry.quantized.items() if d in dims
            for t in (q.data, q.scale)]


def test_cached_copies_live_no_longer_than_documented():
    layer = _Layer(_inputs(seed=3))
    layer.step()
    refs = _cached_copies()
    assert len(mega_fp8.weight_cache()) == 2 and refs and all(r() is not None for r in refs)
    advance_weight_generation()
    gc.collect()
    assert len(mega_fp8.weight_cache()) == 0 and all(r() is None for r in refs)

    # a pending backward keeps the copies its dgrad multiplies by, and only until it has run
    x, idx, w, _, _, gy = layer.data
    want = layer.step()
    fwd, dgrad = _cached_copies((1,)), _cached_copies((0,))
    assert len(fwd) == len(dgrad) == 4
    xs, ws = x.bfloat16().requires_grad_(), w.float().requires_grad_()
    y = fused_mega_moe_fp8(None, xs, idx, ws, layer.w1, layer.w2, config=MX)
    advance_weight_generation()
    gc.collect()
    assert all(r() is None for r in fwd) and all(r() is not None for r in dgrad)
    y.backward(gy.bfloat16())
    assert torch.equal(xs.grad, want[1]) and torch.equal(layer.w1.grad, want[3])
    gc.collect()
    assert all(r() is None for r in dgrad)

    # the cache keeps no weight alive; a freed weight's entry and copies go with it
    del y  # its graph holds the weights (their gradient accumulators)
    layer.w1.grad = layer.w2.grad = None
    layer.step()
    refs = _cached_copies()
    w_refs = [weakref.ref(layer.w1), weakref.ref(layer.w2)]
    del layer
    gc.collect()
    assert all(r() is None for r in w_refs + refs) and len(mega_fp8.weight_cache()) == 0
