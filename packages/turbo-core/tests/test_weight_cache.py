"""The weight-quantization cache (``turbo_core.ops.weight_cache``) of the FP8/FP4 GEMM ops and their
modules: gradients bit for bit those without the cache through gradient accumulation, optimizer
steps and activation checkpointing (every granularity, dense and grouped); hits and misses (a second
micro-batch hits; an optimizer step, an in-place write, a new storage, a changed config, a
``.data`` write followed by ``invalidate_weight_caches`` miss); when the cache is not consulted;
the quantization calls a hit saves; memory released with the module or the weight."""

import copy
import gc
import importlib
import weakref

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from turbo_core import Float4QuantConfig, Float8QuantConfig
from turbo_core.dispatch.dispatcher import stats
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, Format
from turbo_core.modules import Float8Linear, GroupedLinear
from turbo_core.ops.gemm_fp8 import gemm_fp4, gemm_fp8
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp4
from turbo_core.ops.weight_cache import WeightQuantCache, invalidate_weight_caches, weight_cache_disabled

needs_fp4 = pytest.mark.skipif(FLOAT4_E2M1FN_X2 is None, reason="this torch has no float4_e2m1fn_x2")

# Every granularity of the FP8 ops (BLOCKWISE at a block of 32 so the tiny weights hold several).
CONFIGS = {
    "TENSORWISE": Float8QuantConfig(),
    "ROWWISE": Float8QuantConfig(granularity="ROWWISE", format="HYBRID"),
    "BLOCKWISE": Float8QuantConfig(granularity="BLOCKWISE", block_size=32),
    "MX_BLOCKWISE": Float8QuantConfig(granularity="MX_BLOCKWISE"),
}
LENS = (5, 0, 11)  # grouped tokens: an empty group, and 4 rows past the last group
GROUPED_ROWS = 20


def _quant_calls() -> int:
    return sum(n for (prim, _b, _h), n in stats().items() if prim.startswith("quantize_"))


def _twins(make):
    """The same module twice, the second without a cache."""
    torch.manual_seed(0)
    cached = make()
    plain = copy.deepcopy(cached)
    plain.weight_cache = None
    return cached, plain


def _train(mod, run, steps, optimizer_cls=torch.optim.SGD, **opt_kw):
    """``steps`` optimizer steps of three accumulated micro-batches each; returns every output and
    every gradient (before each step) and the final weight."""
    opt = optimizer_cls(mod.parameters(), lr=0.05, **opt_kw)
    gen = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(steps):
        for _ in range(3):
            out = run(mod, gen)
            out.backward(torch.randn(out.shape, generator=gen))
            seen.append(out.detach())
        seen.append(mod.weight.grad.clone())
        opt.step()
        opt.zero_grad()
    return seen + [mod.weight.detach().clone()]


def _dense_run(mod, gen):
    # the input needs a gradient, so the forward also makes (or finds) the weight's dgrad copy
    return mod(torch.randn(3, 4, mod.in_features, generator=gen, requires_grad=True))


def _grouped_run(mod, gen):
    lens = torch.tensor(LENS, dtype=torch.int64)
    return mod(torch.randn(GROUPED_ROWS, mod.in_features, generator=gen, requires_grad=True), lens)


def _assert_identical(got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"tensor {i} differs"


# -- gradients bit for bit -------------------------------------------------------------------------

@pytest.mark.parametrize("gran", list(CONFIGS))
def test_dense_training_is_bit_identical_and_quantizes_the_weight_once_per_step(gran):
    cached, plain = _twins(lambda: Float8Linear(64, 48, config=CONFIGS[gran]))
    before = _quant_calls()
    got = _train(cached, _dense_run, 2)
    with_cache = _quant_calls() - before
    before = _quant_calls()
    want = _train(plain, _dense_run, 2)
    without = _quant_calls() - before
    _assert_identical(got, want)
    # one miss per optimizer step, the two other micro-batches of each step hit
    assert (cached.weight_cache.misses, cached.weight_cache.hits) == (2, 4)
    per_weight = {"TENSORWISE": 1, "ROWWISE": 2, "BLOCKWISE": 1, "MX_BLOCKWISE": 1}[gran]
    assert without - with_cache == 4 * per_weight


@pytest.mark.parametrize("gran", list(CONFIGS))
def test_grouped_training_is_bit_identical(gran):
    cached, plain = _twins(lambda: GroupedLinear(3, 64, 48, config=CONFIGS[gran]))
    got = _train(cached, _grouped_run, 2, torch.optim.Adam, fused=True)
    want = _train(plain, _grouped_run, 2, torch.optim.Adam, fused=True)
    _assert_identical(got, want)
    assert (cached.weight_cache.misses, cached.weight_cache.hits) == (2, 4)


@pytest.mark.parametrize("k_major", [True, False])
def test_a_cached_grouped_rowwise_weight_keeps_its_dgrad_copy_k_major(monkeypatch, k_major):
    """Quantized once for every micro-batch, a ROWWISE expert weight ``[G, N, K]`` keeps its dgrad copy
    (scales along N) as ``[G, K, N]``, K-major for the dgrad GEMM; its forward copy keeps the stored
    layout. ``K_MAJOR_CACHED_DGRAD = False`` keeps the stored layout for both, as a weight quantized per
    call does."""
    op = importlib.import_module("turbo_core.ops.grouped_gemm_fp8")  # the module: ops.grouped_gemm_fp8 is the op

    monkeypatch.setattr(op, "K_MAJOR_CACHED_DGRAD", k_major)
    mod = GroupedLinear(3, 64, 48, config=Float8QuantConfig(granularity="ROWWISE"))
    _grouped_run(mod, torch.Generator().manual_seed(2)).sum().backward()
    (entry,) = mod.weight_cache._entries.values()
    fwd, dgrad = entry.quantized[1], entry.quantized[0]
    assert fwd.data.shape == (3, 48, 64) and not fwd.transposed
    if k_major:
        assert dgrad.data.shape == (3, 64, 48) and dgrad.transposed and dgrad.scale.shape == (3, 64, 1)
    else:
        assert dgrad.data.shape == (3, 48, 64) and not dgrad.transposed and dgrad.scale.shape == (3, 1, 64)


class _Fp4Linear(torch.nn.Module):
    """A bias-free linear layer on ``gemm_fp4`` (grouped: ``grouped_gemm_fp4``) with a cache."""

    def __init__(self, in_features, out_features, groups=None):
        super().__init__()
        self.in_features = in_features
        shape = (out_features, in_features) if groups is None else (groups, out_features, in_features)
        self.weight = torch.nn.Parameter(torch.randn(shape) * 0.1)
        self.weight_cache = WeightQuantCache()
        self.config = Float4QuantConfig(use_gradient_sr=False)

    def forward(self, x, lens=None):
        if lens is None:
            return gemm_fp4(x.reshape(-1, self.in_features), self.weight, trans_b=True, config=self.config,
                            weight_cache=self.weight_cache)
        return grouped_gemm_fp4(x, self.weight, lens, config=self.config, weight_cache=self.weight_cache)


@needs_fp4
@pytest.mark.parametrize("grouped", [False, True], ids=["dense", "grouped"])
def test_fp4_training_is_bit_identical(grouped):
    # grouped: narrower, one step (the reference pads each group's column copy to 512 rows: slow on a CPU)
    cached, plain = _twins(lambda: _Fp4Linear(32, 16, 3) if grouped else _Fp4Linear(64, 48))
    run, steps = (_grouped_run, 1) if grouped else (_dense_run, 2)
    _assert_identical(_train(cached, run, steps), _train(plain, run, steps))
    assert (cached.weight_cache.misses, cached.weight_cache.hits) == (steps, 2 * steps)


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("gran", ["ROWWISE", "MX_BLOCKWISE"])
def test_activation_checkpointing_is_bit_identical(gran, reentrant):
    """A recomputed forward finds the weight unchanged and reuses the copies; under reentrant
    checkpointing the first forward runs without grad (the forward copy only), so the recomputation
    quantizes both copies once and later micro-batches hit."""
    cached, plain = _twins(lambda: Float8Linear(64, 48, config=CONFIGS[gran]))

    def run(mod, gen):
        x = torch.randn(3, 4, 64, generator=gen, requires_grad=True)
        return checkpoint(mod, x, use_reentrant=reentrant)

    _assert_identical(_train(cached, run, 1), _train(plain, run, 1))
    c = cached.weight_cache
    assert (c.misses, c.hits) == ((2, 4) if reentrant else (1, 5))


def test_backward_uses_the_copy_its_forward_used():
    """The weight changes between two forwards whose backwards run afterwards: each backward gets the
    copy its own forward made (a cache entry is replaced, never written in place)."""
    def run(mod):
        gen = torch.Generator().manual_seed(3)
        x1, x2 = (torch.randn(6, 64, generator=gen, requires_grad=True) for _ in range(2))
        y1 = mod(x1)
        with torch.no_grad():
            mod.weight.mul_(-0.5)
        y2 = mod(x2)
        y2.sum().backward()
        y1.sum().backward()
        return [y1.detach(), y2.detach(), x1.grad, x2.grad, mod.weight.grad]

    for gran in CONFIGS:
        cached, plain = _twins(lambda gran=gran: Float8Linear(64, 48, config=CONFIGS[gran]))
        _assert_identical(run(cached), run(plain))
        assert (cached.weight_cache.misses, cached.weight_cache.hits) == (2, 0)


# -- hits and misses -------------------------------------------------------------------------------

def _step(mod, grad=True):
    x = torch.randn(2, mod.in_features, requires_grad=True)
    if grad:
        mod(x).sum().backward()
    else:
        with torch.no_grad():
            mod(x)


def _counts(mod):
    return mod.weight_cache.misses, mod.weight_cache.hits


def test_what_makes_the_cache_miss():
    torch.manual_seed(4)
    mod = Float8Linear(32, 16, config=Float8QuantConfig(granularity="ROWWISE"))
    expect = [0, 0]

    def check(event, hit):
        _step(mod)
        expect[1 if hit else 0] += 1
        assert _counts(mod) == tuple(expect), event

    check("first micro-batch", False)
    check("second micro-batch", True)
    torch.optim.SGD(mod.parameters(), lr=0.1).step()
    check("after SGD's step (the version bumps)", False)
    version = mod.weight._version
    torch.optim.Adam(mod.parameters(), lr=0.1, fused=True).step()
    assert mod.weight._version == version  # fused Adam writes without bumping: the step hook tells
    check("after fused Adam's step", False)
    with torch.no_grad():
        mod.weight.copy_(torch.randn(16, 32))
    check("after weight.copy_", False)
    mod.weight.data = torch.randn(16, 32)
    check("after a new storage (weight.data = ...)", False)
    mod.weight.data.copy_(torch.randn(16, 32))
    invalidate_weight_caches()
    check("after weight.data.copy_ and invalidate_weight_caches()", False)
    mod.weight.data.copy_(torch.randn(16, 32))
    mod.weight_cache.clear()
    check("after weight.data.copy_ and clear()", False)
    mod.config = Float8QuantConfig(granularity="ROWWISE", format="E5M2")
    check("after a new config", False)
    object.__setattr__(mod.config, "format", Format.E4M3)  # the config object itself changed
    check("after a changed config object", False)
    mod.load_state_dict(Float8Linear(32, 16).state_dict())
    check("after load_state_dict", False)
    mod.bfloat16()
    check("after a dtype change", False)
    check("and then a hit again", True)


def test_a_forward_needs_every_copy_in_the_entry():
    """A no-grad forward stores the forward copy only; a training forward needs the column copy too
    (a miss that stores both), after which no-grad forwards hit."""
    torch.manual_seed(5)
    mod = Float8Linear(32, 16, config=Float8QuantConfig(granularity="ROWWISE"))
    _step(mod, grad=False)
    _step(mod, grad=False)
    assert _counts(mod) == (1, 1)
    _step(mod)
    assert _counts(mod) == (2, 1)
    _step(mod, grad=False)
    _step(mod)
    assert _counts(mod) == (2, 3)


def test_when_the_cache_is_not_consulted():
    torch.manual_seed(6)
    mod = Float8Linear(32, 16)
    with weight_cache_disabled():
        _step(mod)
    with torch.inference_mode():
        mod(torch.randn(2, 32))
    assert _counts(mod) == (0, 0) and len(mod.weight_cache) == 0
    cache = WeightQuantCache()
    a = torch.randn(4, 32)
    plain_tensor = torch.randn(16, 32, requires_grad=True)  # a tensor, not a Parameter
    gemm_fp8(a, plain_tensor, trans_b=True, weight_cache=cache)
    gemm_fp8(a, mod.weight * 1, trans_b=True, weight_cache=cache)  # not a leaf
    assert (cache.misses, cache.hits, len(cache)) == (0, 0, 0)
    mod.weight_cache = None  # off for this module
    _step(mod)
    with pytest.raises(TypeError, match=r"^weight_cache: expected a WeightQuantCache or None, got dict"):
        gemm_fp8(a, mod.weight, trans_b=True, weight_cache={})


def test_compiled_module_does_not_use_the_cache():
    torch.manual_seed(7)
    mod = Float8Linear(32, 16, config=Float8QuantConfig(granularity="ROWWISE"))
    plain = copy.deepcopy(mod)
    plain.weight_cache = None
    x = torch.randn(6, 32)
    out = torch.compile(mod, fullgraph=True, backend="aot_eager")(x)
    out.sum().backward()
    assert _counts(mod) == (0, 0) and len(mod.weight_cache) == 0
    want = plain(x)
    want.sum().backward()
    assert torch.equal(out, want) and torch.equal(mod.weight.grad, plain.weight.grad)


def test_one_cache_serves_several_weights():
    torch.manual_seed(8)
    cache = WeightQuantCache()
    w1, w2 = torch.nn.Parameter(torch.randn(16, 32)), torch.nn.Parameter(torch.randn(24, 32))
    a = torch.randn(4, 32)
    for _ in range(2):
        for w in (w1, w2):
            got = gemm_fp8(a, w, trans_b=True, weight_cache=cache)
            assert torch.equal(got, gemm_fp8(a, w, trans_b=True))
    assert (cache.misses, cache.hits, len(cache)) == (2, 2, 2)
    got = gemm_fp8(a, w1, trans_b=True, config=Float8QuantConfig(granularity="ROWWISE"), weight_cache=cache)
    assert cache.misses == 3  # another scheme for w1 replaces its entry
    assert torch.equal(got, gemm_fp8(a, w1, trans_b=True, config=Float8QuantConfig(granularity="ROWWISE")))


# -- memory ------------------------------------------------------------------------------------------

def _cached_tensors(cache):
    return [weakref.ref(t) for entry in cache._entries.values() for q in entry.quantized.values()
            for t in (q.data, q.scale)]


def test_memory_is_released_with_the_module():
    torch.manual_seed(9)
    mod = Float8Linear(32, 16, config=Float8QuantConfig(granularity="MX_BLOCKWISE"))
    _step(mod)
    refs = _cached_tensors(mod.weight_cache)
    assert refs and all(r() is not None for r in refs)
    cache_ref = weakref.ref(mod.weight_cache)
    mod.weight.grad = None
    del mod
    gc.collect()
    assert cache_ref() is None and all(r() is None for r in refs)


def test_the_cache_keeps_no_weight_alive():
    torch.manual_seed(10)
    cache = WeightQuantCache()
    w = torch.nn.Parameter(torch.randn(16, 32))
    with torch.no_grad():
        gemm_fp8(torch.randn(4, 32), w, trans_b=True, weight_cache=cache)
    refs = _cached_tensors(cache)
    assert len(cache) == 1 and refs
    w_ref = weakref.ref(w)
    del w
    gc.collect()
    assert w_ref() is None and len(cache) == 0 and all(r() is None for r in refs)


def test_copies_start_empty():
    torch.manual_seed(11)
    mod = Float8Linear(32, 16)
    _step(mod)
    twin = copy.deepcopy(mod)
    assert len(mod.weight_cache) == 1 and len(twin.weight_cache) == 0
    _step(twin)
    assert _counts(twin) == (1, 0)
