"""Context-parallel attention (``flash_attn_usp_func``, ``flash_attn_varlen_usp_func``,
``flash_attn_fp8_usp_func``, ``Attention`` with groups) over gloo at world sizes 2 and 4, on the TORCH
reference backend: Ulysses, ring (contiguous and zigzag) and both (2 x 2), causal or not, dense and
varlen, forward and backward, against float64 attention on the whole sequence
(``turbo_core.testing.context_parallel.attention_oracle``). One forked group per world size runs every
case; every rank rebuilds the global inputs from a seed and checks its own rows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist
from ranks_harness import run_ranks

from turbo_core.ops import (
    flash_attn_fp8_usp_func,
    flash_attn_func,
    flash_attn_usp_func,
    flash_attn_varlen_func,
    flash_attn_varlen_usp_func,
    usp_positions,
    usp_varlen_positions,
)
from turbo_core.testing.context_parallel import FP8_SNR_DB, attention_oracle
from turbo_core.testing.numerics import assert_close_normwise, snr_db


@dataclass(frozen=True)
class Case:
    mode: str  # which groups: "ulysses", "ring" or "both"
    layout: str = "contiguous"
    causal: bool = True
    varlen: bool = False
    fp8: bool = False
    window: tuple[int, int] = (-1, -1)
    heads: tuple[int, int] = (4, 2)
    seqlen: int = 16
    dtype: torch.dtype = torch.float32
    sbhd: bool = False  # q, k, v as transposed views of [s, b, h, d] buffers


def _groups(world: int, rank: int) -> dict:
    """``mode -> (ulysses_group, ring_group)``; at world 4, ``"both"`` is Ulysses over rank pairs
    ``{0, 1}``, ``{2, 3}`` and rings ``{0, 2}``, ``{1, 3}``."""
    world_group = dist.group.WORLD
    groups = {"ulysses": (world_group, None), "ring": (None, world_group)}
    if world == 4:
        ulysses = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        rings = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        groups["both"] = (ulysses[rank // 2], rings[rank % 2])
    return groups


def _size_rank(group) -> tuple[int, int]:
    return (1, 0) if group is None else (dist.get_world_size(group), dist.get_rank(group))


def _global_inputs(case: Case, seed: int):
    """float64 inputs rounded to the case's dtype, the varlen offsets (or None) and the total rows."""
    g = torch.Generator().manual_seed(seed)
    h_q, h_kv = case.heads
    if case.varlen:
        lens = [case.seqlen, case.seqlen // 2, 3 * case.seqlen // 2]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        total = cu[-1] + 8  # padding rows: they see nothing and get out 0
        shape_q, shape_kv = (total, h_q, 16), (total, h_kv, 16)
    else:
        cu, total = None, case.seqlen
        shape_q, shape_kv = (2, total, h_q, 16), (2, total, h_kv, 16)
    xs = [torch.randn(s, generator=g, dtype=torch.float64) for s in (shape_q, shape_kv, shape_kv, shape_q)]
    return [x.to(case.dtype).to(torch.float64) for x in xs], cu, total


def _compare(what: str, got: torch.Tensor, want: torch.Tensor, case: Case) -> None:
    if case.fp8:
        db = snr_db(want, got)
        assert db >= FP8_SNR_DB, f"{what}: SNR {db:.1f} dB < {FP8_SNR_DB} dB"
    else:
        assert_close_normwise(got, want, dtype=case.dtype, what=what)


def _run_case(case: Case, groups: dict, seed: int, dev: torch.device | str = "cpu") -> None:
    ulysses_group, ring_group = groups[case.mode]
    (u, u_rank), (r, r_rank) = _size_rank(ulysses_group), _size_rank(ring_group)
    (q, k, v, dout), cu, total = _global_inputs(case, seed)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want_out, want_lse = attention_oracle(*leaves, causal=case.causal, window=case.window, cu_q=cu, cu_k=cu)
    want_out.backward(dout)

    where = dict(ulysses_rank=u_rank, ulysses_size=u, ring_rank=r_rank, ring_size=r, ring_layout=case.layout)
    pos = usp_varlen_positions(cu, total, **where) if case.varlen else usp_positions(total, **where)
    seq_dim = 0 if case.varlen else 1

    def local(x: torch.Tensor) -> torch.Tensor:
        x = x.index_select(seq_dim, pos).to(dev, case.dtype)
        if case.sbhd:
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        return x.requires_grad_()

    lq, lk, lv = (local(t) for t in (q, k, v))
    common = dict(causal=case.causal, window_size=case.window, return_lse=True, ulysses_group=ulysses_group,
                  ring_group=ring_group, ring_layout=case.layout)
    if case.varlen:
        cu_t = torch.tensor(cu, dtype=torch.int32, device=dev)
        longest = max(b - a for a, b in zip(cu, cu[1:], strict=False))
        out, lse = flash_attn_varlen_usp_func(lq, lk, lv, cu_t, cu_t, longest, longest, **common)
    elif case.fp8:
        out, lse = flash_attn_fp8_usp_func(lq, lk, lv, **common)
    else:
        out, lse = flash_attn_usp_func(lq, lk, lv, **common)
    out.backward(dout.index_select(seq_dim, pos).to(dev, case.dtype))

    assert out.dtype == case.dtype and lse.dtype == torch.float32
    if case.sbhd:
        assert out.transpose(0, 1).is_contiguous(), f"{case}: out does not keep q's sbhd memory order"
    got = {name: t.detach().cpu() for name, t in (("out", out), ("dq", lq.grad), ("dk", lk.grad), ("dv", lv.grad))}
    lse = lse.cpu()
    want = {"out": want_out, "dq": leaves[0].grad, "dk": leaves[1].grad, "dv": leaves[2].grad}
    for name, t in got.items():
        _compare(f"{name} of {case}", t, want[name].detach().index_select(seq_dim, pos), case)
    want_lse = want_lse.detach().index_select(want_lse.dim() - 1, pos)
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite), f"lse of {case}: -inf rows differ"
    err = (lse.double()[finite] - want_lse[finite]).abs().max().item()
    assert err <= (0.25 if case.fp8 else 1e-3), f"lse of {case}: max |error| {err:.3g}"


def _check_bad_input(groups: dict) -> None:
    """Errors that need a ring of two ranks, raised on every rank before any communication."""
    _, ring = groups["ring"]
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="^window_size: a sliding window is not supported"):
        flash_attn_usp_func(q, q, q, causal=True, window_size=(4, 0), ring_group=ring)
    with pytest.raises(ValueError, match="^k: a causal ring needs as many keys as queries"):
        flash_attn_usp_func(q, q[:, :4], q[:, :4], causal=True, ring_group=ring)
    t = torch.randn(12, 2, 16)
    cu = torch.tensor([0, 6, 12], dtype=torch.int32)
    world = dist.get_world_size()
    with pytest.raises(ValueError, match=f"^cu_seqlens_q: every sequence length must be divisible by {2 * world}"):
        flash_attn_varlen_usp_func(t, t, t, cu, cu, 6, 6, causal=True, ring_group=ring, ring_layout="zigzag")
    ulysses, _ = groups["ulysses"]
    with pytest.raises(ValueError, match=f"^k: 1 heads do not split over the {world} ranks of ulysses_group"):
        qh = torch.randn(1, 8, world, 16)
        flash_attn_usp_func(qh, qh[:, :, :1], qh[:, :, :1], ulysses_group=ulysses)


def _check_module(groups: dict, seed: int) -> None:
    """``Attention(ulysses_group=...)`` runs the usp function (same bits as calling it)."""
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.modules import Attention

    ulysses, ring = groups["ring" if dist.get_world_size() == 2 else "both"]
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 8, 2, 16, generator=g) for _ in range(3))
    module = Attention(causal=True, ulysses_group=ulysses, ring_group=ring, ring_layout="zigzag")
    want = flash_attn_usp_func(q, k, v, causal=True, ulysses_group=ulysses, ring_group=ring, ring_layout="zigzag")
    assert torch.equal(module(q, k, v), want)
    with pytest.raises(ValueError, match="^sink: not supported with ulysses_group/ring_group"):
        module(q, k, v, sink=torch.zeros(2))
    config = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=64)
    module = Attention(fp8_config=config, ulysses_group=ulysses, ring_group=ring)
    want = flash_attn_fp8_usp_func(q, k, v, fp8_config=config, ulysses_group=ulysses, ring_group=ring)
    assert torch.equal(module(q, k, v), want)
    with pytest.raises(ValueError, match="^dropout_p: context-parallel attention"):
        Attention(dropout_p=0.1, ring_group=ring)


CASES_2 = [
    Case("ulysses", causal=False),
    Case("ulysses", window=(5, 0), sbhd=True),
    Case("ulysses", varlen=True),
    Case("ulysses", fp8=True, heads=(2, 2), seqlen=128),
    Case("ring", causal=False),
    Case("ring"),
    Case("ring", layout="zigzag", sbhd=True),
    Case("ring", layout="zigzag", dtype=torch.bfloat16),
    Case("ring", varlen=True),
    Case("ring", layout="zigzag", varlen=True),
    Case("ring", layout="zigzag", varlen=True, causal=False),
    Case("ring", layout="zigzag", fp8=True, heads=(2, 2), seqlen=128),
]

CASES_4 = [
    Case("ulysses", heads=(4, 4)),
    Case("ulysses", varlen=True, heads=(4, 4)),
    Case("ring", layout="zigzag"),
    Case("ring", varlen=True),
    Case("both", layout="zigzag"),
    Case("both", causal=False),
    Case("both", layout="zigzag", varlen=True),
    Case("both", fp8=True, heads=(2, 2), seqlen=128),
]


def _check_world(rank: int, world: int, dev: torch.device) -> None:
    from turbo_core import use_backend

    groups = _groups(world, rank)
    with use_backend("TORCH"):
        for i, case in enumerate(CASES_2 if world == 2 else CASES_4):
            _run_case(case, groups, seed=100 * world + i)
        _check_bad_input(groups)
        _check_module(groups, seed=7)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
def test_usp_attention_over_gloo(world, tmp_path):
    run_ranks(_check_world, world, tmp_path)


# -- one process ---------------------------------------------------------------------------------

def test_positions_partition_the_sequence():
    """Every rank's positions together are the whole sequence, once each; the zigzag layout gives
    ring rank ``r`` chunks ``r`` and ``2R - 1 - r``; Ulysses ranks take consecutive slices."""
    assert usp_positions(8, ring_rank=0, ring_size=2, ring_layout="zigzag").tolist() == [0, 1, 6, 7]
    assert usp_positions(8, ring_rank=1, ring_size=2, ring_layout="zigzag").tolist() == [2, 3, 4, 5]
    assert usp_positions(8, ulysses_rank=1, ulysses_size=2, ring_rank=0, ring_size=2,
                         ring_layout="zigzag").tolist() == [6, 7]
    assert usp_varlen_positions([0, 4, 12], 14, ring_rank=1, ring_size=2).tolist() == [2, 3, 8, 9, 10, 11, 13]
    for layout in ("contiguous", "zigzag"):
        allpos = torch.cat([usp_positions(24, ulysses_rank=u, ulysses_size=3, ring_rank=r, ring_size=2,
                                          ring_layout=layout) for r in range(2) for u in range(3)])
        assert sorted(allpos.tolist()) == list(range(24))
        allpos = torch.cat([usp_varlen_positions([0, 8, 24], 28, ulysses_rank=u, ulysses_size=2, ring_rank=r,
                                                 ring_size=2, ring_layout=layout) for r in range(2) for u in range(2)])
        assert sorted(allpos.tolist()) == list(range(28))
    with pytest.raises(ValueError, match="^seqlen: 12 is not divisible by 8"):
        usp_positions(12, ring_size=4, ring_layout="zigzag")
    with pytest.raises(ValueError, match="^ring_layout: expected one of"):
        usp_positions(12, ring_layout="striped")


def test_without_groups_it_is_flash_attention():
    """No group: the same primitive calls as ``flash_attn_func`` / ``flash_attn_varlen_func``."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 12, 2, 16, generator=g).requires_grad_() for _ in range(3))
    out = flash_attn_usp_func(q, k, v, causal=True, window_size=(3, 0))
    out.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = flash_attn_func(q, k, v, causal=True, window_size=(3, 0))
    want.sum().backward()
    assert torch.equal(out, want)
    assert all(torch.equal(a, t.grad) for a, t in zip(grads, (q, k, v), strict=True))
    t = torch.randn(10, 2, 16, generator=g)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    assert torch.equal(flash_attn_varlen_usp_func(t, t, t, cu, cu, 6, 6, causal=True),
                       flash_attn_varlen_func(t, t, t, cu, cu, 6, 6, causal=True))


def test_without_groups_it_compiles_in_one_graph():
    """``torch.compile(fullgraph=True)`` of the op (forward and backward) equals the eager call: the
    steps use the attention custom ops inside a compiled region."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 16, 4, 8, generator=g).requires_grad_()
    k, v = (torch.randn(2, 16, 2, 8, generator=g).requires_grad_() for _ in range(2))

    def f(q, k, v):
        return flash_attn_usp_func(q, k, v, causal=True)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v)
    want = f(q, k, v)
    assert torch.equal(got, want)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v)),
                    strict=True):
        assert torch.equal(a, b)


def test_bad_arguments():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="^dropout_p: context-parallel attention supports 0.0 only"):
        flash_attn_usp_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="^bias: "):
        flash_attn_usp_func(q, q, q, bias=torch.zeros(1))
    with pytest.raises(ValueError, match="^ring_layout: expected one of"):
        flash_attn_usp_func(q, q, q, ring_layout="striped")
    with pytest.raises(ValueError, match="^qkv_format: expected None or one of"):
        flash_attn_usp_func(q, q, q, qkv_format="thd")
    with pytest.raises(ValueError, match="^q: expected a 4-D tensor"):
        flash_attn_usp_func(q[0], q, q)
    with pytest.raises(ValueError, match="^ulysses_group: expected a torch.distributed ProcessGroup or None"):
        flash_attn_usp_func(q, q, q, ulysses_group="world")
    with pytest.raises(ValueError, match="^fp8_config: "):
        flash_attn_fp8_usp_func(q, q, q, fp8_config=type("C", (), {"block_size": 128})())
    t = torch.randn(8, 2, 16)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="^q: expected a 3-D tensor"):
        flash_attn_varlen_usp_func(q, t, t, cu, cu, 8, 8)
    with pytest.raises(ValueError, match="^max_seqlen_k: 4 is shorter than the longest sequence"):
        flash_attn_varlen_usp_func(t, t, t, cu, cu, 8, 4)
    with pytest.raises(ValueError, match="^cu_seqlens_k: expected the shape of cu_seqlens_q"):
        flash_attn_varlen_usp_func(t, t, t, cu, torch.tensor([0, 4, 8], dtype=torch.int32), 8, 8)
