"""moe_dispatch / moe_combine on the reference backend (one process): validation messages, a group
of world size 1 (gloo), the decline of a larger group (a fake 2-rank group) naming turbo-deepep,
FP8 scales, torch.compile (fullgraph, aot_eager) and opcheck of the custom ops."""

import pytest
import torch
import torch.distributed as dist

from turbo_core import BackendError, GlobalBackendManager, use_backend
from turbo_core.ops import MoeDispatchHandle, moe_combine, moe_dispatch

FP8 = getattr(torch, "float8_e4m3fn", None)


def _inputs(t=5, k=2):
    torch.manual_seed(t * 10 + k)
    idx = torch.tensor([[0, 2], [1, -1], [3, 3], [-1, -1], [2, 0]])[:t, :k]
    return torch.randn(t, 4), idx, torch.rand(t, k)


@pytest.fixture
def process_group():
    """``process_group(world_size)``: a process group in this process (gloo for 1 rank, the fake
    backend for more), torn down after the test."""
    made = []

    def _make(world: int):
        if world == 1:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        else:
            from torch.testing._internal.distributed.fake_pg import FakeStore

            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        made.append(True)
        return dist.group.WORLD

    yield _make
    if made and dist.is_initialized():
        dist.destroy_process_group()


def test_dispatch_validation():
    x, idx, p = _inputs()
    with pytest.raises(TypeError, match=r"^token_probs: expected dtype in \(float32\)"):
        moe_dispatch(x, idx, p.bfloat16(), 4)
    with pytest.raises(ValueError, match="^token_indices: expert id 4 out of range"):
        moe_dispatch(x, idx.clamp(max=3) + (idx == 3).long(), p, 4)
    with pytest.raises(ValueError, match=r"^token_probs: expected shape \(5, 2\)"):
        moe_dispatch(x, idx, p[:, :1], 4)
    with pytest.raises(ValueError, match="^token_indices: expected 5 rows"):
        moe_dispatch(x, idx[:3], p[:3], 4)
    with pytest.raises(ValueError, match="^num_worst_tokens: expected 0 or >= the number of tokens"):
        moe_dispatch(x, idx, p, 4, num_worst_tokens=3)
    with pytest.raises(ValueError, match="^num_experts: expected an int >= 1"):
        moe_dispatch(x, idx, p, 0)
    with pytest.raises(ValueError, match="^x: expected a tensor or"):
        moe_dispatch((x, x, x), idx, p, 4)
    with pytest.raises(TypeError, match="^group: expected None or a torch.distributed.ProcessGroup"):
        moe_dispatch(x, idx, p, 4, group="world")
    if FP8 is not None:
        with pytest.raises(ValueError, match="^x_scales: required with an fp8 x"):
            moe_dispatch(x.to(FP8), idx, p, 4)


def test_combine_validation():
    x, idx, p = _inputs()
    res = moe_dispatch(x, idx, p, 4)
    with pytest.raises(ValueError, match=r"^x: expected 5 rows \(the dispatch's received rows\)"):
        moe_combine(res.recv_x[:4], None, res.handle)
    with pytest.raises(TypeError, match="^handle: expected the MoeDispatchHandle"):
        moe_combine(res.recv_x, None, (1, 2))
    assert isinstance(res.handle, MoeDispatchHandle) and res.handle.backend == "TORCH"
    assert res.handle.num_tokens == 5 and res.handle.num_local_experts == 4


def test_single_process_layout_and_round_trip():
    x, idx, p = _inputs()
    recv_x, recv_idx, recv_probs, tpe, handle = moe_dispatch(x, idx, p, 4, None, num_worst_tokens=8)
    assert recv_x.shape == (8, 4) and torch.equal(recv_x[:5], x) and not recv_x[5:].any()
    assert recv_idx.tolist() == idx.tolist() + [[-1, -1]] * 3
    assert torch.equal(recv_probs[:5], p * (idx >= 0)) and not recv_probs[5:].any()
    assert tpe.tolist() == [2, 1, 2, 1] and tpe.dtype == torch.int64  # (token, expert) pairs, on the device
    torch.testing.assert_close(moe_combine(recv_x * 3, None, handle), x * 3)


def test_group_of_one_rank(process_group):
    group = process_group(1)
    x, idx, p = _inputs()
    x.requires_grad_()
    res = moe_dispatch(x, idx, p, 4, group)
    assert res.handle.group is group
    y = moe_combine(res.recv_x * 2, group, res.handle)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    with pytest.raises(ValueError, match="^group: expected the process group of the dispatch"):
        moe_combine(res.recv_x, None, res.handle)


def test_larger_group_is_declined_naming_turbo_deepep(process_group):
    group = process_group(2)
    x, idx, p = _inputs()
    with pytest.raises(BackendError, match="turbo-deepep"):
        moe_dispatch(x, idx, p, 4, group)
    GlobalBackendManager.set_moe_dispatch_combine_backend("TORCH")
    with pytest.raises(BackendError, match=r"TORCH .* world size 1.* 2 ranks.*turbo-deepep"):
        moe_dispatch(x, idx, p, 4, group)
    with pytest.raises(ValueError, match="^num_experts: expected a multiple of the group's world size 2"):
        moe_dispatch(x, idx, p, 5, group)


def test_combine_is_pinned_to_the_handle_backend():
    x, idx, p = _inputs()
    res = moe_dispatch(x, idx, p, 4)
    foreign = res.handle._replace(backend="DEEP_EP")
    with pytest.raises(BackendError, match="DEEP_EP"):
        moe_combine(res.recv_x, None, foreign)
    with use_backend("TORCH"):
        torch.testing.assert_close(moe_combine(res.recv_x, None, res.handle), x)


@pytest.mark.skipif(FP8 is None, reason="no float8 dtype in this torch")
def test_fp8_scales_travel_with_tokens():
    x, idx, p = _inputs()
    xq, scales = x.to(FP8), torch.rand(5, 2)
    (recv, recv_scales), recv_idx, _, _, handle = moe_dispatch((xq, scales), idx, p, 4, num_worst_tokens=6)
    assert recv.dtype == FP8 and torch.equal(recv[:5].float(), xq.float()) and recv[5:].float().eq(0).all()
    assert torch.equal(recv_scales[:5], scales) and not recv_scales[5].any()


def test_dispatch_combine_compile_fullgraph():
    x, idx, p = _inputs()
    x.requires_grad_()
    p.requires_grad_()

    def fn(x, idx, p):
        recv_x, _, recv_probs, tpe, handle = moe_dispatch(x, idx, p, 4, None)
        return moe_combine(recv_x * recv_probs.sum(1, keepdim=True), None, handle), tpe

    out, tpe = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, idx, p)
    out.square().sum().backward()
    x2, p2 = x.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
    want = x2 * (p2 * (idx >= 0)).sum(1, keepdim=True)
    want.square().sum().backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(p.grad, p2.grad)
    assert tpe.tolist() == [2, 1, 2, 1]


def test_opcheck_custom_ops():
    x, idx, p = _inputs()
    torch.library.opcheck(torch.ops.turbo.moe_dispatch.default, (x, None, idx, p, 4, "", 0, False, False))
    torch.library.opcheck(torch.ops.turbo.moe_dispatch.default, (x, torch.rand(5, 3), idx, p, 4, "", 7, False, False))
    src = torch.tensor([0, 1, 2, 3, 4, -1, -1])
    torch.library.opcheck(torch.ops.turbo.moe_dispatch_cached.default, (x, None, src, 5, 4, "TORCH", ""))
    y = torch.randn(7, 4)
    torch.library.opcheck(torch.ops.turbo.moe_combine.default, (y, None, src, 5, 4, "TORCH", ""))
    torch.library.opcheck(torch.ops.turbo.moe_combine.default, (y, torch.rand(7, 2), src, 5, 4, "", ""))
