"""Properties of ``sparse_mla_fwd`` / ``sparse_mla_bwd`` against float64 math (the conformance kit's
dense formulation, ``turbo_core.testing.cases.sparse_mla.reference``) and the conformance gates: out
and lse at the input dtype's tolerance; gradients at it (fp32) or at the normwise gate (bf16/fp16,
whose kernels round P and dS to the input dtype), with the spec's ``delta = rowsum(dout * out)``
taken from the ``out`` the backward is given (``harness.backward_with_given_out``).

Drawn: tokens, rows of kv and top-k slots from 0; 1-5 heads; head dims from 1 with any
``kv_lora_rank`` in ``[1, d_qk]`` (no rope part at ``kv_lora_rank = d_qk``); index entries in
``[-2, num_kv + 2)`` (``-1``, other negatives and entries past the last row select nothing; valid
rows repeat), int32 or int64; a sink; an explicit scale; ``kv`` 2-D or ``[num_kv, 1, d_qk]``; q,
kv and the indices as contiguous tensors or as views with padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs
from turbo_core.testing.cases.sparse_mla import reference
from turbo_core.testing.numerics import assert_close_normwise
from turbo_core.testing.properties.harness import Property, Target, backward_with_given_out, close
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, dims, generator, seeds

__all__ = ["PROPERTIES"]


@dataclass(frozen=True)
class SparseMlaCase:
    tokens: int
    heads: int
    num_kv: int
    topk: int
    d_qk: int
    kv_lora_rank: int
    sink: bool
    scale: float | None
    kv_3d: bool
    wide_indices: bool  # int64 rather than int32
    padded: bool  # q, kv and the indices are views of row-padded buffers
    dtype: torch.dtype
    seed: int


@st.composite
def _cases(draw, max_dim: int):
    d_qk = draw(dims(1, min(max_dim, 64)))
    rank = draw(st.one_of(st.just(d_qk), st.integers(1, d_qk)))
    return SparseMlaCase(draw(dims(0, max_dim)), draw(st.integers(1, 5)), draw(dims(0, max_dim)),
                         draw(dims(0, max_dim)), d_qk, rank, draw(st.booleans()),
                         draw(st.one_of(st.none(), st.sampled_from((0.05, 0.3, 1.0)))), draw(st.booleans()),
                         draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from(FLOAT_DTYPES)), draw(seeds()))


def _padded(t: torch.Tensor, padded: bool, g: torch.Generator) -> torch.Tensor:
    """``t`` itself, or a view of ``t``'s values inside a buffer with 3 more elements per row (NaN
    there for floats, so a kernel that reads outside the view shows it)."""
    if not padded or t.dim() < 2:
        return t
    buf = torch.empty(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype)
    buf.fill_(float("nan") if t.is_floating_point() else -1)
    buf[..., :t.shape[-1]] = t
    return buf[..., :t.shape[-1]]


def _inputs(c: SparseMlaCase):
    """(q, kv, indices, sink, dout) on the CPU: kv ``[num_kv, d_qk]`` (the argument is its 3-D view
    with ``kv_3d``), indices in ``[-2, num_kv + 2)``."""
    g = generator(c.seed)
    q = torch.randn(c.tokens, c.heads, c.d_qk, generator=g).to(c.dtype)
    kv = torch.randn(c.num_kv, c.d_qk, generator=g).to(c.dtype)
    idx = torch.randint(-2, c.num_kv + 2, (c.tokens, c.topk), generator=g)
    idx = idx.to(torch.int64 if c.wide_indices else torch.int32)
    sink = torch.randn(c.heads, generator=g) if c.sink else None
    dout = torch.randn(c.tokens, c.heads, c.kv_lora_rank, generator=g).to(c.dtype)
    return q, kv, idx, sink, dout


def _reference(c: SparseMlaCase, q, kv, idx, sink):
    leaves = [t.detach().to(torch.float64).requires_grad_() if t is not None else None for t in (q, kv, sink)]
    q64, kv64, s64 = leaves
    scale = c.scale if c.scale is not None else c.d_qk ** -0.5
    out, lse = reference(q64, kv64, idx.long(), s64, c.kv_lora_rank, scale)
    return out, lse, leaves


def _args(c: SparseMlaCase, target: Target, q, kv, idx, sink):
    g = generator(c.seed + 1)
    kv_arg = kv.unsqueeze(1) if c.kv_3d else kv
    return (target.put(_padded(q, c.padded, g)), target.put(_padded(kv_arg, c.padded, g)),
            target.put(_padded(idx, c.padded, g)), target.put(sink))


def _check_fwd(c: SparseMlaCase, target: Target) -> None:
    q, kv, idx, sink, _ = _inputs(c)
    out64, lse64, _ = _reference(c, q, kv, idx, sink)
    qa, kva, idxa, sinka = _args(c, target, q, kv, idx, sink)
    out, lse = target.call(SparseMlaFwdArgs(qa, kva, idxa, sinka, c.kv_lora_rank, c.scale))
    if out.dtype != c.dtype or lse.dtype != torch.float32:
        raise AssertionError(f"sparse_mla_fwd: dtypes {out.dtype}/{lse.dtype}, expected {c.dtype}/float32")
    close(out, out64.detach(), c.dtype, "sparse_mla_fwd: out")
    close(lse, lse64.detach(), c.dtype, "sparse_mla_fwd: lse")


def _grad(dtype, what: str, got, want) -> None:
    if want is None:
        if got is not None:
            raise AssertionError(f"{what}: a gradient where none is expected")
        return
    if got is None or tuple(got.shape) != tuple(want.shape):
        raise AssertionError(f"{what}: {None if got is None else tuple(got.shape)}, expected {tuple(want.shape)}")
    if dtype == torch.float32:
        close(got, want, dtype, what)
    else:  # P and dS rounded to the input dtype: the normwise gate
        assert_close_normwise(got.detach().cpu(), want, dtype=dtype, what=what)


def _check_bwd(c: SparseMlaCase, target: Target) -> None:
    q, kv, idx, sink, dout = _inputs(c)
    out64, lse64, (q64, kv64, s64) = _reference(c, q, kv, idx, sink)
    out, lse = out64.detach().to(c.dtype), lse64.detach().float()
    backward_with_given_out(out64, lse64, out, dout)
    qa, kva, idxa, sinka = _args(c, target, q, kv, idx, sink)
    put = target.put
    dq, dkv, dsink = target.call(SparseMlaBwdArgs(put(dout), qa, kva, put(out), put(lse), idxa, sinka,
                                                  c.kv_lora_rank, c.scale))
    if dq.dtype != c.dtype or dkv.dtype != c.dtype:
        raise AssertionError(f"sparse_mla_bwd: dq/dkv dtypes {dq.dtype}/{dkv.dtype}, expected {c.dtype}")
    if tuple(dkv.shape) != tuple(kva.shape):
        raise AssertionError(f"sparse_mla_bwd: dkv shape {tuple(dkv.shape)}, expected kv's {tuple(kva.shape)}")
    _grad(c.dtype, "sparse_mla_bwd: dq", dq, q64.grad)
    _grad(c.dtype, "sparse_mla_bwd: dkv", dkv.reshape(c.num_kv, c.d_qk), kv64.grad)
    _grad(c.dtype, "sparse_mla_bwd: dsink", dsink, s64.grad if s64 is not None else None)


PROPERTIES = [
    Property("sparse_mla_fwd", _cases, _check_fwd),
    Property("sparse_mla_bwd", _cases, _check_bwd),
]
