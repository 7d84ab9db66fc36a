"""DeepEPTokenDispatcher in one process (ep_group=None; the multi-rank and tensor-parallel runs are in
turbo-deepep's tests): token_dispatch -> per-expert linear maps -> token_combine equals the float64
MoE ``out[t] = sum over t's experts e of p[t, e] * W_e x[t]`` (experts from top-k, indices or a
routing map), with every gradient; and the constructor's errors."""

import warnings

import pytest
import torch

from turbo_core.modules import DeepEPTokenDispatcher

F64 = torch.float64
T, H, E, K = 9, 4, 5, 2


def _setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((T, H), generator=g, dtype=F64)
    probs = torch.softmax(torch.randn((T, E), generator=g, dtype=F64), dim=1)
    w = torch.randn((E, H, H), generator=g, dtype=F64)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    idx[2, 1] = -1
    idx[5] = -1  # a token routed nowhere
    return x, probs, w, idx


def _selection(mode, probs, idx):
    if mode == "topk":
        return torch.zeros((T, E), dtype=torch.bool).scatter_(1, torch.topk(probs, K, dim=1).indices, True)
    return torch.zeros((T, E + 1), dtype=torch.bool).scatter_(1, torch.where(idx < 0, E, idx), True)[:, :E]


@pytest.mark.parametrize("mode,pad,cap", [("topk", 0, -1), ("indices", 4, -1), ("routing_map", 0, 40)])
def test_one_process_against_float64(mode, pad, cap):
    x64, p64, w64, idx = _setup()
    sel = _selection(mode, p64, idx)
    ref_x, ref_p, ref_w = (t.clone().requires_grad_() for t in (x64, p64, w64))
    want = ((ref_p * sel)[:, :, None] * torch.einsum("eoh,th->teo", ref_w, ref_x)).sum(dim=1)
    g = torch.linspace(-1, 1, T * H, dtype=F64).reshape(T, H)
    (want * g).sum().backward()
    x, p, w = (t.float().requires_grad_() for t in (x64, p64, w64))
    disp = DeepEPTokenDispatcher(E, K, None, pad_multiple=pad, permute_max_token_num=cap)
    kw = {"indices": idx} if mode == "indices" else {"routing_map": sel} if mode == "routing_map" else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, tpe, pp = disp.token_dispatch(x.reshape(3, 3, H), p, **kw)
    assert (mode == "routing_map") == any("routing_map" in str(c.message) for c in caught)
    assert tpe.dtype == torch.int64 and tpe.device.type == "cpu" and pp.dtype == torch.float32
    if cap >= 0:
        assert rows.shape[0] == cap
    pieces, start = [], 0
    for e, n in enumerate(tpe.tolist()):
        pieces.append((rows[start:start + n] @ w[e].T) * pp[start:start + n, None])
        start += n
    pieces.append(rows[start:] * 0)
    out = disp.token_combine(torch.cat(pieces))
    assert out.shape == (3, 3, H)
    torch.testing.assert_close(out.reshape(T, H).double(), want.detach(), rtol=1e-5, atol=1e-5)
    (out.reshape(T, H) * g.float()).sum().backward()
    for got, ref, what in ((x, ref_x, "x"), (p, ref_p, "probs"), (w, ref_w, "expert weights")):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-5, atol=1e-5, msg=lambda m, w=what: f"{w}: {m}")
    with pytest.raises(RuntimeError, match="token_combine: call token_dispatch first"):
        disp.token_combine(torch.cat(pieces))


def test_constructor_and_argument_errors():
    with pytest.raises(ValueError, match="router_topk: expected at most num_experts"):
        DeepEPTokenDispatcher(4, 5, None)
    with pytest.raises(ValueError, match="tp_group: pass tp_group and tp_ep_group together"):
        DeepEPTokenDispatcher(4, 2, None, tp_group=object())
    with pytest.raises(ValueError, match="permute_max_token_num: expected an int >= -1"):
        DeepEPTokenDispatcher(4, 2, None, permute_max_token_num=-2)
    with pytest.raises(TypeError, match="deepep_async_finish: expected a bool"):
        DeepEPTokenDispatcher(4, 2, None, deepep_async_finish=1)
    with pytest.warns(DeprecationWarning, match="permute_fusion"):
        DeepEPTokenDispatcher(4, 2, None, permute_fusion=True)
    disp = DeepEPTokenDispatcher(4, 2, None)
    assert (disp.ep_size, disp.tp_size, disp.num_local_experts, disp.router_topk) == (1, 1, 4, 2)
    with pytest.raises(ValueError, match=r"probs: expected shape \(3, 4\)"):
        disp.token_dispatch(torch.zeros(3, 8), torch.zeros(3, 5))
    with pytest.raises(ValueError, match="indices: expected int32/int64"):
        disp.token_dispatch(torch.zeros(3, 8), torch.zeros(3, 4), indices=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="routing_map: expected bool"):
        disp.token_dispatch(torch.zeros(3, 8), torch.zeros(3, 4), routing_map=torch.zeros(3, 4))
