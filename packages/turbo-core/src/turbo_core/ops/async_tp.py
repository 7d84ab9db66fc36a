"""Async tensor parallelism: a GEMM overlapped with the collective before or after it
(Primus-Turbo's ``ops/async_tp.py``). Forward only: the results do not track gradients.

``fused_all_gather_matmul``: ``A = all_gather(A_shard, gather_dim)`` and ``C_i = A @ op(B_i)``
for every ``B_i`` (the sequence-parallel input of a column-parallel linear layer). The shard is
split into ``num_splits`` chunks along ``gather_dim``. Every chunk's all-gather is queued at once
(``async_op=True``; NCCL runs collectives on its own stream). The GEMMs of chunk ``s`` run, on the
caller's stream, as soon as its gather completes, while the later chunks are still in flight.

``fused_all_gather_scaled_matmul``: the same on pre-quantized FP8 operands, ``torch._scaled_mm``'s
convention: ``C_i = (A * A_scale) @ op(B_i * B_scale_i) (+ bias_i)``, with TENSORWISE scales (one
value each) or ROWWISE ones (``A_scale`` per row of A, gathered with its rows; ``B_scale_i`` per
output column), through the ``gemm_fp8`` primitive.

``fused_matmul_reduce_scatter``: ``C = A @ op(B)``, then a reduce-scatter (sum or average over the
ranks) along ``scatter_dim`` (the output of a row-parallel linear layer). Each destination rank's
slice is split into ``num_splits`` chunks. The GEMM of chunk ``s`` (the rows of chunk ``s`` of every
destination) runs while chunk ``s - 1``'s reduce-scatter is in flight.

The GEMMs are the ``gemm`` op's primitive, so they run on whichever backend the dispatcher picks for
the device. The result is the unfused composition (all-gather, matmul, reduce-scatter) up to the
order of the reduction over ranks. Each GEMM sums its products in fp32 and rounds once into the
output dtype, and the reduce-scatter sums those rounded values in the collective's arithmetic.

``comm_method="pipeline"`` is the one method here. Primus's fused Triton GEMM + reduce-scatter
kernel (``"tile"``), its ring exchange and its AMD SDMA copies (``enable_sdma``) are not
implemented; asking for them raises a ValueError. The stream lists (``gemm_streams``,
``comm_streams``, ``copy_streams``) are accepted for signature compatibility and not used: the GEMMs
run on the current stream and the collectives on the process group's.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from turbo_core.dispatch.launch import gemm_fp8 as launch_fp8
from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_int
from turbo_core.low_precision import ScalingGranularity, is_fp8_dtype
from turbo_core.ops.gemm import gemm

__all__ = ["fused_all_gather_matmul", "fused_all_gather_scaled_matmul", "fused_matmul_reduce_scatter"]

_LAYOUTS = ("NN", "NT")


def _group(group_name):
    """``(group, world size)`` for ``group_name``: a ProcessGroup, or the name it is registered under."""
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("group_name: torch.distributed is not initialized (call init_process_group first)")
    if isinstance(group_name, dist.ProcessGroup):
        group = group_name
    elif isinstance(group_name, str):
        try:
            group = dist.distributed_c10d._resolve_process_group(group_name)
        except Exception as exc:  # the registry raises a RuntimeError/ValueError for an unknown name
            raise ValueError(f"group_name: no process group is registered as {group_name!r}") from exc
    else:
        raise ValueError(f"group_name: expected a ProcessGroup or its registered name, got {type(group_name).__name__}")
    return group, dist.get_world_size(group)


def _check_common(comm_method, num_splits, enable_sdma, streams: dict) -> None:
    if comm_method != "pipeline":
        raise ValueError(f"comm_method: only 'pipeline' is implemented here, got {comm_method!r}")
    require_int("num_splits", num_splits, minimum=1)
    if enable_sdma:
        raise ValueError("enable_sdma: SDMA copies (AMD copy engines) are not implemented; pass False")
    for name, value in streams.items():
        if value is not None and not isinstance(value, (list, tuple)):
            raise ValueError(f"{name}: expected None or a list of streams, got {type(value).__name__}")


def _check_a(name: str, a, what: str) -> None:
    if not isinstance(a, torch.Tensor) or a.dtype not in FLOAT_DTYPES or a.dim() < 2:
        got = f"{a.dtype} tensor of {a.dim()} dims" if isinstance(a, torch.Tensor) else type(a).__name__
        raise ValueError(f"{name}: expected a fp16/bf16/fp32 tensor [..., K] with {what}, got {got}")


def _check_b(name: str, b, layout: str, a: torch.Tensor) -> int:
    """N of ``op(b)`` after checking ``b`` against ``a`` (same dtype; any FP8 one for an FP8 ``a``)
    and the layout."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout of {name}: expected 'NN' (b is [K, N]) or 'NT' (b is [N, K]), got {layout!r}")
    if not isinstance(b, torch.Tensor) or b.dim() != 2:
        got = f"a tensor of {b.dim()} dims" if isinstance(b, torch.Tensor) else type(b).__name__
        raise ValueError(f"{name}: expected a 2-D weight, got {got}")
    if is_fp8_dtype(a.dtype) and (not is_fp8_dtype(b.dtype) or b.device != a.device):
        raise ValueError(f"{name}: expected an FP8 weight on {a.device}, got {b.dtype} on {b.device}")
    if not is_fp8_dtype(a.dtype) and (b.dtype != a.dtype or b.device != a.device):
        raise ValueError(f"{name}: expected {a.dtype} on {a.device} like the input, got {b.dtype} on {b.device}")
    k = b.shape[0] if layout == "NN" else b.shape[1]
    if k != a.shape[-1]:
        raise ValueError(f"{name}: K = {k} in layout {layout} does not match the input's last dim {a.shape[-1]}")
    return b.shape[1] if layout == "NN" else b.shape[0]


def _row_dim(name: str, dim, a: torch.Tensor) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool) or not -a.dim() <= dim < a.dim():
        raise ValueError(f"{name}: expected a dim of the {a.dim()}-D input, got {dim!r}")
    dim %= a.dim()
    if dim == a.dim() - 1:
        raise ValueError(f"{name}: the last dim is the contraction dim K; pick a leading dim")
    return dim


def _check_out(name: str, t, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype or t.device != device:
        got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected {shape} {dtype} on {device}, got {got}")


def _weight_count(Bs, what: str) -> int:
    if not isinstance(Bs, (list, tuple)) or not Bs:
        raise ValueError(f"Bs: expected a non-empty list of {what}, got {type(Bs).__name__}")
    return len(Bs)


def _per_weight(name: str, seq, count: int, *, optional: bool = True, noun: str = "entry") -> list:
    """``seq`` as a list of one ``noun`` per weight (``[None] * count`` for None when ``optional``)."""
    if seq is None and optional:
        return [None] * count
    if not isinstance(seq, (list, tuple)) or len(seq) != count:
        raise ValueError(f"{name}: expected {'None or ' if optional else ''}one {noun} per weight ({count}), got {seq!r}")
    return list(seq)


def _result_dtypes(out_dtypes, count: int, default: torch.dtype) -> list[torch.dtype]:
    dtypes = [default if d is None else d for d in _per_weight("out_dtypes", out_dtypes, count, noun="dtype")]
    for i, d in enumerate(dtypes):
        if d not in FLOAT_DTYPES:
            raise ValueError(f"out_dtypes[{i}]: expected fp16/bf16/fp32 or None, got {d}")
    return dtypes


def _check_outs(name: str, given, shapes: list, dtypes: list, device: torch.device) -> list:
    """The caller's per-weight result buffers (None entries allowed), checked."""
    given = _per_weight(name, given, len(shapes), noun="tensor")
    for i, (t, shape, dtype) in enumerate(zip(given, shapes, dtypes, strict=True)):
        _check_out(f"{name}[{i}]", t, shape, dtype, device)
    return given


def _gathered_shape(a_shard: torch.Tensor, dim: int, world: int) -> tuple:
    return (*a_shard.shape[:dim], a_shard.shape[dim] * world, *a_shard.shape[dim + 1:])


def _mm(rows: torch.Tensor, b: torch.Tensor, layout: str, out_dtype: torch.dtype) -> torch.Tensor:
    """``rows [M, K] @ op(b)`` through the gemm op (its backend), ``[M, N]`` in ``out_dtype``."""
    return gemm(rows, b, trans_b=layout == "NT", out_dtype=out_dtype)


def _chunks(length: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` nearly equal ``[lo, hi)`` ranges covering ``length`` (empty ones dropped)."""
    bounds = [length * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


def _all_gather(out: torch.Tensor, inp: torch.Tensor, group):
    """Async all-gather into ``out`` (FP8 travels as its bytes: not every backend knows the dtype)."""
    if is_fp8_dtype(inp.dtype):
        out, inp = out.view(torch.uint8), inp.view(torch.uint8)
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=True)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor, group):
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, op=dist.ReduceOp.SUM, group=group, async_op=True)


def fused_all_gather_matmul(A_shard, Bs, layouts, gather_dim, group_name, gemm_streams=None, comm_streams=None,
                            copy_streams=None, *, comm_method="pipeline", num_splits=2,
                            skip_copy_local_ag_out=False, enable_sdma=False, return_A=True, A_out=None,
                            outputs=None, out_dtypes=None):
    """``A = all_gather(A_shard, gather_dim)``; ``C_i = A @ op(B_i)``, pipelined over ``num_splits``.

    Args:
        A_shard: ``[*lead, K]`` (at least 2-D), fp16/bf16/fp32; every rank's has the same shape.
        Bs: 2-D weights in A's dtype: ``[K, N_i]`` for layout ``"NN"``, ``[N_i, K]`` for ``"NT"``.
        layouts: one of ``"NN"`` / ``"NT"`` per weight (the first letter is A's: never transposed).
        gather_dim: a leading dim of ``A_shard`` (not the last); A has ``world`` times its size there.
        group_name: the ProcessGroup, or the name it is registered under.
        num_splits: chunks of the shard along ``gather_dim``, each gathered and multiplied in turn.
        skip_copy_local_ag_out: accepted for compatibility; no effect (the gather writes every shard).
        return_A: return the gathered ``A`` (into ``A_out`` when given) or None.
        A_out: ``[*A shape]`` in A's dtype, written when ``return_A``.
        outputs: optional ``C_i`` buffers, ``[*A.shape[:-1], N_i]`` in ``out_dtypes[i]`` (None entries:
            allocated).
        out_dtypes: per-weight result dtypes (fp16/bf16/fp32; None: A's dtype).

    Returns:
        ``(A or None, [C_i])``. The rows of ``A`` and ``C_i`` along ``gather_dim`` are rank 0's
        shard, then rank 1's, ...; each ``C_i`` is one GEMM (fp32 sums, rounded once).
    """
    _check_common(comm_method, num_splits, enable_sdma,
                  {"gemm_streams": gemm_streams, "comm_streams": comm_streams, "copy_streams": copy_streams})
    _check_a("A_shard", A_shard, "a leading dim to gather along")
    count = _weight_count(Bs, "weights")
    layouts = _per_weight("layouts", layouts, count, optional=False, noun="layout")
    ns = [_check_b(f"Bs[{i}]", b, lay, A_shard) for i, (b, lay) in enumerate(zip(Bs, layouts, strict=True))]
    dtypes = _result_dtypes(out_dtypes, count, A_shard.dtype)
    dim = _row_dim("gather_dim", gather_dim, A_shard)
    if not isinstance(skip_copy_local_ag_out, bool) or not isinstance(return_A, bool):
        raise ValueError("skip_copy_local_ag_out, return_A: expected bools")
    group, world = _group(group_name)
    a_shape = _gathered_shape(A_shard, dim, world)
    c_shapes = [(*a_shape[:-1], n) for n in ns]
    _check_out("A_out", A_out if return_A else None, a_shape, A_shard.dtype, A_shard.device)
    outputs = _check_outs("outputs", outputs, c_shapes, dtypes, A_shard.device)

    with torch.no_grad():
        cs = _buffers(outputs, c_shapes, dtypes, A_shard.device)
        a_full = (A_out if A_out is not None else torch.empty(a_shape, dtype=A_shard.dtype, device=A_shard.device)) \
            if return_A else None
        for lo, hi, flat, _ in _gathered_chunks(A_shard, None, dim, num_splits, world, group, a_full):
            for b, lay, c in zip(Bs, layouts, cs, strict=True):
                _place(c, dim, world, lo, hi, _mm(flat, b, lay, c.dtype))
    return a_full, cs


def _gathered_chunks(a_shard: torch.Tensor, a_scale: torch.Tensor | None, dim: int, num_splits: int, world: int,
                     group, a_full: torch.Tensor | None):
    """Yield ``(lo, hi, rows [world * n * rest, K], scales [same rows, 1] or None)`` per chunk
    ``[lo, hi)`` of the shard's ``dim``, in chunk order: every chunk's gather (and its row scales')
    is queued first, then each is waited for in turn (copied into ``a_full`` when given)."""
    k = a_shard.shape[-1]
    rows = a_shard.shape[dim]
    moved = a_shard.movedim(dim, 0)  # [rows, *rest, K]
    scales = a_scale.movedim(dim, 0) if a_scale is not None else None
    rest = moved.shape[1:-1]
    pending = []
    for lo, hi in _chunks(rows, num_splits):
        buf = torch.empty((world, hi - lo, *rest, k), dtype=a_shard.dtype, device=a_shard.device)
        src = moved[lo:hi].contiguous()
        works = [_all_gather(buf.view(world * (hi - lo), *rest, k), src, group)]
        sbuf = ssrc = None
        if scales is not None:
            sbuf = torch.empty((world, hi - lo, *rest, 1), dtype=scales.dtype, device=scales.device)
            ssrc = scales[lo:hi].contiguous()
            works.append(_all_gather(sbuf.view(world * (hi - lo), *rest, 1), ssrc, group))
        pending.append((lo, hi, buf, sbuf, (src, ssrc), works))
    for lo, hi, buf, sbuf, _alive, works in pending:  # the sources stay alive until their collectives are done
        for work in works:
            work.wait()
        if a_full is not None:
            _place(a_full, dim, world, lo, hi, buf)
        yield lo, hi, buf.view(-1, k), (sbuf.view(-1, 1) if sbuf is not None else None)


def _buffers(given: list, shapes: list, dtypes: list, device: torch.device) -> list[torch.Tensor]:
    """The caller's result buffers (``_check_outs``), a new one where it gave none."""
    return [b if b is not None else torch.empty(s, dtype=d, device=device)
            for b, s, d in zip(given, shapes, dtypes, strict=True)]


def _place(full: torch.Tensor, dim: int, world: int, lo: int, hi: int, part: torch.Tensor) -> None:
    """Copy ``part`` (rows ordered rank, chunk row, rest) into rows ``[lo, hi)`` of every rank's
    block of ``full`` along ``dim``."""
    blocks = full.movedim(dim, 0).unflatten(0, (world, -1))[:, lo:hi]
    blocks.copy_(part.view(blocks.shape))


def fused_all_gather_scaled_matmul(A_shard, Bs, layouts, A_scale, B_scales, gather_dim, group_name, biases=None,
                                   result_scales=None, out_dtypes=None, use_fast_accum=False, gemm_streams=None,
                                   comm_streams=None, copy_streams=None, *, comm_method="pipeline", num_splits=2,
                                   skip_copy_local_ag_out=False, enable_sdma=False, A_out=None, mm_out=None):
    """``A = all_gather(A_shard, gather_dim)``; ``C_i = (A * A_scale) @ op(B_i * B_scales[i]) (+ biases[i])``.

    Args:
        A_shard: FP8 ``[*lead, K]`` (at least 2-D); every rank's has the same shape.
        Bs: FP8 2-D weights of A's flavour: ``[K, N_i]`` (``"NN"``) or ``[N_i, K]`` (``"NT"``).
        layouts: ``"NN"`` / ``"NT"`` per weight.
        A_scale: fp32 dequantization multipliers: one value (TENSORWISE: the scale of the whole
            gathered A, so every rank passes the same value, e.g. from an all-reduced amax), or
            ``[*lead, 1]`` (ROWWISE: one per row of the shard, gathered with it).
        B_scales: per weight, one value (TENSORWISE, with a TENSORWISE ``A_scale``) or one per output
            column (ROWWISE): ``[1, N_i]`` for ``"NN"``, ``[N_i, 1]`` for ``"NT"``.
        gather_dim, group_name, num_splits, skip_copy_local_ag_out: as :func:`fused_all_gather_matmul`.
        biases: None, or per weight None or ``[N_i]`` (taken in the output dtype), added to the fp32 sums
            before their one rounding to the output dtype.
        result_scales: None (or all None): FP8 outputs are not supported.
        out_dtypes: per weight fp16/bf16/fp32 (None: bf16).
        use_fast_accum: accepted; the ``gemm_fp8`` backend's accumulation is used either way.
        A_out: the gathered FP8 ``A`` buffer (the gathered A is returned either way).
        mm_out: optional ``C_i`` buffers, ``[*A.shape[:-1], N_i]`` in ``out_dtypes[i]`` (None entries:
            allocated).

    Returns:
        ``(A, [C_i])``: the gathered FP8 A and one result per weight (fp32 sums, rounded once).
    """
    _check_common(comm_method, num_splits, enable_sdma,
                  {"gemm_streams": gemm_streams, "comm_streams": comm_streams, "copy_streams": copy_streams})
    if not isinstance(A_shard, torch.Tensor) or not is_fp8_dtype(A_shard.dtype) or A_shard.dim() < 2:
        got = f"{A_shard.dtype} tensor of {A_shard.dim()} dims" if isinstance(A_shard, torch.Tensor) else \
            type(A_shard).__name__
        raise ValueError(f"A_shard: expected an FP8 tensor [..., K] with a leading dim to gather along, got {got}")
    n_w = _weight_count(Bs, "FP8 weights")
    layouts = _per_weight("layouts", layouts, n_w, optional=False)
    B_scales = _per_weight("B_scales", B_scales, n_w, optional=False)
    biases = _per_weight("biases", biases, n_w)
    if any(r is not None for r in _per_weight("result_scales", result_scales, n_w)):
        raise ValueError("result_scales: FP8 outputs are not supported here; pass None")
    if not isinstance(use_fast_accum, bool) or not isinstance(skip_copy_local_ag_out, bool):
        raise ValueError("use_fast_accum, skip_copy_local_ag_out: expected bools")
    dim = _row_dim("gather_dim", gather_dim, A_shard)
    dtypes = _result_dtypes(out_dtypes, n_w, torch.bfloat16)
    if not isinstance(A_scale, torch.Tensor) or A_scale.dtype != torch.float32 or A_scale.device != A_shard.device:
        raise ValueError(f"A_scale: expected an fp32 tensor on {A_shard.device}")
    rowwise_shape = (*A_shard.shape[:-1], 1)
    if A_scale.numel() == 1 and tuple(A_scale.shape) != rowwise_shape:
        rowwise = False
    elif tuple(A_scale.shape) == rowwise_shape:
        rowwise = True
    else:
        raise ValueError(f"A_scale: expected one value (TENSORWISE) or {rowwise_shape} (ROWWISE), "
                         f"got {tuple(A_scale.shape)}")
    ns = []
    for i, (b, lay, sc) in enumerate(zip(Bs, layouts, B_scales, strict=True)):
        n = _check_b(f"Bs[{i}]", b, lay, A_shard)
        want = ((1, n) if lay == "NN" else (n, 1)) if rowwise else None
        ok = isinstance(sc, torch.Tensor) and sc.dtype == torch.float32 and sc.device == A_shard.device and \
            (tuple(sc.shape) == want if rowwise else sc.numel() == 1)
        if not ok:
            raise ValueError(f"B_scales[{i}]: expected an fp32 tensor of " + (f"shape {want} (ROWWISE, like A_scale)"
                             if rowwise else "one value (TENSORWISE, like A_scale)"))
        bias = biases[i]
        if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,)
                                 or bias.device != A_shard.device):
            raise ValueError(f"biases[{i}]: expected None or a [{n}] tensor on {A_shard.device}")
        ns.append(n)
    group, world = _group(group_name)
    a_shape = _gathered_shape(A_shard, dim, world)
    c_shapes = [(*a_shape[:-1], n) for n in ns]
    _check_out("A_out", A_out, a_shape, A_shard.dtype, A_shard.device)
    mm_out = _check_outs("mm_out", mm_out, c_shapes, dtypes, A_shard.device)
    gran = ScalingGranularity.ROWWISE if rowwise else ScalingGranularity.TENSORWISE
    with torch.no_grad():
        cs = _buffers(mm_out, c_shapes, dtypes, A_shard.device)
        a_full = A_out if A_out is not None else torch.empty(a_shape, dtype=A_shard.dtype, device=A_shard.device)
        a_sc = A_scale.reshape(()) if not rowwise else None
        b_scs = [s if rowwise else s.reshape(()) for s in B_scales]
        biases = [b.to(d) if b is not None else None for b, d in zip(biases, dtypes, strict=True)]
        for lo, hi, flat, scales in _gathered_chunks(A_shard, A_scale if rowwise else None, dim, num_splits, world,
                                                     group, a_full):
            for b, lay, c, b_sc, bias in zip(Bs, layouts, cs, b_scs, biases, strict=True):
                # with a bias: accumulate into it (one rounding of bias + sum, beta = 1)
                acc = bias.expand(flat.shape[0], c.shape[-1]).contiguous() if bias is not None else None
                part = launch_fp8.gemm_fp8(flat, scales if rowwise else a_sc, b, b_sc, trans_b=lay == "NT",
                                           out_dtype=None if acc is not None else c.dtype, granularity=gran, out=acc)
                _place(c, dim, world, lo, hi, part)
    return a_full, cs


def fused_matmul_reduce_scatter(A, B, layout, reduce_op, scatter_dim, group_name, gemm_streams=None,
                                comm_streams=None, *, comm_method="pipeline", num_splits=2, enable_sdma=False,
                                output=None, rs_out=None, out_dtype=None):
    """``C = A @ op(B)``, reduce-scattered (``"sum"`` or ``"avg"`` over the ranks) along ``scatter_dim``.

    Args:
        A: ``[*lead, K]`` (at least 2-D), fp16/bf16/fp32; ``lead[scatter_dim]`` divisible by the world size.
        B: ``[K, N]`` (layout ``"NN"``) or ``[N, K]`` (``"NT"``) in A's dtype.
        reduce_op: ``"sum"`` or ``"avg"`` (the sum divided by the world size, in the output dtype).
        scatter_dim: a leading dim of ``A`` (not the last); rank ``r`` gets its ``r``-th slice.
        group_name: the ProcessGroup, or the name it is registered under.
        num_splits: chunks of each destination's slice, multiplied and reduce-scattered in turn.
        output: optional buffer for this rank's full ``C`` ``[*lead, N]`` (written when given).
        rs_out: optional result buffer ``[*lead with lead[scatter_dim] / world, N]``.
        out_dtype: fp16/bf16/fp32 (None: A's dtype): the GEMM's output and the reduction's dtype.

    Returns:
        ``rs_out``: ``sum_r C_r[slice of this rank]`` (or its average), ``C_r`` being rank ``r``'s product.
    """
    _check_common(comm_method, num_splits, enable_sdma, {"gemm_streams": gemm_streams, "comm_streams": comm_streams})
    _check_a("A", A, "a leading dim to scatter along")
    n = _check_b("B", B, layout, A)
    if reduce_op not in ("sum", "avg"):
        raise ValueError(f"reduce_op: expected 'sum' or 'avg', got {reduce_op!r}")
    dtype = A.dtype if out_dtype is None else out_dtype
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"out_dtype: expected fp16/bf16/fp32 or None, got {out_dtype}")
    dim = _row_dim("scatter_dim", scatter_dim, A)
    group, world = _group(group_name)
    if A.shape[dim] % world:
        raise ValueError(f"A: dim {dim} has {A.shape[dim]} rows, not divisible by the world size {world}")
    c_shape = (*A.shape[:-1], n)
    per = A.shape[dim] // world
    rs_shape = (*A.shape[:dim], per, *A.shape[dim + 1:-1], n)
    _check_out("output", output, c_shape, dtype, A.device)
    _check_out("rs_out", rs_out, rs_shape, dtype, A.device)

    k = A.shape[-1]
    by_rank = A.movedim(dim, 0).unflatten(0, (world, per))  # [world, per, *rest, K]
    rest = by_rank.shape[2:-1]
    with torch.no_grad():
        result = rs_out if rs_out is not None else torch.empty(rs_shape, dtype=dtype, device=A.device)
        pending = []
        for lo, hi in _chunks(per, num_splits):
            rows = by_rank[:, lo:hi].reshape(-1, k)
            part = _mm(rows, B, layout, dtype)  # [world * (hi - lo) * rest, N], destination-major
            if output is not None:
                _place(output, dim, world, lo, hi, part)
            recv = torch.empty((hi - lo, *rest, n), dtype=dtype, device=A.device)
            pending.append((lo, hi, recv, part, _reduce_scatter(recv.view(-1, n), part, group)))
        moved = result.movedim(dim, 0)
        for lo, hi, recv, _part, work in pending:  # _part stays alive until its collective is done
            work.wait()
            if reduce_op == "avg":
                recv.div_(world)
            moved[lo:hi].copy_(recv)
    return result
