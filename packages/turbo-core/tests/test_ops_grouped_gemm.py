"""The public ``grouped_gemm`` op and ``GroupedLinear`` module: the grouped conformance cases on
TORCH, validation messages, zero-size groups, the zeroed tail, fused wgrad, torch.compile, opcheck,
the reference's sync-free (GPU) path exercised on the CPU, and a GPU-marked run."""

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from turbo_core.dispatch.launch import grouped_gemm as launch
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.modules import GroupedLinear
from turbo_core.ops import grouped_gemm, grouped_gemm_compute_offs
from turbo_core.reference import grouped_gemm as ref
from turbo_core.testing.cases.grouped_gemm import CASES, reference_grouped_gemm, reference_grouped_gemm_variable_k

I64 = torch.int64


def _lens(*values, device="cpu"):
    return torch.tensor(values, dtype=I64, device=device)


def _offs(lens):
    out = [0]
    for v in lens:
        out.append(out[-1] + v)
    return out


def _operands(lens, k, n, trans_b, dtype=torch.float32, tail=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    m = sum(lens) + tail
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(*((len(lens), n, k) if trans_b else (len(lens), k, n)), generator=g).to(dtype)
    return a, b


# -- the shared conformance cases run against TORCH in test_conformance_torch.py; here: they can fail --


@pytest.mark.parametrize("primitive, what", [("grouped_gemm", "out"), ("grouped_gemm_variable_k", "grad_b")])
def test_conformance_cases_can_fail(monkeypatch, primitive, what):
    """A kernel off by 0.5 in one element of one group must fail a case."""
    real = launch.call

    def corrupt(name, args):
        out = real(name, args)
        if name == primitive:
            out = out.clone()
            out[-1] += 0.5
        return out

    monkeypatch.setattr(launch, "call", corrupt)
    case = next(c for c in CASES if c.id == "grouped_gemm-G3-K45-N33-NN-float32")
    with pytest.raises(AssertionError, match=what):
        case.run()


# -- validation ------------------------------------------------------------------------------------


def _good():
    a, b = _operands((2, 0, 3), 5, 4, False)
    return a, b, _lens(2, 0, 3)


@pytest.mark.parametrize(
    "change, exc, match",
    [
        (lambda a, b, gl: (a[None], b, gl, {}), ValueError, r"^a: expected a 2-D tensor"),
        (lambda a, b, gl: (a, b[0], gl, {}), ValueError, r"^b: expected a 3-D tensor"),
        (lambda a, b, gl: (a.long(), b, gl, {}), TypeError, r"^a: expected dtype in \(float16, bfloat16, float32\)"),
        (lambda a, b, gl: (a, b.half(), gl, {}), TypeError, r"^b: expected the dtype of a \(float32\), got float16"),
        (lambda a, b, gl: (a[:, :4], b, gl, {}), ValueError, r"^b: inner dimension mismatch"),
        (lambda a, b, gl: (a, b, gl, {"trans_b": True}), ValueError, r"^b: inner dimension mismatch.*trans_b=True"),
        (lambda a, b, gl: (a, b, [2, 0, 3], {}), TypeError, r"^group_lens: expected a torch.Tensor"),
        (lambda a, b, gl: (a, b, gl.int(), {}), TypeError, r"^group_lens: expected dtype in \(int64\)"),
        (lambda a, b, gl: (a, b, gl[None], {}), ValueError, r"^group_lens: expected a 1-D tensor"),
        (lambda a, b, gl: (a, b, gl[:2], {}), ValueError, r"^group_lens: expected 3 lengths"),
        (lambda a, b, gl: (a, b, gl, {"group_offs": _lens(0, 2, 2)}), ValueError,
         r"^group_offs: expected shape \(4,\)"),
        (lambda a, b, gl: (a, b, gl, {"group_offs": _lens(0, 2, 2, 5).int()}), TypeError,
         r"^group_offs: expected dtype in \(int64\)"),
        (lambda a, b, gl: (a, b, gl, {"group_offs": _lens(0, 2, 3, 5)}), ValueError,
         r"^group_offs: expected the exclusive prefix sum of group_lens \[0, 2, 2, 5\], got \[0, 2, 3, 5\]"),
        (lambda a, b, gl: (a, b, _lens(3, -1, 3), {}), ValueError,
         r"^group_lens: expected non-negative lengths, got \[3, -1, 3\]"),
        (lambda a, b, gl: (a, b, _lens(2, 1, 3), {}), ValueError,
         r"^group_lens: the lengths sum to 6, past the 5 rows"),
        (lambda a, b, gl: (a, b, gl, {"schedule": "dynamic"}), ValueError,
         r"^schedule: expected 'static' or 'work_steal', got 'dynamic'"),
        (lambda a, b, gl: (a, b, gl, {"num_cu": 0}), ValueError, r"^num_cu: expected None or a positive int, got 0"),
        (lambda a, b, gl: (a, b, gl, {"num_cu": -4}), ValueError, r"^num_cu: expected None or a positive int"),
        (lambda a, b, gl: (a, b, gl, {"num_cu": True}), ValueError, r"^num_cu: expected None or a positive int"),
        (lambda a, b, gl: (a, b, gl, {"num_cu": 8.0}), ValueError, r"^num_cu: expected None or a positive int"),
        (lambda a, b, gl: (a, b, gl, {"num_cu": 8, "schedule": "work_steal"}), ValueError,
         r"^num_cu: schedule='work_steal' needs num_cu=None, got 8"),
        (lambda a, b, gl: (a, b, gl, {"trans_b": 1}), TypeError, r"^trans_b: expected a bool"),
        (lambda a, b, gl: (a, b.to("meta"), gl, {}), ValueError, r"^b: expected a tensor on cpu \(like a\), got meta"),
        (lambda a, b, gl: (a, b, gl.to("meta"), {}), ValueError, r"^group_lens: expected a tensor on cpu"),
        (lambda a, b, gl: (a, b, gl, {"fuse_bgrad_accum_pattern": "te"}), ValueError,
         r"^fuse_bgrad_accum_pattern: expected None or 'megatron'"),
        (lambda a, b, gl: (a, b, gl, {"fuse_bgrad_accum_pattern": "megatron"}), ValueError,
         r"b must carry a main_grad"),
    ],
)
def test_validation_names_the_argument(change, exc, match):
    from turbo_core.dispatch.dispatcher import stats

    a, b, gl, kw = change(*_good())
    with pytest.raises(exc, match=match):
        grouped_gemm(a, b, gl, **kw)
    assert stats() == {}  # rejected before any kernel was selected or run


def test_validation_main_grad_shape():
    a, b, gl = _good()
    b.main_grad = torch.zeros(3, 4, 5)
    with pytest.raises(ValueError, match=r"^b.main_grad: expected shape \(3, 5, 4\)"):
        grouped_gemm(a, b, gl, fuse_bgrad_accum_pattern="megatron")


def test_variable_k_primitive_validation():
    a = torch.randn(5, 3)
    gl, go = _lens(2, 3), _lens(0, 2, 5)
    with pytest.raises(ValueError, match=r"^b: expected 5 rows \(the M_total of a\), got shape \(4, 2\)"):
        launch.grouped_gemm_variable_k(a, torch.randn(4, 2), gl, go)
    with pytest.raises(ValueError, match=r"^b: expected a 2-D tensor"):
        launch.grouped_gemm_variable_k(a, torch.randn(2, 5, 2), gl, go)
    with pytest.raises(TypeError, match=r"^trans_c: expected a bool"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), gl, go, trans_c=None)
    with pytest.raises(ValueError, match=r"^out: expected shape \(2, 2, 3\) \(trans_c=True\), got \(2, 3, 2\)"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), gl, go, trans_c=True, out=torch.zeros(2, 3, 2))
    with pytest.raises(TypeError, match=r"^out: expected dtype in"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), gl, go, out=torch.zeros(2, 3, 2, dtype=I64))
    with pytest.raises(ValueError, match=r"^group_offs: expected shape \(3,\)"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), gl, go[:2])
    with pytest.raises(ValueError, match=r"^group_lens: the lengths sum to 6, past the 5 rows"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), _lens(3, 3), _lens(0, 3, 6))
    with pytest.raises(ValueError, match=r"^num_cu: expected None or a positive int"):
        launch.grouped_gemm_variable_k(a, torch.randn(5, 2), gl, go, num_cu=0)


def test_compute_offs():
    offs = grouped_gemm_compute_offs(_lens(5, 0, 17, 1))
    assert offs.dtype == I64 and offs.tolist() == [0, 5, 5, 22, 23]
    assert grouped_gemm_compute_offs(_lens()).tolist() == [0]
    assert grouped_gemm_compute_offs(_lens(3, 4).to("meta")).device.type == "meta"  # computed where lens live
    with pytest.raises(TypeError, match=r"^group_lens: expected dtype in \(int64\)"):
        grouped_gemm_compute_offs(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^group_lens: expected a 1-D tensor"):
        grouped_gemm_compute_offs(_lens(1, 2)[None])
    compiled = torch.compile(grouped_gemm_compute_offs, fullgraph=True, backend="aot_eager")
    assert compiled(_lens(2, 0, 7)).tolist() == [0, 2, 2, 9]


# -- semantics: zero-size groups, the tail, hints, layouts ---------------------------------------


@pytest.mark.parametrize("trans_b", [False, True])
def test_zero_size_groups(trans_b):
    # every group empty: zeros out, zero gradients, and no tokens at all (M_total = 0)
    for m in (4, 0):
        a = torch.randn(m, 3, requires_grad=True)
        b = torch.randn(*((2, 5, 3) if trans_b else (2, 3, 5)), requires_grad=True)
        out = grouped_gemm(a, b, _lens(0, 0), trans_b=trans_b)
        assert out.shape == (m, 5) and torch.count_nonzero(out) == 0
        out.sum().backward()
        assert torch.count_nonzero(a.grad) == 0 and torch.count_nonzero(b.grad) == 0
    # an empty group between two others gets a zero weight gradient
    a, b = _operands((3, 0, 2), 4, 6, trans_b, seed=3)
    b.requires_grad_()
    grouped_gemm(a, b, _lens(3, 0, 2), trans_b=trans_b).square().sum().backward()
    assert torch.count_nonzero(b.grad[1]) == 0 and torch.count_nonzero(b.grad[0]) > 0


def test_no_groups():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.zeros(0, 4, 2, requires_grad=True)
    out = grouped_gemm(a, b, _lens())
    assert out.shape == (3, 2) and torch.count_nonzero(out) == 0
    out.sum().backward()
    assert b.grad.shape == (0, 4, 2) and torch.count_nonzero(a.grad) == 0


@pytest.mark.parametrize("trans_b", [False, True])
def test_padded_tail_is_zero_and_ignored(trans_b):
    """M_total > sum(group_lens): tail rows of the output (and of dgrad) are zero, and non-finite
    values in the tail rows of a or of grad_out never reach any result."""
    lens = (4, 0, 3)
    a, b = _operands(lens, 5, 6, trans_b, tail=4, seed=4)
    a[7:] = float("nan")
    a[8] = float("inf")
    a.requires_grad_()
    b.requires_grad_()
    out = grouped_gemm(a, b, _lens(*lens), trans_b=trans_b)
    assert torch.equal(out[7:], torch.zeros(4, 6))
    want = reference_grouped_gemm(a.detach().double(), b.detach().double(), lens, trans_b)
    torch.testing.assert_close(out[:7].double(), want[:7], rtol=1e-5, atol=1e-5)
    grad = torch.randn(11, 6)
    grad[7:] = float("inf")
    out.backward(grad)
    assert torch.equal(a.grad[7:], torch.zeros(4, 5))
    assert torch.isfinite(b.grad).all()
    wgrad = reference_grouped_gemm_variable_k(a.detach(), grad, lens, trans_c=trans_b)
    torch.testing.assert_close(b.grad.double(), wgrad, rtol=1e-5, atol=1e-5)


def test_hints_do_not_change_the_result():
    a, b = _operands((5, 1, 17), 9, 7, True, seed=5)
    gl = _lens(5, 1, 17)
    base = grouped_gemm(a, b, gl, trans_b=True)
    for kw in ({"num_cu": 3}, {"schedule": "work_steal"}, {"group_offs": _lens(0, 5, 6, 23)}):
        assert torch.equal(grouped_gemm(a, b, gl, trans_b=True, **kw), base)


def test_non_contiguous_inputs():
    lens = (3, 0, 4)
    a_t = torch.randn(6, 7).t()  # [7, 6], strides (1, 7)
    b_t = torch.randn(3, 5, 6).transpose(1, 2)  # [3, 6, 5] read with trans_b=False
    a_t.requires_grad_()
    b_t.requires_grad_()
    out = grouped_gemm(a_t, b_t, _lens(*lens))
    want = reference_grouped_gemm(a_t.detach().double(), b_t.detach().double(), lens, False)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert a_t.grad.shape == a_t.shape and b_t.grad.shape == b_t.shape
    torch.testing.assert_close(b_t.grad.double(), reference_grouped_gemm_variable_k(a_t.detach(), torch.ones(7, 5), lens),
                               rtol=1e-5, atol=1e-5)


def test_variable_k_accumulates_and_leaves_empty_groups_unchanged():
    lens = (3, 0, 5)
    a, g = torch.randn(9, 4).bfloat16(), torch.randn(9, 6).bfloat16()
    gl, go = _lens(*lens), _lens(*_offs(lens))
    out = torch.full((3, 6, 4), 0.5)
    got = launch.grouped_gemm_variable_k(a, g, gl, go, trans_c=True, out=out)
    assert got is out
    want = reference_grouped_gemm_variable_k(a, g, lens, trans_c=True) + 0.5
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[1], torch.full((6, 4), 0.5))
    plain = launch.grouped_gemm_variable_k(a, g, gl, go)
    assert plain.dtype == torch.bfloat16 and plain.shape == (3, 4, 6) and plain.is_contiguous()


def test_fused_wgrad_returns_dummy_and_accumulates_twice():
    torch.manual_seed(0)
    lens = (4, 0, 5)
    x = torch.randn(10, 6, requires_grad=True)  # one tail row
    w = torch.randn(3, 4, 6, requires_grad=True)
    w.main_grad = torch.zeros(3, 4, 6)
    for _ in range(2):
        grouped_gemm(x, w, _lens(*lens), trans_b=True, fuse_bgrad_accum_pattern="megatron").sum().backward()
    want = 2 * reference_grouped_gemm_variable_k(x.detach(), torch.ones(10, 4), lens, trans_c=True)
    torch.testing.assert_close(w.main_grad.double(), want, rtol=1e-5, atol=1e-5)
    assert w.grad_added_to_main_grad is True
    assert torch.count_nonzero(w.grad) == 0  # the dummy gradient, never the real one


# -- the reference's sync-free path (the one GPUs take), run on the CPU ---------------------------


@pytest.mark.parametrize("trans", [False, True])
def test_reference_sync_free_path_matches_per_group_path(monkeypatch, trans):
    lens = (0, 5, 1, 17, 0)
    a, b = _operands(lens, 13, 9, trans, tail=3, seed=7)
    a[-3:] = float("nan")
    gl, go = _lens(*lens), _lens(*_offs(lens))
    grad = torch.randn(a.shape[0], 9)
    grad[-3:] = float("inf")
    per_group = (ref.grouped_gemm(GroupedGemmArgs(a, b, gl, go, trans)),
                 ref.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, grad, gl, go, trans)))
    monkeypatch.setattr(ref, "_on_host", lambda t: False)
    sync_free = (ref.grouped_gemm(GroupedGemmArgs(a, b, gl, go, trans)),
                 ref.grouped_gemm_variable_k(GroupedGemmVariableKArgs(a, grad, gl, go, trans)))
    want = reference_grouped_gemm(a.double(), b.double(), lens, trans)
    want[-3:] = 0
    torch.testing.assert_close(per_group[0].double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sync_free[0].double(), want, rtol=1e-6, atol=1e-6)
    wgrad = reference_grouped_gemm_variable_k(a, grad, lens, trans_c=trans)
    torch.testing.assert_close(per_group[1].double(), wgrad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sync_free[1].double(), wgrad, rtol=1e-6, atol=1e-6)


# -- torch.compile and opcheck ---------------------------------------------------------------------


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("give_offs", [False, True])
def test_compile_fullgraph_forward_backward(trans_b, give_offs):
    lens = (3, 0, 5)
    a, b = _operands(lens, 7, 4, trans_b, tail=2, seed=8)
    a.requires_grad_()
    b.requires_grad_()
    gl = _lens(*lens)
    go = _lens(*_offs(lens)) if give_offs else None
    fn = torch.compile(lambda x, y, lens_, offs_: grouped_gemm(x, y, lens_, offs_, trans_b=trans_b),
                       fullgraph=True, backend="aot_eager")
    out = fn(a, b, gl, go)
    out.square().sum().backward()
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    want = reference_grouped_gemm(a2, b2, lens, trans_b)
    want.square().sum().backward()
    torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.grad.double(), a2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(b.grad.double(), b2.grad, rtol=1e-4, atol=1e-4)


def test_compiled_graph_still_checks_group_values():
    a, b = _operands((2, 3), 4, 3, False)
    fn = torch.compile(lambda x, y, lens_: grouped_gemm(x, y, lens_), fullgraph=True, backend="aot_eager")
    fn(a, b, _lens(2, 3))
    with pytest.raises(ValueError, match="group_lens: expected non-negative lengths"):
        fn(a, b, _lens(6, -1))


def test_opcheck_custom_ops():
    lens = (2, 0, 3)
    gl, go = _lens(*lens), _lens(*_offs(lens))
    a, b = _operands(lens, 5, 4, True, tail=1)
    torch.library.opcheck(torch.ops.turbo.grouped_gemm.default, (a, b, gl, go, True, None, "static"))
    torch.library.opcheck(torch.ops.turbo.grouped_gemm.default, (a, b.transpose(1, 2).contiguous(), gl, go,
                                                                 False, 4, "static"))
    grad = torch.randn(6, 4)
    torch.library.opcheck(torch.ops.turbo.grouped_gemm_variable_k.default, (a, grad, gl, go, False, None))
    torch.library.opcheck(torch.ops.turbo.grouped_gemm_variable_k.default, (a, grad, gl, go, True, None))
    torch.library.opcheck(torch.ops.turbo.grouped_gemm_variable_k_accum.default,
                          (a, grad, gl, go, True, None, torch.zeros(3, 4, 5)))


# -- GroupedLinear ---------------------------------------------------------------------------------


def test_grouped_linear_init_like_nn_linear():
    torch.manual_seed(9)
    gl = GroupedLinear(3, 12, 7)
    torch.manual_seed(9)
    lin = [torch.nn.Linear(12, 7, bias=False) for _ in range(3)]
    assert gl.weight.shape == (3, 7, 12) and set(gl.state_dict()) == {"weight"}
    for g in range(3):  # the same draws, group by group, as three bias-free nn.Linear layers
        assert torch.equal(gl.weight[g], lin[g].weight)
    assert gl.weight.abs().max() <= 1 / math.sqrt(12)
    assert repr(gl) == "GroupedLinear(group_num=3, in_features=12, out_features=7)"
    half = GroupedLinear(2, 4, 3, dtype=torch.bfloat16, device="cpu")
    assert half.weight.dtype == torch.bfloat16


def test_grouped_linear_forward_backward_and_state_dict():
    torch.manual_seed(10)
    mod = GroupedLinear(3, 6, 5)
    lens = (4, 0, 7)
    x = torch.randn(12, 6, requires_grad=True)
    y = mod(x, _lens(*lens))
    x2, w2 = x.detach().double().requires_grad_(), mod.weight.detach().double().requires_grad_()
    want = reference_grouped_gemm(x2, w2, lens, True)
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
    g = torch.randn(12, 5)
    y.backward(g)
    want.backward(g.double())
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mod.weight.grad.double(), w2.grad, rtol=1e-5, atol=1e-5)
    other = GroupedLinear(3, 6, 5)
    other.load_state_dict(mod.state_dict())
    assert torch.equal(other(x.detach(), _lens(*lens), _lens(*_offs(lens))), y.detach())


def test_grouped_linear_main_grad():
    torch.manual_seed(11)
    mod = GroupedLinear(2, 3, 4)
    mod.weight.main_grad = torch.zeros(2, 4, 3)
    x = torch.randn(5, 3)
    mod(x, _lens(2, 3)).sum().backward()
    want = reference_grouped_gemm_variable_k(x, torch.ones(5, 4), (2, 3), trans_c=True)
    torch.testing.assert_close(mod.weight.main_grad.double(), want, rtol=1e-5, atol=1e-5)
    assert mod.weight.grad_added_to_main_grad is True


def test_grouped_linear_compiles_fullgraph():
    torch.manual_seed(12)
    mod = GroupedLinear(3, 8, 5, dtype=torch.bfloat16)
    x = torch.randn(9, 8, dtype=torch.bfloat16, requires_grad=True)
    lens = (2, 6, 0)
    out = torch.compile(mod, fullgraph=True, backend="aot_eager")(x, _lens(*lens))
    out.float().sum().backward()
    want = reference_grouped_gemm(x.detach().double(), mod.weight.detach().double(), lens, True)
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    assert mod.weight.grad.shape == (3, 5, 8) and torch.count_nonzero(mod.weight.grad[2]) == 0


@pytest.mark.parametrize("with_trans", [True, False])
def test_grouped_linear_takes_pre_quantized_tokens_bit_for_bit(with_trans):
    """Tokens handed over quantized with the layer's ROWWISE recipe (``swiglu_with_probs_fp8``, as an
    expert's down projection would get them) give the output and gradients of handing the activation
    over unquantized (TORCH). Without the column copy the weight takes no gradient."""
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.ops import swiglu_with_probs, swiglu_with_probs_fp8

    cfg = Float8QuantConfig(granularity=ScalingGranularity.ROWWISE)
    gen = torch.Generator().manual_seed(5)
    lens = _lens(7, 0, 12)
    h0 = torch.randn(19, 2 * 24, generator=gen)
    probs = torch.rand(19, generator=gen)
    dy = torch.randn(19, 16, generator=gen)
    runs = []
    for fused in (True, False):
        torch.manual_seed(0)
        layer = GroupedLinear(3, 24, 16, config=cfg)
        layer.weight.requires_grad_(with_trans)
        h = h0.clone().requires_grad_()
        a = swiglu_with_probs_fp8(h, probs, config=cfg, with_trans=with_trans) if fused else swiglu_with_probs(h, probs)
        y = layer(a, lens)
        y.backward(dy)
        runs.append((y.detach(), h.grad, layer.weight.grad))
    (y_f, dh_f, dw_f), (y_p, dh_p, dw_p) = runs
    assert torch.equal(y_f, y_p) and torch.equal(dh_f, dh_p)
    assert (dw_f is None and dw_p is None) if not with_trans else torch.equal(dw_f, dw_p)


def test_grouped_linear_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"^x: expected shape \[M_total, 8\], got \(2, 7\)"):
        GroupedLinear(2, 8, 5)(torch.randn(2, 7), _lens(1, 1))
    with pytest.raises(ValueError, match=r"^x: expected shape \[M_total, 8\], got \(1, 2, 8\)"):
        GroupedLinear(2, 8, 5)(torch.randn(1, 2, 8), _lens(1, 1))
    with pytest.raises(ValueError, match=r"^group_num: expected an int >= 1, got 0"):
        GroupedLinear(0, 8, 5)
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.quantized_tensor import QuantizedTensor

    pre = QuantizedTensor.quantize(torch.randn(2, 8), torch.float8_e4m3fn, ScalingGranularity.ROWWISE, axis=1)
    with pytest.raises(ValueError, match=r"^x: a pre-quantized x needs an FP8 config on this GroupedLinear"):
        GroupedLinear(2, 8, 5)(pre, _lens(1, 1))
    rowwise = Float8QuantConfig(granularity=ScalingGranularity.ROWWISE)
    with pytest.raises(ValueError, match=r"^x: expected shape \[M_total, 7\], got \(2, 8\)"):
        GroupedLinear(2, 7, 5, config=rowwise)(pre, _lens(1, 1))
    with pytest.raises(ValueError, match=r"^in_features: expected an int >= 0, got -1"):
        GroupedLinear(2, -1, 5)


# -- GPU ---------------------------------------------------------------------------------------------

_needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")


@pytest.mark.gpu
@_needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_float64(dtype):
    lens = (5, 0, 17, 1)
    a, b = _operands(lens, 45, 33, True, dtype=dtype, tail=3, seed=13)
    a, b = a.cuda().requires_grad_(), b.cuda().requires_grad_()
    gl = _lens(*lens, device="cuda")
    out = grouped_gemm(a, b, gl, trans_b=True)
    grad = torch.randn(out.shape, device="cuda").to(dtype)
    out.backward(grad)
    a2, b2 = a.detach().cpu().double().requires_grad_(), b.detach().cpu().double().requires_grad_()
    want = reference_grouped_gemm(a2, b2, lens, True)
    want.backward(grad.cpu().double())
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    for got, exp in ((out, want), (a.grad, a2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got.cpu().double(), exp, rtol=tol, atol=tol)


@pytest.mark.gpu
@_needs_gpu
def test_gpu_bad_group_lens_fail_asynchronously():
    """On a GPU, with TURBO_DEVICE_ASSERTS=1, the value check is a device-side assert: no host sync
    in the op, and the failure is reported by a later CUDA call (which one depends on timing)."""
    # A device-side assert poisons the CUDA context: run it in a child process.
    code = textwrap.dedent("""
        import torch
        from turbo_core.ops import grouped_gemm
        a, b = torch.randn(5, 4, device="cuda"), torch.randn(2, 4, 3, device="cuda")
        out = grouped_gemm(a, b, torch.tensor([4, 3], device="cuda"))  # sums past the 5 rows
        torch.cuda.synchronize()
        print("no error")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TURBO_DEVICE_ASSERTS": "1"})
    assert proc.returncode != 0 and "no error" not in proc.stdout, proc.stdout + proc.stderr
    assert "group_lens/group_offs: expected non-negative lengths" in proc.stderr, proc.stderr


@pytest.mark.gpu
@_needs_gpu
def test_gpu_forward_is_capturable_in_a_cuda_graph():
    """No host sync on the GPU path (offsets computed on the device, device-side value checks,
    the reference's sync-free kernel): the forward can be captured and replayed."""
    lens = (3, 0, 6)
    a, b = _operands(lens, 9, 5, False, dtype=torch.bfloat16, tail=2, seed=14)
    a, b, gl = a.cuda(), b.cuda(), _lens(*lens, device="cuda")
    grouped_gemm(a, b, gl)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_gemm(a, b, gl)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    want = reference_grouped_gemm(a.cpu().double(), b.cpu().double(), lens, False)
    torch.testing.assert_close(out.cpu().double(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@_needs_gpu
def test_gpu_compile_fullgraph():
    lens = (4, 0, 7)
    a, b = _operands(lens, 11, 6, True, tail=1, seed=15)
    a, b = a.cuda().requires_grad_(), b.cuda().requires_grad_()
    fn = torch.compile(lambda x, y, lens_: grouped_gemm(x, y, lens_, trans_b=True), fullgraph=True,
                       backend="aot_eager")
    out = fn(a, b, _lens(*lens, device="cuda"))
    out.square().sum().backward()
    a2, b2 = a.detach().cpu().double().requires_grad_(), b.detach().cpu().double().requires_grad_()
    want = reference_grouped_gemm(a2, b2, lens, True)
    want.square().sum().backward()
    for got, exp in ((out, want), (a.grad, a2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got.cpu().double(), exp, rtol=1e-4, atol=1e-4)


def test_device_value_asserts_are_opt_in(monkeypatch):
    """Off (the default) the GPU value check enqueues nothing; with TURBO_DEVICE_ASSERTS=1 it
    asserts the right verdict (``torch._assert_async`` is recorded instead of run)."""
    from turbo_core.dispatch.specs import validate

    lens, offs = torch.tensor([2, 3]), torch.tensor([0, 2, 5])
    seen = []
    monkeypatch.setattr(torch, "_assert_async", lambda ok, msg: seen.append((bool(ok), msg)))
    monkeypatch.delenv(validate.DEVICE_ASSERTS_ENV, raising=False)
    validate.assert_group_values_async(lens, offs, 5)
    assert seen == [] and not validate.device_asserts()
    monkeypatch.setenv(validate.DEVICE_ASSERTS_ENV, "1")
    validate.assert_group_values_async(lens, offs, 5)
    validate.assert_group_values_async(lens, torch.tensor([0, 1, 5]), 5)  # offs not the prefix sum
    validate.assert_group_values_async(lens, None, 4)  # lengths past the rows
    assert [ok for ok, _ in seen] == [True, False, False]
    assert "group_lens/group_offs" in seen[0][1]
