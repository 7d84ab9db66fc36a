"""The public ``gemm`` op and ``Linear`` module: autograd, fused wgrad, torch.compile, opcheck,
parity with torch.nn.Linear (values and state_dict). The gemm conformance cases run in
test_conformance_torch.py."""

import pytest
import torch

from turbo_core.modules import Linear
from turbo_core.ops import gemm


def test_validation_names_the_argument():
    a, b = torch.randn(4, 5), torch.randn(6, 3)
    with pytest.raises(ValueError, match="inner dimension mismatch"):
        gemm(a, b)
    with pytest.raises(ValueError, match="^a: expected a 2-D tensor"):
        gemm(torch.randn(2, 3, 4), b)
    with pytest.raises(TypeError, match="^b: expected the dtype of a"):
        gemm(a, torch.randn(5, 3, dtype=torch.float64).half())
    with pytest.raises(ValueError, match="fuse_bgrad_accum_pattern: expected None or 'megatron'"):
        gemm(a, torch.randn(5, 3), fuse_bgrad_accum_pattern="te")
    with pytest.raises(ValueError, match="b must carry a main_grad"):
        gemm(a, torch.randn(5, 3), fuse_bgrad_accum_pattern="megatron")
    w = torch.randn(5, 3)
    w.main_grad = torch.zeros(3, 5)
    with pytest.raises(ValueError, match=r"b.main_grad: expected shape \(5, 3\)"):
        gemm(a, w, fuse_bgrad_accum_pattern="megatron")


def test_fused_wgrad_returns_dummy_and_accumulates_twice():
    torch.manual_seed(0)
    x = torch.randn(9, 6, requires_grad=True)
    w = torch.randn(4, 6, requires_grad=True)
    w.main_grad = torch.zeros(4, 6)
    for _ in range(2):
        gemm(x, w, trans_b=True, fuse_bgrad_accum_pattern="megatron").sum().backward()
    want = 2 * (torch.ones(9, 4).double().t() @ x.detach().double())
    torch.testing.assert_close(w.main_grad.double(), want, rtol=1e-5, atol=1e-5)
    assert w.grad_added_to_main_grad is True
    assert torch.count_nonzero(w.grad) == 0  # the dummy gradient, never the real one


@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_compile_fullgraph_forward_backward(layout):
    ta, tb = layout[0] == "T", layout[1] == "T"
    torch.manual_seed(1)
    a = torch.randn(*((7, 5) if ta else (5, 7)), requires_grad=True)
    b = torch.randn(*((3, 7) if tb else (7, 3)), requires_grad=True)
    fn = torch.compile(lambda x, y: gemm(x, y, ta, tb), fullgraph=True, backend="aot_eager")
    out = fn(a, b)
    out.square().sum().backward()
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ref = (a2.t() if ta else a2) @ (b2.t() if tb else b2)
    ref.square().sum().backward()
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.grad.double(), a2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.grad.double(), b2.grad, rtol=1e-4, atol=1e-4)


def test_opcheck_custom_ops():
    a, b = torch.randn(5, 7), torch.randn(3, 7)
    torch.library.opcheck(torch.ops.turbo.gemm.default, (a, b, False, True, None, False))
    torch.library.opcheck(torch.ops.turbo.gemm.default, (a, b, False, True, torch.float32, True))
    torch.library.opcheck(torch.ops.turbo.gemm_accum.default, (a, b, False, True, False, torch.zeros(5, 3)))


def test_linear_matches_torch_nn_linear_and_state_dict():
    torch.manual_seed(2)
    ours = Linear(12, 7)
    ref = torch.nn.Linear(12, 7)
    ref.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == {"weight", "bias"}
    x = torch.randn(3, 4, 12, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y, y2 = ours(x), ref(x2)
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    y.sum().backward()
    y2.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, rtol=1e-5, atol=1e-5)
    # Round trip the other way, and no bias.
    nb = Linear(12, 7, bias=False)
    nb.load_state_dict(torch.nn.Linear(12, 7, bias=False).state_dict())
    assert nb.bias is None and "in_features=12, out_features=7, bias=False" in repr(nb)


def test_linear_compiles_fullgraph():
    torch.manual_seed(3)
    lin = Linear(8, 5, dtype=torch.bfloat16)
    x = torch.randn(6, 8, dtype=torch.bfloat16)
    out = torch.compile(lin, fullgraph=True, backend="aot_eager")(x)
    want = x.double() @ lin.weight.double().t() + lin.bias.double()
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)


def test_linear_rejects_wrong_feature_size():
    with pytest.raises(ValueError, match="x: expected last dim 8"):
        Linear(8, 5)(torch.randn(2, 7))
