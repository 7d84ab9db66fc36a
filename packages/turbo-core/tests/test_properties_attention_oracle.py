"""The attention_bwd property's float64 oracle follows the primitive's contract: ``D = rowsum(dout *
out)`` of the ``out`` it is given (rounded to the input dtype), not of the exact attention output.
Regression: fuzzing drew rows that see one key beside a sink (``causal`` with ``window=(0, -1)``),
where P is close to one, ``dP - D`` cancels, and out's rounding moves dq/dk past bf16's normwise gate
for every backend, the reference included, when the oracle differentiates the exact output."""

from __future__ import annotations

import torch

from turbo_core.testing.properties import attention as props
from turbo_core.testing.properties.harness import Target, backward_with_given_out

ONE_KEY_AND_A_SINK = props.AttnCase(batch=3, lens_q=(3,), lens_k=(3,), extra=0, h_kv=3, ratio=3, d_qk=2, d_v=2,
                                    causal=True, window=(0, -1), sink=True, scale=None, deterministic=False,
                                    layout="bshd", dtype=torch.bfloat16, seed=991)


def test_the_found_case_passes_on_the_reference_backend():
    props._check_bwd(ONE_KEY_AND_A_SINK, Target("TORCH", torch.device("cpu"), "attention_bwd"))


def _contract_grads(q, k, v, sink, dout, out, scale: float):
    """attention_bwd written out in float64 for one batch of ``[s, h, d]`` tensors, causal with
    ``window=(0, -1)`` (each query sees its own key): P over the visible keys and the sink (from the
    exact scores), dv = P^T dout, dP = dout v^T, D = rowsum(dout * out) of the given out,
    dS = P (dP - D), dq = scale dS k, dk = scale dS^T q, dsink = -sum_i P_sink D."""
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    eye = torch.eye(q.shape[0], dtype=torch.bool)
    s = s.masked_fill(~eye, float("-inf"))
    logits = torch.cat([s, sink.view(-1, 1, 1).expand(-1, s.shape[1], 1)], dim=-1)
    p_all = torch.softmax(logits, dim=-1)
    p, p_sink = p_all[..., :-1], p_all[..., -1]
    d = (dout * out).sum(-1).t()  # [h, s_q]
    dp = torch.einsum("qhd,khd->hqk", dout, v)
    ds = p * (dp - d.unsqueeze(-1))
    dq = torch.einsum("hqk,khd->qhd", ds, k) * scale
    dk = torch.einsum("hqk,qhd->khd", ds, q) * scale
    dv = torch.einsum("hqk,qhd->khd", p, dout)
    return dq, dk, dv, -(p_sink * d).sum(-1)


def test_the_oracle_equals_the_contract_written_out():
    case = props.AttnCase(batch=1, lens_q=(5,), lens_k=(5,), extra=0, h_kv=2, ratio=1, d_qk=4, d_v=3, causal=True,
                          window=(0, -1), sink=True, scale=None, deterministic=False, layout="bshd",
                          dtype=torch.bfloat16, seed=7)
    q, k, v, sink, dout = props._inputs(case)
    out64, lse64, (q64, k64, v64, sink64) = props._reference(case, q, k, v, sink)
    out = out64.detach().to(case.dtype)
    backward_with_given_out(out64, lse64, out, dout, lse_transposed=True)
    want = _contract_grads(q[0].double(), k[0].double(), v[0].double(), sink.double(), dout[0].double(),
                           out[0].double(), case.d_qk ** -0.5)
    for got, expected in zip((q64.grad[0], k64.grad[0], v64.grad[0], sink64.grad), want, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # and it differs from differentiating the exact output, which is what the fix is about
    exact = [t.detach().double().requires_grad_() for t in (q, k, v, sink)]
    o_exact, _ = props._attend(exact[0], exact[1], exact[2], case.d_qk ** -0.5, True, (0, -1), exact[3])
    o_exact.backward(dout.double())
    assert not torch.allclose(exact[0].grad, q64.grad, rtol=0, atol=1e-9)
