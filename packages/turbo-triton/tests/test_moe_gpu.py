"""The TRITON MoE kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``), against the
TORCH reference on the same GPU.

Data movement (``moe_permute_preprocess`` with pad 0 / 16, no cap / a cap that overflows / Megatron
capacity / the top-k probs layout, from indices and from a multi-hot map; ``moe_permute`` bf16 with
probs and FP8 with per-128 scales; ``moe_unpermute`` with merging probs and scattering the permuted
probs back; ``moe_unpermute_bwd``; ``indices_to_multihot(_bwd)``; ``tokens_per_expert_to_mask``): bit for
bit, except ``grad_merging_probs`` (dot products in another fp32 order: 1e-5 relative) and the
unpermuted tokens where a sum's order differs (2^-8 relative). Outputs land in memory poisoned with
0xFF (NaN in every float format); the calls run under ``set_sync_debug_mode("error")`` (a host sync
raises); preprocess + permute + unpermute replay from a CUDA graph bit for bit.

Router (``moe_routing_fwd`` / ``moe_routing_bwd``, fp32 math in both): ``routing_map`` row by row, where a
row may differ only at a near tie (the reference's raw scores summed over the two selections agree to
1e-6: another fp32 order in the softmax can swap two experts whose scores differ in the last bit),
exactly top-k per row; scores, probs and grad_logits within the dtype's tolerance; forward + backward
replay from a CUDA graph bit for bit.

Why these shapes: DeepSeek-V3 (hidden 7168, 256 experts, top-8; and 32 local experts, EP 8), Qwen3
(4096 / 2048, 128 experts, top-8), Mixtral (4096, 8 experts, top-2), odd sizes, and small batches
(``moe_permute``'s one-launch search path, tokens x experts <= ``SEARCH_MAX``); routers at 1 to 65536
tokens, a tie-heavy input (small integers), fp32 and an odd fp16 router with 3 groups.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, capture, no_host_sync, poison_free_memory, replay

from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeRoutingBwdArgs,
    MoeRoutingFwdArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
    TokensPerExpertToMaskArgs,
)
from turbo_core.reference import moe_permute as ref
from turbo_core.reference import moe_routing as ref_routing
from turbo_core.testing import assert_same_bits, tolerance

pytestmark = [pytest.mark.gpu, COMPILED]


@pytest.fixture(scope="module")
def moe():
    from turbo_triton.moe import multihot, permute, permute_preprocess, routing, unpermute

    return {"multihot": multihot, "permute": permute, "preprocess": permute_preprocess, "routing": routing,
            "unpermute": unpermute}


def _strict(fn, *a, **kw):
    """``fn`` once (compiles), then again into poisoned memory with host syncs forbidden."""
    fn(*a, **kw)
    poison_free_memory()
    with no_host_sync():
        return fn(*a, **kw)


# -- data movement ----------------------------------------------------------------------------------

#: (tokens, hidden, local experts, top-k)
SHAPES = {"dsv3-ep1-t4096": (4096, 7168, 256, 8), "dsv3-ep1-t16384": (16384, 7168, 256, 8),
          "dsv3-ep8": (16384, 7168, 32, 8), "qwen3-235b-t8192": (8192, 4096, 128, 8),
          "qwen3-235b-t32768": (32768, 4096, 128, 8), "qwen3-30b": (16384, 2048, 128, 8),
          "mixtral": (4096, 4096, 8, 2), "odd": (777, 1000, 7, 3),
          "search-t1": (1, 7168, 256, 8), "search-t16": (16, 7168, 256, 8), "search-mixtral": (300, 4096, 8, 2)}


def _routing_inputs(t, e, k, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    idx = torch.rand((t, e), generator=g, device=DEV).topk(k, dim=1).indices.to(torch.int32)
    if t > 3:
        idx[1, 0] = -1  # a dropped slot
        idx[2, -1] = idx[2, 0]  # a repeated id
    return idx, torch.rand((t, k), generator=g, device=DEV)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_permutation_ops(moe, shape):
    t, h, e, k = SHAPES[shape]
    idx, probs = _routing_inputs(t, e, k)
    dense_map = ref_routing.indices_to_multihot(IndicesToMultihotArgs(idx, probs, e))[0]
    configs = [dict(pad_multiple=0), dict(pad_multiple=16), dict(pad_multiple=16, num_permuted_tokens=t * k // 2),
               dict(expert_capacity=max(1, t * k // e // 2)), dict(pad_multiple=0, probs_layout="topk")]
    for cfg in configs:
        for emap in (idx, dense_map):
            if emap.dtype == torch.bool and cfg.get("probs_layout") == "topk":
                continue
            a = MoePermutePreprocessArgs(emap, e, **cfg)
            assert_same_bits(_strict(moe["preprocess"].moe_permute_preprocess, a), ref.moe_permute_preprocess(a),
                             what=f"moe_permute_preprocess {cfg} from {emap.dtype}")
    rmap, tpe, _, _ = ref.moe_permute_preprocess(MoePermutePreprocessArgs(idx, e, pad_multiple=16, probs_layout="topk"))
    n = int(tpe.sum())
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn((t, h), device=DEV, generator=g).to(torch.bfloat16)
    scales = torch.rand((t, -(-h // 128)), device=DEV, generator=g)
    for args in (MoePermuteArgs(x, rmap, n, None, probs),
                 MoePermuteArgs(x.to(torch.float8_e4m3fn), rmap, n, scales, probs)):
        assert_same_bits(_strict(moe["permute"].moe_permute, args), ref.moe_permute(args),
                         what=f"moe_permute {args.tokens.dtype}")
    y = torch.randn((n, h), device=DEV, generator=g).to(torch.bfloat16)
    ua = MoeUnpermuteArgs(y, rmap, torch.rand((n,), device=DEV, generator=g), k, probs)
    got, want = _strict(moe["unpermute"].moe_unpermute, ua), ref.moe_unpermute(ua)
    assert_same_bits(got[1], want[1], what="moe_unpermute: the permuted probs scattered back")
    torch.testing.assert_close(got[0].float(), want[0].float(), rtol=2 ** -8, atol=1e-6,
                               msg=lambda m: f"moe_unpermute tokens: {m}")
    gt = torch.randn((t, h), device=DEV, generator=g).to(torch.bfloat16)
    ba = MoeUnpermuteBwdArgs(gt, y, rmap, probs)
    got, want = _strict(moe["unpermute"].moe_unpermute_bwd, ba), ref.moe_unpermute_bwd(ba)
    assert_same_bits(got[0], want[0], what="moe_unpermute_bwd grad_permuted")
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5 * float(gt.float().abs().mean() * h),
                               msg=lambda m: f"moe_unpermute_bwd grad_merging_probs: {m}")
    ma = IndicesToMultihotArgs(idx, probs, e)
    assert_same_bits(_strict(moe["multihot"].indices_to_multihot, ma), ref_routing.indices_to_multihot(ma),
                     what="indices_to_multihot")
    mb = IndicesToMultihotBwdArgs(torch.randn((t, e), device=DEV, generator=g), idx)
    assert_same_bits(_strict(moe["multihot"].indices_to_multihot_bwd, mb), ref_routing.indices_to_multihot_bwd(mb),
                     what="indices_to_multihot_bwd")
    tm = TokensPerExpertToMaskArgs(tpe, n + 100)
    assert_same_bits(_strict(moe["multihot"].tokens_per_expert_to_mask, tm), ref_routing.tokens_per_expert_to_mask(tm),
                     what="tokens_per_expert_to_mask")


def test_permutation_graph_replays_bit_for_bit(moe):
    t, h, e, k = 4096, 7168, 256, 8
    idx, probs = _routing_inputs(t, e, k)
    x = torch.randn((t, h), device=DEV).to(torch.bfloat16)
    cap = t * k + e * 16

    def step():
        rmap = moe["preprocess"].moe_permute_preprocess(
            MoePermutePreprocessArgs(idx, e, pad_multiple=16, num_permuted_tokens=cap, probs_layout="topk"))[0]
        out, _, pp = moe["permute"].moe_permute(MoePermuteArgs(x, rmap, cap, None, probs))
        return moe["unpermute"].moe_unpermute(MoeUnpermuteArgs(out, rmap, pp, k, probs))[0]

    eager = step()
    graph, out = capture(step)
    out.fill_(float("nan"))
    replay(graph)
    assert_same_bits(out, eager, what="replayed preprocess + permute + unpermute")


# -- router -----------------------------------------------------------------------------------------

#: id -> (experts, top-k, groups, selected groups, score function)
ROUTERS = {"dsv3": (256, 8, 8, 4, "sigmoid"), "qwen3": (128, 8, 1, 1, "softmax"), "mixtral": (8, 2, 1, 1, "softmax")}
SCALE = 2.5
ROUTER_CASES = ([(r, t, torch.bfloat16, "randn") for r in ROUTERS for t in (1, 7, 128, 1024, 4096, 16384, 65536)]
                + [(r, 4096, torch.bfloat16, "ties") for r in ROUTERS]
                + [(r, 4096, torch.float32, "randn") for r in ROUTERS]
                + [("odd", 1000, torch.float16, "randn")])


def _router(name):
    return (96, 6, 3, 2, "sigmoid") if name == "odd" else ROUTERS[name]


def _logits(t, e, dtype, kind, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    if kind == "ties":
        return torch.randint(-2, 3, (t, e), generator=g, device=DEV).to(dtype)
    return torch.randn((t, e), generator=g, device=DEV).to(dtype)


@pytest.mark.parametrize("name,t,dtype,kind", ROUTER_CASES,
                         ids=[f"{r}-t{t}-{str(d)[6:]}-{kd}" for r, t, d, kd in ROUTER_CASES])
def test_router(moe, name, t, dtype, kind):
    e, topk, groups, sel, fn = _router(name)
    x = _logits(t, e, dtype, kind)
    a = MoeRoutingFwdArgs(x, topk, groups, sel, fn, SCALE)
    assert moe["routing"].can_handle(a) is None
    got = _strict(moe["routing"].moe_routing_fwd, a)
    want = ref_routing.moe_routing_fwd(a)
    assert bool((got[2].sum(1) == topk).all()), "routing_map: not exactly top-k experts a row"
    differ = (got[2] != want[2]).any(1)
    if differ.any():
        raw = torch.sigmoid(x.float()) if fn == "sigmoid" else torch.softmax(x.float(), -1)
        s_got = (raw[differ] * got[2][differ]).sum(1)
        s_want = (raw[differ] * want[2][differ]).sum(1)
        far = (s_got - s_want).abs() > 1e-6 * s_want.abs()
        assert not far.any(), f"routing_map: {int(far.sum())} of {t} rows differ beyond a near tie"
    rtol, atol = tolerance(dtype)
    for what, g_, w_ in (("scores", got[0], want[0]), ("probs", got[1], want[1])):
        assert torch.isclose(g_.float(), w_.float(), rtol=rtol, atol=atol, equal_nan=True).all(), what
    g = torch.Generator(device=DEV).manual_seed(1)
    b = MoeRoutingBwdArgs(x, want[2], torch.randn((t, e), generator=g, device=DEV).to(dtype),
                          torch.randn((t, e), generator=g, device=DEV).to(dtype), fn, SCALE)
    gg, gw = _strict(moe["routing"].moe_routing_bwd, b), ref_routing.moe_routing_bwd(b)
    assert torch.isclose(gg.float(), gw.float(), rtol=rtol, atol=atol, equal_nan=True).all(), "grad_logits"


def test_router_graph_replays_bit_for_bit(moe):
    e, topk, groups, sel, fn = ROUTERS["dsv3"]
    x = _logits(4096, e, torch.bfloat16, "randn")
    gs, gp = torch.randn_like(x), torch.randn_like(x)

    def step():
        s, p, m = moe["routing"].moe_routing_fwd(MoeRoutingFwdArgs(x, topk, groups, sel, fn, SCALE))
        return s, p, m, moe["routing"].moe_routing_bwd(MoeRoutingBwdArgs(x, m, gs, gp, fn, SCALE))

    eager = step()
    graph, outs = capture(step)
    replay(graph)
    assert_same_bits(outs, eager, what="replayed router forward + backward")
