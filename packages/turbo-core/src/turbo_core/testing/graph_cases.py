"""Every public op and module as a small case of tensors in, tensors out: the table the graph tests run
under ``torch.compile`` ("default", "reduce-overhead", "max-autotune"), ``make_graphed_callables``
and a hand-captured CUDA graph (:mod:`turbo_core.testing.graph_modes`), in turbo-core and in any backend
package that pins its own kernels.

A case builds its callable (a function of tensors only, or an ``nn.Module``) and its inputs from a
seed, so that a captured graph can be fed new data of the same shapes. Shapes are small: on the CPU a
few rows of fp32 (the reference backend; FP8 blocks of 8 or 32); on a GPU one model-like shape of bf16
(multiples of 128, FP8 blocks of 128, MX blocks of 32). Calls need no host sync: MoE permutations have
static capacities, the dispatch a fixed receive size, grouped ops take device group lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from turbo_core import ops
from turbo_core.low_precision import Float4QuantConfig, Float8QuantConfig, ScalingGranularity
from turbo_core.modules import Attention, CrossEntropyLoss, Float8Linear, GroupedLinear, Linear, MoELayer, RMSNorm

__all__ = ["GraphCase", "graph_cases"]

G = ScalingGranularity
E4M3 = torch.float8_e4m3fn
FP4 = getattr(torch, "float4_e2m1fn_x2", None)


@dataclass(frozen=True)
class GraphCase:
    """One op or module call.

    Attributes:
        name: ``"gemm"``, ``"gemm_fp8[BLOCKWISE]"``, ``"Linear"``, ...
        build: ``build(device) -> callable``: a function of the inputs, or an ``nn.Module`` whose
            parameters get gradients too.
        inputs: ``inputs(device, seed) -> tuple`` of tensors (same shapes, dtypes and integer
            contents for every seed; new float values per seed).
        grads: positions of the inputs that require a gradient.
        tol: relative and absolute tolerance of float outputs and gradients against the eager call
            (integer, boolean and FP8/FP4 outputs must match exactly).
        primitives: the dispatch primitives the call runs (a backend's test pins them).
        compile_fails: why ``torch.compile`` cannot trace the call yet (its compile tests are
            expected to fail, strictly), or ``None``.
    """

    name: str
    build: Callable[[torch.device], Callable]
    inputs: Callable[[torch.device, int], tuple]
    grads: tuple[int, ...] = ()
    tol: float = 1e-5
    primitives: tuple[str, ...] = field(default=())
    compile_fails: str | None = None


@dataclass(frozen=True)
class _Dims:
    """The shapes of one device: GEMM ``m x k -> n``, groups, attention, hidden sizes, FP8 blocks."""

    dtype: torch.dtype
    m: int
    k: int
    n: int
    lens: tuple[int, ...]
    block: int
    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    tol: float


_CPU = _Dims(torch.float32, 24, 64, 40, (7, 0, 17), 32, 2, 12, 4, 2, 16, 1e-5)
_GPU = _Dims(torch.bfloat16, 256, 512, 384, (96, 0, 128, 32), 128, 2, 256, 8, 2, 128, 2e-2)


def _dims(device: torch.device) -> _Dims:
    return _CPU if device.type == "cpu" else _GPU


def _rand(device: torch.device, seed: int):
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, device=device, generator=gen) * scale).to(dtype)

    return rand


def _fn(f: Callable) -> Callable[[torch.device], Callable]:
    return lambda device: f


def _gemm_cases(d: _Dims) -> list[GraphCase]:
    m, k, n, dt = d.m, d.k, d.n, d.dtype

    def ab(device, seed):
        r = _rand(device, seed)
        return r(m, k, dtype=dt), r(n, k, dtype=dt)

    cases = [GraphCase("gemm", _fn(lambda a, b: ops.gemm(a, b, trans_b=True)), ab, (0, 1), d.tol, ("gemm",))]
    for gran in (G.TENSORWISE, G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE):
        cfg = Float8QuantConfig(format="HYBRID", granularity=gran, block_size=d.block if gran == G.BLOCKWISE else None)
        cases.append(GraphCase(f"gemm_fp8[{gran.value}]",
                               _fn(lambda a, b, cfg=cfg: ops.gemm_fp8(a, b, trans_b=True, config=cfg)),
                               ab, (0, 1), d.tol, ("gemm_fp8", "quantize_fp8")))
    if FP4 is not None:
        cases.append(GraphCase("gemm_fp4", _fn(lambda a, b: ops.gemm_fp4(a, b, trans_b=True, config=Float4QuantConfig())),
                               ab, (0, 1), d.tol, ("gemm_fp4", "quantize_fp4")))
    return cases


def _grouped_cases(d: _Dims) -> list[GraphCase]:
    k, n, dt, lens = d.k, d.n, d.dtype, d.lens
    total = sum(lens) + 5  # an over-allocated tail of 5 rows

    def abl(device, seed):
        r = _rand(device, seed)
        return (r(total, k, dtype=dt), r(len(lens), n, k, dtype=dt),
                torch.tensor(lens, dtype=torch.int64, device=device))

    cases = [GraphCase("grouped_gemm", _fn(lambda a, b, gl: ops.grouped_gemm(a, b, gl, trans_b=True)), abl, (0, 1),
                       d.tol, ("grouped_gemm", "grouped_gemm_variable_k"))]
    for gran in (G.TENSORWISE, G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE):
        cfg = Float8QuantConfig(format="HYBRID", granularity=gran, block_size=d.block if gran == G.BLOCKWISE else None)
        cases.append(GraphCase(f"grouped_gemm_fp8[{gran.value}]",
                               _fn(lambda a, b, gl, cfg=cfg: ops.grouped_gemm_fp8(a, b, gl, trans_b=True, config=cfg)),
                               abl, (0, 1), d.tol, ("grouped_gemm_fp8", "grouped_gemm_fp8_variable_k")))
    if FP4 is not None:
        cases.append(GraphCase("grouped_gemm_fp4", _fn(lambda a, b, gl: ops.grouped_gemm_fp4(a, b, gl, trans_b=True)),
                               abl, (0, 1), d.tol, ("grouped_gemm_fp4",)))
    return cases


def _attention_cases(d: _Dims) -> list[GraphCase]:
    b, s, h, hk, hd, dt = d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, d.dtype

    def qkv(device, seed):
        r = _rand(device, seed)
        return r(b, s, h, hd, dtype=dt), r(b, s, hk, hd, dtype=dt), r(b, s, hk, hd, dtype=dt)

    def varlen(device, seed):
        r = _rand(device, seed)
        cu = torch.tensor([0, s // 4, s + s // 2, 2 * s], dtype=torch.int32, device=device)
        return r(2 * s, h, hd, dtype=dt), r(2 * s, hk, hd, dtype=dt), r(2 * s, hk, hd, dtype=dt), cu

    return [
        GraphCase("flash_attn_func", _fn(lambda q, k_, v: ops.flash_attn_func(q, k_, v, causal=True)), qkv, (0, 1, 2),
                  d.tol, ("attention_fwd", "attention_bwd")),
        GraphCase("flash_attn_varlen_func",
                  _fn(lambda q, k_, v, cu: ops.flash_attn_varlen_func(q, k_, v, cu, cu, s + s // 4, s + s // 4,
                                                                      causal=True)),
                  varlen, (0, 1, 2), d.tol, ("attention_fwd", "attention_bwd")),
        GraphCase("flash_attn_fp8_func",
                  _fn(lambda q, k_, v: ops.flash_attn_fp8_func(q, k_, v, causal=True)), qkv, (0, 1, 2),
                  max(d.tol, 2e-2), ("attention_fp8_fwd", "attention_fp8_bwd")),
        _sparse_mla_case(d),
    ]


def _sparse_mla_case(d: _Dims) -> GraphCase:
    """``sparse_mla_func`` with a sink: ``b * s`` tokens, each over ``s`` of ``2 s`` latent rows (a quarter
    of the slots ``-1``); DeepSeek's 576/512 head dims on a GPU, 20/16 on the CPU. The indices are the
    same for every seed."""
    t, heads, num_kv, topk = d.batch * d.seq, d.heads, 2 * d.seq, d.seq
    d_qk, rank = (20, 16) if d.dtype == torch.float32 else (576, 512)

    def inputs(device, seed):
        r = _rand(device, seed)
        g = torch.Generator().manual_seed(0)
        idx = torch.randint(0, num_kv, (t, topk), generator=g, dtype=torch.int32)
        idx = idx.masked_fill(torch.rand(t, topk, generator=g) < 0.25, -1).to(device)
        return r(t, heads, d_qk, dtype=d.dtype), r(num_kv, 1, d_qk, dtype=d.dtype), idx, r(heads)

    return GraphCase("sparse_mla_func",
                     _fn(lambda q, kv, idx, sink: ops.sparse_mla_func(q, kv, idx, sink, kv_lora_rank=rank)),
                     inputs, (0, 1, 3), d.tol, ("sparse_mla_fwd", "sparse_mla_bwd"))


def _norm_activation_cases(d: _Dims) -> list[GraphCase]:
    m, k, dt = d.m, d.k, d.dtype

    def xg(device, seed):
        r = _rand(device, seed)
        return r(m, k, dtype=dt), r(k, dtype=dt)

    def xrg(device, seed):
        r = _rand(device, seed)
        return r(m, k, dtype=dt), r(m, k, dtype=dt), r(k, dtype=dt)

    def xp(device, seed):
        r = _rand(device, seed)
        return r(m, 2 * k, dtype=dt), torch.rand(m, device=device, generator=torch.Generator(device).manual_seed(seed))

    def norm_fp8(device, seed):
        r = _rand(device, seed)
        return r(m, k, dtype=dt), r(k, dtype=dt), r(d.n, k, dtype=dt)

    def glu_fp8(device, seed):
        return xp(device, seed) + (_rand(device, seed + 1)(d.n, k, dtype=dt),)

    rowwise = Float8QuantConfig(granularity=G.ROWWISE)
    return [
        GraphCase("rmsnorm", _fn(lambda x, g: ops.rmsnorm(x, g)), xg, (0, 1), d.tol, ("rmsnorm_fwd", "rmsnorm_bwd")),
        GraphCase("rmsnorm_residual", _fn(lambda x, r_, g: ops.rmsnorm_residual(x, r_, g)), xrg, (0, 1, 2), d.tol,
                  ("rmsnorm_fwd", "rmsnorm_bwd")),
        GraphCase("rmsnorm_fp8", _fn(lambda x, g, w: ops.gemm_fp8(ops.rmsnorm_fp8(x, g, config=rowwise, with_trans=True),
                                                                  w, trans_b=True, config=rowwise)),
                  norm_fp8, (0, 1, 2), d.tol, ("rmsnorm_fwd_fp8", "rmsnorm_bwd", "gemm_fp8", "quantize_fp8"),
                  compile_fails="dynamo cannot read the inner tensors of a QuantizedTensor made inside the compiled "
                                "region: gemm_fp8 reads the norm's output through qdata, a FakeTensor that "
                                "SourcelessBuilder cannot wrap"),
        GraphCase("swiglu_with_probs_fp8",
                  _fn(lambda x, p, w: ops.gemm_fp8(ops.swiglu_with_probs_fp8(x, p, config=rowwise, with_trans=True),
                                                   w, trans_b=True, config=rowwise)),
                  glu_fp8, (0, 1, 2), d.tol, ("swiglu_fwd_fp8", "swiglu_bwd", "gemm_fp8", "quantize_fp8"),
                  compile_fails="dynamo cannot read the inner tensors of a QuantizedTensor made inside the compiled "
                                "region: gemm_fp8 reads the activation's output through qdata, a FakeTensor that "
                                "SourcelessBuilder cannot wrap"),
        GraphCase("swiglu_with_probs", _fn(lambda x, p: ops.swiglu_with_probs(x, p)), xp, (0, 1), d.tol,
                  ("swiglu_fwd", "swiglu_bwd")),
        GraphCase("geglu_with_probs", _fn(lambda x, p: ops.geglu_with_probs(x, p)), xp, (0, 1), d.tol,
                  ("geglu_fwd", "geglu_bwd")),
    ]


def _logits_targets(d: _Dims):
    """``inputs(device, seed)`` of the loss cases: logits ``[m, V]`` (V odd: a ragged last chunk) and
    int64 targets, the same for every seed (every fifth row ignored)."""
    classes = 8 * d.n + 3

    def inputs(device, seed):
        target = torch.randint(0, classes, (d.m,), generator=torch.Generator().manual_seed(7))
        target[::5] = -100
        return _rand(device, seed)(d.m, classes, dtype=d.dtype, scale=2.0), target.to(device)

    return inputs


def _loss_cases(d: _Dims) -> list[GraphCase]:
    prims = ("cross_entropy_fwd", "cross_entropy_bwd")
    xt = _logits_targets(d)
    return [
        GraphCase("cross_entropy", _fn(lambda x, t: ops.cross_entropy(x, t, label_smoothing=0.1)), xt, (0,), d.tol,
                  prims),
        GraphCase("cross_entropy[none]", _fn(lambda x, t: ops.cross_entropy(x, t, reduction="none")), xt, (0,),
                  d.tol, prims),
    ]


def _quantization_cases(d: _Dims) -> list[GraphCase]:
    m, k, dt, lens, bs = d.m, d.k, d.dtype, d.lens, d.block
    total = sum(lens)

    def x(device, seed):
        return (_rand(device, seed)(m, k, dtype=dt),)

    def xl(device, seed):
        return _rand(device, seed)(total, k, dtype=dt), torch.tensor(lens, dtype=torch.int64, device=device)

    def mx_roundtrip(a):
        q, s = ops.quantize_fp8(a, E4M3, G.MX_BLOCKWISE, axis=-1)
        return q, s, ops.dequantize_fp8(q, torch.float32, G.MX_BLOCKWISE, axis=-1, scale_inv=s)

    def grouped_roundtrip(a, gl):
        q, s, lp, op = ops.grouped_quantize_fp8(a, E4M3, G.MX_BLOCKWISE, gl, axis=1)
        offs = ops.grouped_gemm_compute_offs(gl)
        return q, s, lp, op, ops.grouped_dequantize_fp8(q, torch.float32, G.MX_BLOCKWISE, offs, op, axis=1,
                                                         scale_inv=s, total_M=a.shape[0])

    cases = [
        GraphCase("quantize_fp8[TENSORWISE]", _fn(lambda a: ops.quantize_fp8(a, E4M3, G.TENSORWISE)), x,
                  primitives=("quantize_fp8",)),
        GraphCase("quantize_fp8[BLOCKWISE]", _fn(lambda a: ops.quantize_fp8(a, E4M3, G.BLOCKWISE, axis=-1,
                                                                                   block_size=bs)), x,
                  primitives=("quantize_fp8",)),
        GraphCase("quantize_fp8+dequantize_fp8[MX_BLOCKWISE]", _fn(mx_roundtrip), x,
                  primitives=("quantize_fp8", "dequantize_fp8")),
        GraphCase("quantize_fp8_with_trans", _fn(lambda a: ops.quantize_fp8_with_trans(a, E4M3, G.BLOCKWISE,
                                                                                     block_size=bs)), x,
                  primitives=("quantize_fp8_with_trans",)),
        GraphCase("grouped_quantize_fp8+grouped_dequantize_fp8", _fn(grouped_roundtrip), xl,
                  primitives=("grouped_quantize_fp8", "grouped_dequantize_fp8")),
        GraphCase("grouped_quantize_fp8_with_trans",
                  _fn(lambda a, gl: ops.grouped_quantize_fp8_with_trans(a, E4M3, G.BLOCKWISE, gl, block_size=bs)), xl,
                  primitives=("grouped_quantize_fp8_with_trans",)),
    ]
    if FP4 is not None:
        def fp4_roundtrip(a):
            q, s = ops.quantize_fp4(a, FP4, G.MX_BLOCKWISE, axis=-1)
            return q, s, ops.dequantize_fp4(q, torch.float32, G.MX_BLOCKWISE, axis=-1, scale_inv=s)

        def grouped_fp4_roundtrip(a, gl):
            q, s, lp, op = ops.grouped_quantize_fp4(a, FP4, G.MX_BLOCKWISE, gl, axis=0)
            offs = ops.grouped_gemm_compute_offs(gl)
            return q, s, lp, op, ops.grouped_dequantize_fp4(q, torch.float32, G.MX_BLOCKWISE, axis=0, scale_inv=s,
                                                             group_offs=offs, group_offs_padded=op,
                                                             total_M=a.shape[0])

        cases += [
            GraphCase("quantize_fp4+dequantize_fp4", _fn(fp4_roundtrip), x, primitives=("quantize_fp4", "dequantize_fp4")),
            GraphCase("quantize_fp4_with_trans", _fn(lambda a: ops.quantize_fp4_with_trans(a, FP4, G.MX_BLOCKWISE)), x,
                      primitives=("quantize_fp4_with_trans",)),
            GraphCase("grouped_quantize_fp4+grouped_dequantize_fp4", _fn(grouped_fp4_roundtrip), xl,
                      primitives=("grouped_quantize_fp4", "grouped_dequantize_fp4")),
            GraphCase("grouped_quantize_fp4_with_trans",
                      _fn(lambda a, gl: ops.grouped_quantize_fp4_with_trans(a, FP4, G.MX_BLOCKWISE, gl)), xl,
                      primitives=("grouped_quantize_fp4_with_trans",)),
        ]
    return cases


def _moe_cases(d: _Dims) -> list[GraphCase]:
    t, h, e, topk = d.m, d.k, 4, 2
    dt = d.dtype

    def routed(device, seed):
        """Tokens, expert ids ``[T, 2]`` (a -1 and a repeat among them), top-k probs, logits."""
        r = _rand(device, seed)
        idx = torch.tensor([[i % e, (i * 3 + 1) % e] for i in range(t)], device=device)
        idx[1, 1] = -1
        return r(t, h, dtype=dt), idx, torch.rand(t, topk, device=device,
                                                  generator=torch.Generator(device).manual_seed(seed))

    def mega(device, seed):
        """``fused_mega_moe``'s inputs: tokens, the routed ids, weights, ``w1 [E, 2I, H]``, ``w2 [E, H, I]``."""
        x, idx, p = routed(device, seed)
        r, inter = _rand(device, seed + 1), d.n // 2
        return x, idx, p, r(e, 2 * inter, h, dtype=dt, scale=h ** -0.5), r(e, h, inter, dtype=dt, scale=inter ** -0.5)

    def logits(device, seed):
        return (_rand(device, seed)(t, 8, scale=4.0),)

    def routing(x):
        return ops.fused_group_topk_routing_with_aux_score(x, 3, 4, 2, "sigmoid", 2.0)

    def multihot(x, idx, p):
        rmap, dense = ops.indices_to_multihot(idx, p, e)
        counts = rmap.sum(0)
        return rmap, dense, ops.tokens_per_expert_to_mask(counts, t * topk)

    cap = t * topk + e * 8  # every routed row fits, each expert padded to a multiple of 8

    def permute(x, idx, p):
        res = ops.moe_permute(x, idx, num_local_experts=e, pad_multiple=8, num_permuted_tokens=cap, probs=p)
        y = res.permuted_tokens * res.permuted_probs.unsqueeze(1).to(x.dtype)
        out, _ = ops.moe_unpermute(y, res.row_id_map, res.num_dispatched_tokens, restore_shape=(t, h),
                                   num_local_experts=e)
        return out, res.tokens_per_expert

    def token_perm(x, idx, p):
        rmap, dense = ops.indices_to_multihot(idx, p, e)
        permuted, _, mapping, tpe = ops.token_permute(x, t * topk, routing_map=rmap)
        return ops.token_unpermute(permuted * 2, mapping, merging_probs=dense, restore_shape=(t, h)), tpe

    def dispatch(x, idx, p):
        recv_x, _, recv_probs, tpe, handle = ops.moe_dispatch(x, idx, p, e, None, num_worst_tokens=t)
        return ops.moe_combine(recv_x * recv_probs.sum(1, keepdim=True).to(x.dtype), None, handle), tpe

    return [
        GraphCase("fused_group_topk_routing_with_aux_score", _fn(routing), logits, (0,), d.tol,
                  ("moe_routing_fwd", "moe_routing_bwd")),
        GraphCase("indices_to_multihot+tokens_per_expert_to_mask", _fn(multihot), routed, (2,), d.tol,
                  ("indices_to_multihot", "indices_to_multihot_bwd", "tokens_per_expert_to_mask")),
        GraphCase("moe_permute+moe_unpermute", _fn(permute), routed, (0, 2), d.tol,
                  ("moe_permute_preprocess", "moe_permute", "moe_unpermute", "moe_unpermute_bwd")),
        GraphCase("token_permute+token_unpermute", _fn(token_perm), routed, (0, 2), d.tol,
                  ("moe_permute_preprocess", "moe_permute", "moe_unpermute", "moe_unpermute_bwd")),
        GraphCase("moe_dispatch+moe_combine", _fn(dispatch), routed, (0, 2), d.tol, ("moe_dispatch", "moe_combine")),
        GraphCase("fused_mega_moe", _fn(lambda *a: ops.fused_mega_moe(None, *a)), mega, (0, 2, 3, 4), d.tol,
                  ("moe_permute_preprocess", "moe_permute", "tokens_per_expert_to_mask", "grouped_gemm",
                   "grouped_gemm_variable_k", "swiglu_fwd", "swiglu_bwd", "moe_unpermute")),
    ]


def _module_cases(d: _Dims) -> list[GraphCase]:
    m, k, n, dt, lens = d.m, d.k, d.n, d.dtype, d.lens
    total = sum(lens) + 5

    def x(device, seed):
        return (_rand(device, seed)(m, k, dtype=dt),)

    def xl(device, seed):
        return _rand(device, seed)(total, k, dtype=dt), torch.tensor(lens, dtype=torch.int64, device=device)

    def qkv(device, seed):
        r = _rand(device, seed)
        b, s, h, hd = d.batch, d.seq, d.heads, d.head_dim
        return r(b, s, h, hd, dtype=dt), r(b, s, d.kv_heads, hd, dtype=dt), r(b, s, d.kv_heads, hd, dtype=dt)

    def seeded(make):
        def build(device):
            torch.manual_seed(0)
            return make(device)
        return build

    rowwise = Float8QuantConfig(granularity=G.ROWWISE)
    block = Float8QuantConfig(granularity=G.BLOCKWISE, block_size=d.block)
    gemm = ("gemm",)
    fp8 = ("gemm_fp8", "quantize_fp8")
    grouped = ("grouped_gemm", "grouped_gemm_variable_k")
    return [
        GraphCase("Linear", seeded(lambda dev: Linear(k, n, device=dev, dtype=dt)), x, (0,), d.tol, gemm),
        GraphCase("Float8Linear[ROWWISE]", seeded(lambda dev: Float8Linear(k, n, config=rowwise, device=dev, dtype=dt)),
                  x, (0,), d.tol, fp8),
        GraphCase("Float8Linear[BLOCKWISE]", seeded(lambda dev: Float8Linear(k, n, config=block, device=dev, dtype=dt)),
                  x, (0,), d.tol, fp8),
        GraphCase("GroupedLinear", seeded(lambda dev: GroupedLinear(len(lens), k, n, device=dev, dtype=dt)), xl, (0,),
                  d.tol, grouped),
        GraphCase("GroupedLinear[BLOCKWISE]", seeded(lambda dev: GroupedLinear(len(lens), k, n, device=dev, dtype=dt,
                                                                             config=block)),
                  xl, (0,), d.tol, ("grouped_gemm_fp8", "grouped_gemm_fp8_variable_k")),
        GraphCase("RMSNorm", seeded(lambda dev: RMSNorm(k, device=dev, dtype=dt)), x, (0,), d.tol,
                  ("rmsnorm_fwd", "rmsnorm_bwd")),
        GraphCase("CrossEntropyLoss", lambda device: CrossEntropyLoss(), _logits_targets(d), (0,), d.tol,
                  ("cross_entropy_fwd", "cross_entropy_bwd")),
        GraphCase("Attention", seeded(lambda dev: Attention(causal=True)), qkv, (0, 1, 2), d.tol,
                  ("attention_fwd", "attention_bwd")),
        GraphCase("MoELayer", seeded(lambda dev: MoELayer(k, k // 2, 4, 2, capacity_factor=2.0, pad_to_capacity=True,
                                                          device=dev, dtype=dt)),
                  x, (0,), max(d.tol, 1e-4), (*grouped, "moe_routing_fwd", "moe_routing_bwd", "swiglu_fwd",
                                              "swiglu_bwd", "moe_permute", "moe_unpermute")),
    ]


def graph_cases(device: torch.device | str) -> dict[str, GraphCase]:
    """Every case for ``device`` by name: the GEMMs (each FP8 granularity the reference serves, FP4),
    grouped GEMMs, attention (dense, varlen, FP8, sparse MLA), RMSNorm (plain, residual, FP8 output), SwiGLU and
    GeGLU, cross entropy, quantization round trips, MoE routing, permutation, dispatch and the fused layer, and the
    modules Linear, Float8Linear, GroupedLinear, RMSNorm, CrossEntropyLoss, Attention and MoELayer."""
    device = torch.device(device)
    d = _dims(device)
    found = [*_gemm_cases(d), *_grouped_cases(d), *_attention_cases(d), *_norm_activation_cases(d),
             *_loss_cases(d), *_quantization_cases(d), *_moe_cases(d), *_module_cases(d)]
    return {c.name: c for c in found}
