"""``cross_entropy`` and ``CrossEntropyLoss``: the reference backend TORCH against float64
``F.cross_entropy`` (forward, backward, every reduction, ignore_index, label smoothing), the
out-of-range target rule, validation messages, opcheck, torch.compile (fullgraph) and the module."""

import pytest
import torch
import torch.nn.functional as F

from turbo_core.dispatch import dispatcher, get_primitive
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_core.modules import CrossEntropyLoss
from turbo_core.ops import cross_entropy
from turbo_core.reference import loss as ref
from turbo_core.testing.cases.loss import CASES


def _inputs(rows, classes, *, ignored=0.0, seed=0, ignore_index=-100):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, classes, generator=gen, dtype=torch.float64) * 3
    t = torch.randint(0, classes, (rows,), generator=gen)
    t[torch.rand(rows, generator=gen) < ignored] = ignore_index
    return x, t


# -- the reference backend against F.cross_entropy in float64 ----------------------------------------

@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("ignore_index", [-100, 3])
@pytest.mark.parametrize("rows,classes", [(1, 1), (7, 300), (40, 1000)])
def test_reference_against_float64_f_cross_entropy(rows, classes, ignore_index, eps):
    x, t = _inputs(rows, classes, ignored=0.3, seed=rows + classes, ignore_index=ignore_index)
    keep = t != ignore_index
    x64 = x.clone().requires_grad_()
    want = F.cross_entropy(x64, t, ignore_index=ignore_index, reduction="none", label_smoothing=eps)
    dloss = torch.randn(rows, dtype=torch.float64) * classes
    (want * dloss).sum().backward()

    loss, lse = ref.cross_entropy_fwd(CrossEntropyFwdArgs(x.float(), t, ignore_index, eps))
    want_lse = torch.where(keep, torch.logsumexp(x.float().double(), 1), 0.0)
    x32 = x.float().double()  # the reference reads the fp32 logits: the oracle takes the same values
    want32 = F.cross_entropy(x32, t, ignore_index=ignore_index, reduction="none", label_smoothing=eps)
    assert loss.dtype == lse.dtype == torch.float32
    torch.testing.assert_close(loss.double(), want32, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss.double(), want.detach(), rtol=1e-5, atol=1e-5)  # fp32 logits vs float64 ones

    grad = ref.cross_entropy_bwd(CrossEntropyBwdArgs(dloss.float(), x.float(), t, lse, ignore_index, eps))
    assert grad.dtype == torch.float32 and grad.shape == x.shape
    torch.testing.assert_close(grad.double(), x64.grad, rtol=1e-4, atol=1e-4)


def test_reference_rounds_once_to_the_logits_dtype():
    x, t = _inputs(9, 257, seed=4)
    xb = x.bfloat16()
    loss, lse = ref.cross_entropy_fwd(CrossEntropyFwdArgs(xb, t, -100, 0.2))
    xd = xb.double().requires_grad_()
    want = F.cross_entropy(xd, t, reduction="none", label_smoothing=0.2)
    assert torch.equal(loss, want.detach().float())  # float64 math rounded once to fp32
    want.sum().backward()
    grad = ref.cross_entropy_bwd(CrossEntropyBwdArgs(torch.ones(9), xb, t, lse, -100, 0.2))
    assert grad.dtype == torch.bfloat16
    # from the fp32 lse: within one bf16 rounding of float64 autograd
    torch.testing.assert_close(grad.double(), xd.grad, rtol=2**-8, atol=1e-7)


def test_reference_ignored_rows_are_never_read():
    x, t = _inputs(6, 50, seed=5)
    t[[1, 4]] = -100
    x[[1, 4]] = float("nan")
    loss, lse = ref.cross_entropy_fwd(CrossEntropyFwdArgs(x.float(), t))
    assert loss[[1, 4]].tolist() == [0.0, 0.0] and lse[[1, 4]].tolist() == [0.0, 0.0]
    assert loss.isfinite().all() and lse.isfinite().all()
    dloss, lse_in = torch.ones(6), lse.clone()
    dloss[1], lse_in[4] = float("nan"), float("nan")
    grad = ref.cross_entropy_bwd(CrossEntropyBwdArgs(dloss, x.float(), t, lse_in))
    assert torch.equal(grad[[1, 4]], torch.zeros(2, 50)) and grad.isfinite().all()


def test_an_out_of_range_target_the_host_cannot_read_gives_nan_rows():
    """The kernel-side rule (a GPU tensor, or under torch.compile): the row's loss and gradients are
    NaN, the other rows are untouched; the reference backend keeps it as the kernels do."""
    x, t = _inputs(4, 30, seed=6)
    t[1], t[2] = 30, -5
    loss, lse = ref.cross_entropy_fwd(CrossEntropyFwdArgs(x.float(), t))
    assert loss.isnan().tolist() == [False, True, True, False] and lse.isfinite().all()
    grad = ref.cross_entropy_bwd(CrossEntropyBwdArgs(torch.ones(4), x.float(), t, lse))
    assert grad[1:3].isnan().all() and grad[[0, 3]].isfinite().all()


# -- the op ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_op_reductions_against_f_cross_entropy(reduction):
    x, t = _inputs(12, 77, ignored=0.4, seed=7)
    x = x.reshape(3, 4, 77)
    t = t.reshape(3, 4)
    x32 = x.float().requires_grad_()
    got = cross_entropy(x32, t, reduction=reduction, label_smoothing=0.05)
    xd = x.float().double().requires_grad_()
    want = F.cross_entropy(xd.reshape(-1, 77), t.reshape(-1), reduction=reduction, label_smoothing=0.05)
    want = want.reshape(t.shape) if reduction == "none" else want
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-5, atol=1e-5)
    w = torch.randn(want.shape, dtype=torch.float64) * 77
    (got * w.float()).sum().backward()
    (want * w).sum().backward()
    assert x32.grad.shape == x.shape
    torch.testing.assert_close(x32.grad.double(), xd.grad, rtol=1e-4, atol=1e-4)


def test_mean_over_no_counted_row_is_nan_with_zero_gradient():
    x = torch.randn(3, 10, requires_grad=True)
    t = torch.full((3,), -100)
    loss = cross_entropy(x, t)
    assert loss.isnan() and F.cross_entropy(x.detach(), t).isnan()
    loss.backward()
    assert torch.equal(x.grad, torch.zeros(3, 10))
    assert cross_entropy(torch.randn(0, 5), torch.zeros(0, dtype=torch.int64)).isnan()
    assert cross_entropy(torch.randn(0, 5), torch.zeros(0, dtype=torch.int64), reduction="sum") == 0


def test_autograd_runs_the_two_primitives_and_no_grad_runs_one():
    x, t = torch.randn(4, 9, requires_grad=True), torch.tensor([1, 2, -100, 8])
    cross_entropy(x, t).backward()
    calls = {prim for (prim, _backend, _how) in dispatcher.stats()}
    assert {"cross_entropy_fwd", "cross_entropy_bwd"} <= calls
    with torch.no_grad():
        out = cross_entropy(x, t)
    assert out.grad_fn is None
    assert not cross_entropy(x.detach(), t).requires_grad


def test_family_scope_selects_the_backend(monkeypatch):
    monkeypatch.setenv("TURBO_CROSS_ENTROPY_BACKEND", "TORCH")
    x = torch.randn(4, 8, requires_grad=True)
    cross_entropy(x, torch.tensor([0, 1, 2, 3])).backward()
    hows = {(prim, how) for (prim, _backend, how) in dispatcher.stats()}
    assert {("cross_entropy_fwd", "env"), ("cross_entropy_bwd", "env")} <= hows
    for name in ("cross_entropy_fwd", "cross_entropy_bwd"):
        prim = get_primitive(name)
        assert prim.family == "cross_entropy" and prim.precision.name == "BF16_FP16_FP32"


def test_an_out_of_range_target_on_the_cpu_raises_before_any_kernel():
    x = torch.randn(4, 10, requires_grad=True)
    with dispatcher.recording() as calls:
        with pytest.raises(ValueError, match=r"^target: expected class indices in \[0, 10\) or ignore_index \(-100\), "
                                             r"got 10 at row 2"):
            cross_entropy(x, torch.tensor([0, 1, 10, -100]))
        with pytest.raises(ValueError, match=r"^target: .* got -1 at row 0"):
            cross_entropy(x, torch.tensor([-1, 1, 2, 3]))
    assert calls == []
    # ignore_index need not be negative: a class index as ignore_index is allowed, its rows are ignored
    assert cross_entropy(x, torch.tensor([0, 1, 2, 3]), ignore_index=0, reduction="none")[0] == 0


def test_validation_names_the_argument():
    x, t = torch.randn(5, 8), torch.randint(0, 8, (5,))
    cases = [
        ((TypeError, "^logits: expected a torch.Tensor"), ([[1.0]], t), {}),
        ((TypeError, "^logits: expected dtype in"), (torch.ones(5, 8, dtype=torch.int64), t), {}),
        ((ValueError, "^logits: expected at least a 1-D"), (torch.tensor(1.0), t), {}),
        ((ValueError, "^logits: expected at least one class"), (torch.randn(5, 0), t), {}),
        ((TypeError, "^target: expected a torch.Tensor"), (x, [1, 2, 3, 4, 5]), {}),
        ((TypeError, r"^target: expected dtype in \(int64\)"), (x, t.int()), {}),
        ((ValueError, r"^target: expected shape \(5,\) \(logits' shape without its last"), (x, t[:4]), {}),
        ((ValueError, "^target: expected a tensor on cpu"), (x, t.to("meta")), {}),
        ((TypeError, "^ignore_index: expected an int"), (x, t), {"ignore_index": -100.0}),
        ((ValueError, "^reduction: expected 'mean' or 'sum' or 'none'"), (x, t), {"reduction": "avg"}),
        ((ValueError, r"^label_smoothing: expected a float in \[0, 1\]"), (x, t), {"label_smoothing": 1.5}),
        ((ValueError, r"^label_smoothing: expected a float in \[0, 1\]"), (x, t), {"label_smoothing": float("nan")}),
        ((TypeError, r"^label_smoothing: expected a float in \[0, 1\]"), (x, t), {"label_smoothing": True}),
    ]
    for (exc, match), args, kwargs in cases:
        with pytest.raises(exc, match=match):
            cross_entropy(*args, **kwargs)


def test_primitive_validation_names_the_argument():
    fwd, bwd = get_primitive("cross_entropy_fwd"), get_primitive("cross_entropy_bwd")
    x, t, v = torch.randn(4, 6), torch.tensor([0, 1, 2, 3]), torch.zeros(4)
    with pytest.raises(ValueError, match="^logits: expected a contiguous tensor"):
        fwd.check_args(CrossEntropyFwdArgs(torch.randn(6, 4).t(), t))
    with pytest.raises(ValueError, match="^logits: expected a 2-D tensor"):
        fwd.check_args(CrossEntropyFwdArgs(torch.randn(1, 4, 6), t))
    with pytest.raises(ValueError, match="^target: expected a 1-D tensor"):
        fwd.check_args(CrossEntropyFwdArgs(x, t.reshape(2, 2)))
    with pytest.raises(ValueError, match=r"^target: expected shape \(4,\) \(one per row of logits\)"):
        fwd.check_args(CrossEntropyFwdArgs(x, t[:3]))
    with pytest.raises(TypeError, match=r"^dloss: expected dtype in \(float32\)"):
        bwd.check_args(CrossEntropyBwdArgs(v.bfloat16(), x, t, v))
    with pytest.raises(ValueError, match=r"^lse: expected shape \(4,\)"):
        bwd.check_args(CrossEntropyBwdArgs(v, x, t, v[:3]))
    with pytest.raises(ValueError, match=r"^target: .* got 6 at row 3"):
        bwd.check_args(CrossEntropyBwdArgs(v, x, torch.tensor([0, 1, 2, 6]), v))


@pytest.mark.parametrize("case_id", ["cross_entropy-mean-5x300-float32", "cross_entropy-label_smoothing0.1-5x1000-bfloat16"])
def test_cases_catch_a_wrong_kernel(monkeypatch, case_id):
    # The conformance cases must be able to fail: lse off by 1e-2 (forward and backward read it).
    real = ref.logsumexp
    monkeypatch.setattr(ref, "logsumexp", lambda x: real(x) + 1e-2)
    case = next(c for c in CASES if c.id == case_id)
    with pytest.raises(AssertionError):
        case.run()


def test_opcheck_custom_ops():
    x, t = torch.randn(5, 33), torch.tensor([0, 32, -100, 4, 5])
    for dtype, eps in ((torch.float32, 0.0), (torch.bfloat16, 0.1)):
        xd = x.to(dtype)
        torch.library.opcheck(torch.ops.turbo.cross_entropy_fwd.default, (xd, t, -100, eps))
        lse = torch.logsumexp(x, -1)
        torch.library.opcheck(torch.ops.turbo.cross_entropy_bwd.default, (torch.rand(5), xd, t, lse, -100, eps))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compile_fullgraph_forward_backward(reduction):
    torch.manual_seed(1)
    x = torch.randn(2, 5, 33, requires_grad=True)
    t = torch.randint(0, 33, (2, 5))
    t[0, 1] = -100
    fn = torch.compile(lambda a, b: cross_entropy(a, b, reduction=reduction, label_smoothing=0.1), fullgraph=True,
                       backend="aot_eager")
    out = fn(x, t)
    (out * 3).sum().backward()
    x2 = x.detach().double().requires_grad_()
    want = F.cross_entropy(x2.reshape(-1, 33), t.reshape(-1), reduction=reduction, label_smoothing=0.1)
    want = want.reshape(2, 5) if reduction == "none" else want
    (want * 3).sum().backward()
    torch.testing.assert_close(out.double(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-5, atol=1e-5)


def test_a_compiled_graph_checks_cpu_targets_when_it_runs():
    """Tracing reads no target (fake tensors); the primitive's validator reads them when the compiled
    graph runs on CPU tensors."""
    fn = torch.compile(lambda a, b: cross_entropy(a, b, reduction="none"), fullgraph=True, backend="aot_eager")
    assert fn(torch.randn(3, 7), torch.tensor([1, 6, 2])).isfinite().all()
    with pytest.raises(ValueError, match=r"^target: .* got 7 at row 1"):
        fn(torch.randn(3, 7), torch.tensor([1, 7, 2]))


def test_inductor_compiles_the_graph_case():
    import torch._inductor.config as inductor_config

    from turbo_core.testing.graph_cases import graph_cases
    from turbo_core.testing.graph_modes import check_compiled

    with inductor_config.patch({"cpp.vec_isa_ok": False, "compile_threads": 1}):
        check_compiled(graph_cases("cpu")["cross_entropy"], "cpu", "default", calls=2)


# -- the module ------------------------------------------------------------------------------------

def test_module_matches_torch_nn_cross_entropy_loss():
    x, t = _inputs(10, 40, ignored=0.3, seed=9)
    for kw in ({}, {"reduction": "sum", "label_smoothing": 0.2}, {"ignore_index": 5, "reduction": "none"}):
        tk = torch.where(t == -100, kw.get("ignore_index", -100), t)
        mine, theirs = CrossEntropyLoss(**kw), torch.nn.CrossEntropyLoss(**kw)
        torch.testing.assert_close(mine(x.float(), tk).double(), theirs(x.float().double(), tk), rtol=1e-5, atol=1e-5)
    assert repr(CrossEntropyLoss(label_smoothing=0.1)) == \
        "CrossEntropyLoss(ignore_index=-100, reduction='mean', label_smoothing=0.1)"


def test_module_validation():
    with pytest.raises(TypeError):  # torch's first positional argument is weight: keyword-only here
        CrossEntropyLoss(torch.ones(4))
    with pytest.raises(ValueError, match="^reduction: expected"):
        CrossEntropyLoss(reduction="batchmean")
    with pytest.raises(ValueError, match="^label_smoothing: expected a float in"):
        CrossEntropyLoss(label_smoothing=-0.1)
    with pytest.raises(TypeError, match="^ignore_index: expected an int"):
        CrossEntropyLoss(ignore_index=None)
    with pytest.raises(ValueError, match=r"^target: expected shape \(3,\)"):
        CrossEntropyLoss()(torch.randn(3, 4), torch.zeros(4, dtype=torch.int64))
