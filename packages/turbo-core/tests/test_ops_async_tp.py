"""``turbo_core.ops.fused_all_gather_matmul`` / ``fused_all_gather_scaled_matmul`` /
``fused_matmul_reduce_scatter`` over gloo (2 and 3 forked processes), on both transports, against
float64 math written here from the definitions:

- all-gather + matmul: ``A`` is every rank's shard concatenated along ``gather_dim`` in rank
  order, ``C_i = A @ op(B_i)``;
- the scaled form: the same with ``A = cat(data_r * scale_r)`` and ``op(B_i * B_scale_i)`` (+ bias),
  TENSORWISE and ROWWISE scales, the gathered FP8 bytes equal to the shards';
- quantize-once: bf16 shards of different magnitudes per rank; the gathered bytes and scales equal
  the quantization defined in ``turbo_core.ops.quantization`` (TENSORWISE: of the amax over every
  rank; ROWWISE: of each row), and ``C`` matches float64 math of those operands;
- matmul + reduce-scatter: rank ``r`` gets ``sum_s C_s`` (or the average) restricted to the
  ``r``-th slice of ``scatter_dim``, ``C_s`` being rank ``s``'s product.

Transports: ``nccl`` (the gloo collectives, what a CPU group gets) and ``symm``: the symmetric-memory
pipeline with each rank's buffer a file mapped by every rank (``torch.from_file(shared=True)``) and
the barrier ``dist.barrier``; on a CPU every stream is the calling thread, so this runs the
pipeline's chunk order, slots, offsets and sums, not the GPU's streams (the GPU tests do).

Every rank rebuilds every rank's inputs from one seed. Cases: 2-D and 3-D inputs, each leading dim,
1 to 4 chunks (uneven), both chunk orders and the default plan, both layouts, several weights, fp32
and bf16, an fp32 output from bf16, preallocated buffers, ``return_A=False``. fp32 results must
match float64 to fp32 rounding; bf16 ones to bf16's tolerance (one GEMM rounding, then a sum over
ranks in bf16)."""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest
import torch
import torch.distributed as dist
from ranks_harness import needs_two_gpus, run_ranks

from turbo_core.testing import assert_close_to_reference, assert_snr

HAS_FP8 = getattr(torch, "float8_e4m3fn", None) is not None


def _rand(shape, g, dtype):
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _op(b, layout):
    return b if layout == "NN" else b.t()


class FileWorkspace:
    """A symmetric workspace on the CPU: rank ``r``'s buffer is the file ``<root>/<n>_<r>``, mapped
    shared by every rank; ``barrier`` is the group's."""

    made = 0

    def __init__(self, group, device, nbytes: int, root: str) -> None:
        FileWorkspace.made += 1
        self.group, self.capacity = group, nbytes
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        path = os.path.join(root, f"{FileWorkspace.made}_{{}}")
        self._local = torch.from_file(path.format(rank), shared=True, size=nbytes, dtype=torch.uint8)
        dist.barrier(group=group)  # every file exists
        self._peers = [self._local if r == rank else
                       torch.from_file(path.format(r), shared=True, size=nbytes, dtype=torch.uint8)
                       for r in range(world)]

    def local(self):
        return self._local

    def peer(self, rank):
        return self._peers[rank]

    def barrier(self):
        dist.barrier(group=self.group)


def _check_all_gather(rank: int, world: int, group, dev: torch.device) -> None:
    from turbo_core.ops import fused_all_gather_matmul

    cases = [  # shard shape, gather_dim, num_splits, order, layouts, dtype, out_dtypes
        ((5, 8), 0, 2, "split", ["NT"], torch.float32, None),
        ((7, 8), 0, 3, "rank", ["NN", "NT"], torch.float32, None),
        ((2, 5, 8), 1, 2, "rank", ["NT", "NN"], torch.float32, None),
        ((3, 4, 8), 0, 1, None, ["NN"], torch.float32, None),
        ((6, 16), 0, 4, "split", ["NT", "NT"], torch.bfloat16, [None, torch.float32]),
        ((6, 16), 0, None, None, ["NT"], torch.bfloat16, None),
    ]
    for shape, gdim, splits, order, layouts, dtype, out_dtypes in cases:
        g = torch.Generator().manual_seed(11)
        shards = [_rand(shape, g, dtype) for _ in range(world)]
        ns = [3 + i for i in range(len(layouts))]
        k = shape[-1]
        bs = [_rand((k, n) if lay == "NN" else (n, k), g, dtype) for n, lay in zip(ns, layouts, strict=True)]
        a64 = torch.cat([s.double() for s in shards], dim=gdim)
        for preallocated in (False, True):
            dts = [dtype if d is None else d for d in (out_dtypes or [None] * len(bs))]
            kw = {}
            if preallocated:
                kw["A_out"] = torch.full(a64.shape, float("nan"), dtype=dtype, device=dev)
                kw["outputs"] = [torch.full((*a64.shape[:-1], n), float("nan"), dtype=d, device=dev)
                                 for n, d in zip(ns, dts, strict=True)]
            a, cs = fused_all_gather_matmul(shards[rank].to(dev, copy=True), [b.to(dev) for b in bs], layouts, gdim,
                                            group.group_name, num_splits=splits, order=order,
                                            out_dtypes=out_dtypes, **kw)
            assert a.device == dev and all(c.device == dev for c in cs)
            a, cs = a.cpu(), [c.cpu() for c in cs]
            assert torch.equal(a, a64.to(dtype)), f"A {shape} dim {gdim}"
            if preallocated:
                assert torch.equal(kw["A_out"].cpu(), a)
                assert all(torch.equal(c, o.cpu()) for c, o in zip(cs, kw["outputs"], strict=True))
            for c, b, lay, d in zip(cs, bs, layouts, dts, strict=True):
                want = a64 @ _op(b.double(), lay)
                assert c.dtype == d and c.shape == want.shape
                assert_close_to_reference(c, want, dtype=dtype,
                                          what=f"C {shape} dim {gdim} {lay} splits {splits} order {order}")
    g = torch.Generator().manual_seed(3)
    shards = [_rand((4, 8), g, torch.float32) for _ in range(world)]
    b = _rand((8, 5), g, torch.float32)
    for order in ("rank", "split"):
        a, cs = fused_all_gather_matmul(shards[rank].to(dev), [b.to(dev)], ["NN"], 0, group, return_A=False,
                                        num_splits=2, order=order)
        assert a is None
        assert_close_to_reference(cs[0].cpu(), torch.cat([s.double() for s in shards]) @ b.double(),
                                  dtype=torch.float32)


def _check_reduce_scatter(rank: int, world: int, group, dev: torch.device) -> None:
    from turbo_core.ops import fused_matmul_reduce_scatter

    cases = [  # A shape (scatter dim multiple of world), scatter_dim, num_splits, order, layout, op, dtype, out_dtype
        ((2 * world, 8), 0, 2, "split", "NT", "sum", torch.float32, None),
        ((3 * world, 8), 0, 3, "rank", "NN", "avg", torch.float32, None),
        ((2, 3 * world, 8), 1, 2, "rank", "NT", "sum", torch.float32, None),
        ((world, 2, 8), 0, 1, None, "NN", "avg", torch.float32, None),
        ((4 * world, 16), 0, 3, "split", "NT", "sum", torch.bfloat16, torch.float32),
        ((4 * world, 16), 0, None, None, "NN", "sum", torch.bfloat16, None),
    ]
    for shape, sdim, splits, order, layout, op, dtype, out_dtype in cases:
        g = torch.Generator().manual_seed(5)
        a_all = [_rand(shape, g, dtype) for _ in range(world)]
        n, k = 6, shape[-1]
        b = _rand((k, n) if layout == "NN" else (n, k), g, dtype)
        per = shape[sdim] // world
        prods = [a.double() @ _op(b.double(), layout) for a in a_all]
        total = sum(prods) / (world if op == "avg" else 1)
        want = total.narrow(sdim, rank * per, per)
        d = dtype if out_dtype is None else out_dtype
        for preallocated in (False, True):
            kw = {}
            if preallocated:
                kw["output"] = torch.full((*shape[:-1], n), float("nan"), dtype=d, device=dev)
                kw["rs_out"] = torch.full(want.shape, float("nan"), dtype=d, device=dev)
            got = fused_matmul_reduce_scatter(a_all[rank].to(dev, copy=True), b.to(dev), layout, op, sdim,
                                              group.group_name, num_splits=splits, order=order, out_dtype=out_dtype,
                                              **kw)
            assert got.dtype == d and got.shape == want.shape and got.device == dev
            if preallocated:
                assert got is kw["rs_out"]
                assert_close_to_reference(kw["output"].cpu(), prods[rank], dtype=dtype, what="output (local C)")
            got = got.cpu()
            # each rank's GEMM accumulates k products in fp32 (at most k fp32 ulps of sum |a||b|, which
            # |C| can be far below when the products cancel) and rounds once into d, then the sum over
            # the ranks rounds once per addition: bounded by world ulps of d plus k fp32 ulps, of the
            # sum over ranks of |A_r| @ |op(B)|
            mags = [a.double().abs() @ _op(b.double(), layout).abs() for a in a_all]
            scale = sum(mags).narrow(sdim, rank * per, per) / (world if op == "avg" else 1)
            bound = scale * (torch.finfo(d).eps * world + k * 2.0 ** -23)
            err = (got.double() - want).abs()
            assert (err <= bound).all(), f"{shape} dim {sdim} {layout} {op} splits {splits} order {order}: " \
                f"error {(err - bound).max().item():.3g} over the bound"


def _fp8(x64: torch.Tensor, rowwise_dim: int | None):
    """``(data, scale)`` with ``data * scale ~ x``: one scale, or one per slice along ``rowwise_dim``
    (kept as a size-1 dim), each mapping its amax to E4M3's largest value."""
    amax = x64.abs().amax() if rowwise_dim is None else x64.abs().amax(dim=rowwise_dim, keepdim=True)
    scale = (amax / 448.0).clamp_min(1e-12).float()
    return (x64 / scale.double()).to(torch.float8_e4m3fn), scale


def _weights(g, k: int, layouts: list[str], rowwise: bool):
    ws = []
    for i, lay in enumerate(layouts):
        n = 4 + 3 * i
        w64 = torch.randn((k, n) if lay == "NN" else (n, k), generator=g, dtype=torch.float64)
        ws.append(_fp8(w64, (0 if lay == "NN" else 1) if rowwise else None))
    return ws


def _check_scaled(rank: int, world: int, group, dev: torch.device) -> None:
    from turbo_core.ops import fused_all_gather_scaled_matmul

    cases = [  # shard shape, gather_dim, num_splits, order, layouts, rowwise, biases?, out_dtypes
        ((5, 32), 0, 2, "split", ["NT", "NN"], False, True, [torch.bfloat16, torch.float32]),
        ((2, 6, 32), 1, 3, "rank", ["NT"], True, False, None),
        ((7, 32), 0, 1, None, ["NN", "NT"], True, True, [torch.float32, torch.float16]),
    ]
    for shape, gdim, splits, order, layouts, rowwise, with_bias, out_dtypes in cases:
        g = torch.Generator().manual_seed(17)
        xs = [torch.randn(shape, generator=g, dtype=torch.float64) * 4 * (r + 1) for r in range(world)]
        if rowwise:  # each row its own scale, gathered with it
            shards = [_fp8(x, -1) for x in xs]
        else:  # one scale for the whole gathered A, from the amax over every rank's shard
            _, one = _fp8(torch.stack(xs), None)
            shards = [((x / one.double()).to(torch.float8_e4m3fn), one) for x in xs]
        ws = _weights(g, shape[-1], layouts, rowwise)
        dts = [torch.bfloat16 if d is None else d for d in (out_dtypes or [None] * len(layouts))]
        biases = [torch.randn(w.shape[1] if lay == "NN" else w.shape[0], generator=g, dtype=torch.float64).to(d)
                  for (w, _), lay, d in zip(ws, layouts, dts, strict=True)] if with_bias else None
        data, scale = shards[rank]
        scale_out = torch.full((*torch.cat([d for d, _ in shards], dim=gdim).shape[:-1], 1) if rowwise else (),
                               float("nan"), device=dev)
        a, cs = fused_all_gather_scaled_matmul(
            data.to(dev), [w.to(dev) for w, _ in ws], layouts, scale.to(dev), [s.to(dev) for _, s in ws], gdim,
            group.group_name, biases=[b.to(dev) for b in biases] if biases else None, out_dtypes=out_dtypes,
            num_splits=splits, order=order, A_scale_out=scale_out)
        want_a = torch.cat([d for d, _ in shards], dim=gdim)
        assert a.dtype == torch.float8_e4m3fn and torch.equal(a.cpu().view(torch.uint8), want_a.view(torch.uint8))
        want_scale = torch.cat([s for _, s in shards], dim=gdim) if rowwise else shards[0][1]
        assert torch.equal(scale_out.cpu(), want_scale.reshape(scale_out.shape))
        a64 = torch.cat([d.double() * s.double() for d, s in shards], dim=gdim)
        for i, (c, (w, ws_), lay, d) in enumerate(zip(cs, ws, layouts, dts, strict=True)):
            want = a64 @ _op(w.double() * ws_.double(), lay)
            if biases:
                want = want + biases[i].double()
            assert c.dtype == d and c.shape == want.shape and c.device == dev
            # an fp32 result is gated at bf16's tolerance: a GPU's FP8 MMA adds its products below fp32
            # precision (a few 1e-4 relative on sm90), which the float64 math here does not model
            gate = torch.bfloat16 if d == torch.float32 and dev.type == "cuda" else d
            assert_close_to_reference(c.cpu(), want, dtype=gate,
                                      what=f"scaled C{i} {shape} dim {gdim} {lay} rowwise {rowwise} order {order}")


def _quantized(x: torch.Tensor, amax: torch.Tensor):
    """``turbo_core.ops.quantization``'s FP32-scale arithmetic: ``scale = 448 / max(amax, 1e-12)``
    (as torch evaluates ``float / tensor``), ``q = clamp(x * scale, ±448)`` to E4M3, ``1 / scale``."""
    scale = 448.0 / amax.float().clamp_min(1e-12)
    return (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn), 1.0 / scale


def _check_quantize_once(rank: int, world: int, group, dev: torch.device) -> None:
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
    from turbo_core.ops import fused_all_gather_scaled_matmul

    cases = [  # shard shape, gather_dim, granularity, num_splits, order, layouts
        ((6, 32), 0, ScalingGranularity.TENSORWISE, 2, "split", ["NT", "NN"]),
        ((2, 5, 32), 1, ScalingGranularity.ROWWISE, 2, "rank", ["NT"]),
        ((7, 32), 0, ScalingGranularity.ROWWISE, None, None, ["NN"]),
    ]
    for shape, gdim, gran, splits, order, layouts in cases:
        rowwise = gran == ScalingGranularity.ROWWISE
        g = torch.Generator().manual_seed(23)
        # every rank its own magnitude: a scale from one rank's amax would not serve the others
        xs = [(torch.randn(shape, generator=g, dtype=torch.float64) * 3 ** r).to(torch.bfloat16) for r in range(world)]
        if rowwise:
            quants = [_quantized(x, x.float().abs().amax(dim=-1, keepdim=True)) for x in xs]
        else:
            amax = torch.stack([x.float().abs().amax() for x in xs]).amax()
            quants = [_quantized(x, amax) for x in xs]
        ws = _weights(g, shape[-1], layouts, rowwise)
        a_shape = torch.cat(xs, dim=gdim).shape
        scale_out = torch.full((*a_shape[:-1], 1) if rowwise else (1,), float("nan"), device=dev)
        a, (c0, *_rest) = fused_all_gather_scaled_matmul(
            xs[rank].to(dev), [w.to(dev) for w, _ in ws], layouts, None, [s.to(dev) for _, s in ws], gdim,
            group.group_name, num_splits=splits, order=order, A_quant_config=Float8QuantConfig(granularity=gran),
            A_scale_out=scale_out)
        want_q = torch.cat([q for q, _ in quants], dim=gdim)
        what = f"quantize-once {gran.value} {shape} dim {gdim}"
        assert a.dtype == torch.float8_e4m3fn and torch.equal(a.cpu().view(torch.uint8), want_q.view(torch.uint8)), what
        want_s = torch.cat([s for _, s in quants], dim=gdim) if rowwise else quants[0][1]
        assert torch.equal(scale_out.cpu(), want_s.reshape(scale_out.shape)), what
        (w, w_s), lay = ws[0], layouts[0]
        deq_b = _op(w.double() * w_s.double(), lay)
        a64 = torch.cat([q.double() * s.double() for q, s in quants], dim=gdim)
        assert_close_to_reference(c0.cpu(), a64 @ deq_b, dtype=torch.bfloat16, what=what)
        # and against the unquantized input: FP8's error only
        assert_snr(torch.cat([x.double() for x in xs], dim=gdim) @ deq_b, c0.cpu(), "E4M3", what=what)


def _check_transport_choice(group, dev: torch.device) -> None:
    """A CPU group gets ``nccl`` with the reason; ``TURBO_ASYNC_TP_TRANSPORT`` forces either way
    (``symm`` where it cannot serve: an error with the reason) and a bad value is named."""
    from turbo_core.ops import async_tp_transport, fused_all_gather_matmul

    env = "TURBO_ASYNC_TP_TRANSPORT"
    assert async_tp_transport(group, dev) == ("nccl", "the tensors are on cpu (symmetric memory needs CUDA GPUs)")
    try:
        os.environ[env] = "nccl"
        assert async_tp_transport(group.group_name, dev) == ("nccl", f"{env}=nccl asks for the collectives")
        os.environ[env] = "symm"
        with pytest.raises(RuntimeError, match=f"{env}=symm: symmetric memory cannot serve this group: the "
                                               "tensors are on cpu"):
            fused_all_gather_matmul(torch.ones(2, 4), [torch.ones(3, 4)], ["NT"], 0, group)
        os.environ[env] = "sometimes"
        with pytest.raises(ValueError, match=f"{env}='sometimes': expected auto"):
            async_tp_transport(group, dev)
    finally:
        del os.environ[env]


def _check_rank(rank: int, world: int, dev: torch.device, *, transport: str, root: str | None = None) -> None:
    from turbo_core.ops import async_tp_transport
    from turbo_core.ops.async_tp import transport as tp

    if transport == "symm" and dev.type == "cpu":
        tp.set_workspace_provider(functools.partial(FileWorkspace, root=root))
    group = dist.group.WORLD
    assert async_tp_transport(group, dev).name == transport, async_tp_transport(group, dev)
    if transport == "nccl" and dev.type == "cpu":
        _check_transport_choice(group, dev)
    _check_all_gather(rank, world, group, dev)
    _check_reduce_scatter(rank, world, group, dev)
    if HAS_FP8:
        _check_scaled(rank, world, group, dev)
        _check_quantize_once(rank, world, group, dev)


@pytest.mark.distributed
@pytest.mark.parametrize("transport", ["nccl", "symm"])
@pytest.mark.parametrize("world", [2, 3])
def test_async_tp_matches_float64(world, transport, tmp_path):
    run_ranks(functools.partial(_check_rank, transport=transport, root=str(tmp_path)), world, tmp_path)


@pytest.mark.gpu
@pytest.mark.distributed
@needs_two_gpus
@pytest.mark.parametrize("transport", ["nccl", "symm"])
def test_async_tp_on_two_gpus(transport, tmp_path, monkeypatch):
    """The same checks on two GPUs over NCCL, through each transport (``symm``: torch's symmetric
    memory, required, so that a GPU pair it cannot serve fails here with the reason), the GEMMs on
    turbo-triton's kernels (the reference backend runs on the CPU only; the spawned ranks load the
    plugins TURBO_PLUGINS names)."""
    if importlib.util.find_spec("turbo_triton") is None:
        pytest.skip("needs turbo-triton for the GEMMs on the GPU")
    monkeypatch.setenv("TURBO_PLUGINS", "turbo_core.reference.plugin,turbo_triton.plugin")
    monkeypatch.setenv("TURBO_ASYNC_TP_TRANSPORT", transport)
    run_ranks(functools.partial(_check_rank, transport=transport), 2, tmp_path, "nccl")


def _check_graph_replay(rank: int, world: int, dev: torch.device) -> None:
    """An all-gather + GEMM feeding a GEMM + reduce-scatter, run eagerly, then captured in a CUDA
    graph (after the eager call: the transport check and the workspace are done by then) and
    replayed on new inputs copied into the captured ones: the replay equals an eager call on them."""
    from turbo_core.ops import fused_all_gather_matmul, fused_matmul_reduce_scatter

    group = dist.group.WORLD
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    x = torch.randn(256, 512, device=dev, generator=g).to(torch.bfloat16)
    w1 = torch.randn(384, 512, device=dev, generator=g).mul_(512 ** -0.5).to(torch.bfloat16)
    w2 = torch.randn(512, 384, device=dev, generator=g).mul_(384 ** -0.5).to(torch.bfloat16)

    def step():
        _, (h,) = fused_all_gather_matmul(x, [w1], ["NT"], 0, group, return_A=False, num_splits=2)
        return h, fused_matmul_reduce_scatter(h, w2, "NT", "sum", 0, group, num_splits=2)

    step()
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    x.copy_(torch.randn(256, 512, device=dev, generator=g).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize(dev)
    want = step()
    for got, ref in zip(captured, want, strict=True):
        assert_close_to_reference(got, ref.double(), dtype=torch.bfloat16, what="graph replay")


@pytest.mark.gpu
@pytest.mark.distributed
@needs_two_gpus
@pytest.mark.parametrize("transport", ["nccl", "symm"])
def test_async_tp_graph_replay_on_two_gpus(transport, tmp_path, monkeypatch):
    if importlib.util.find_spec("turbo_triton") is None:
        pytest.skip("needs turbo-triton for the GEMMs on the GPU")
    monkeypatch.setenv("TURBO_PLUGINS", "turbo_core.reference.plugin,turbo_triton.plugin")
    monkeypatch.setenv("TURBO_ASYNC_TP_TRANSPORT", transport)
    run_ranks(_check_graph_replay, 2, tmp_path, "nccl")


def test_bad_arguments_are_named():
    from turbo_core.ops import fused_all_gather_matmul, fused_matmul_reduce_scatter

    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with pytest.raises(ValueError, match="group_name: torch.distributed is not initialized"):
        fused_all_gather_matmul(a, [b], ["NN"], 0, "default")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        cases = [
            (lambda: fused_all_gather_matmul(a, [b], ["TN"], 0, group), "layout of Bs\\[0\\]"),
            (lambda: fused_all_gather_matmul(a, [b], ["NT"], 0, group), "Bs\\[0\\]: K = 3"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN", "NN"], 0, group), "layouts: expected one layout"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 1, group), "gather_dim: the last dim"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 2, group), "gather_dim: expected a dim"),
            (lambda: fused_all_gather_matmul(a, [b.half()], ["NN"], 0, group), "Bs\\[0\\]: expected torch.float32"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, comm_method="ring_exchange"),
             "comm_method: only 'pipeline'"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, num_splits=0), "num_splits"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, order="diagonal"), "order: expected None or"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, enable_sdma=True), "enable_sdma"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, "no-such-group"), "no process group is registered"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, outputs=[torch.empty(4, 2)]),
             "outputs\\[0\\]: expected \\(4, 3\\)"),
            (lambda: fused_all_gather_matmul(a, [b], ["NN"], 0, group, out_dtypes=[torch.int32]), "out_dtypes\\[0\\]"),
            (lambda: fused_all_gather_matmul(torch.ones(4, 8, dtype=torch.int64), [b], ["NN"], 0, group), "A_shard"),
            (lambda: fused_matmul_reduce_scatter(a, b, "NN", "max", 0, group), "reduce_op"),
            (lambda: fused_matmul_reduce_scatter(a, b, "NN", "sum", 0, group, comm_method="tile"),
             "comm_method: only 'pipeline'"),
            (lambda: fused_matmul_reduce_scatter(a, b, "NN", "sum", 0, group, order="ring"), "order: expected None"),
            (lambda: fused_matmul_reduce_scatter(a, b, "NN", "sum", 0, group, rs_out=torch.empty(2, 3)),
             "rs_out: expected \\(4, 3\\)"),
            (lambda: fused_matmul_reduce_scatter(a, b.t().contiguous(), "NN", "sum", 0, group), "B: K = 3"),
        ]
        if HAS_FP8:
            from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
            from turbo_core.ops import fused_all_gather_scaled_matmul as scaled

            q, w = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one, row, col = torch.ones(()), torch.ones(4, 1), torch.ones(1, 3)
            blockwise = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128)
            cases += [
                (lambda: scaled(a, [w], ["NN"], one, [one], 0, group), "A_shard: expected an FP8 tensor"),
                (lambda: scaled(q, [w], ["NN"], torch.ones(2, 1), [one], 0, group), "A_scale: expected one value"),
                (lambda: scaled(q, [w], ["NN"], row, [one], 0, group), r"B_scales\[0\]: .*ROWWISE"),
                (lambda: scaled(q, [w], ["NN"], one, [col], 0, group), r"B_scales\[0\]: .*TENSORWISE"),
                (lambda: scaled(q, [w], ["NN"], one, [one], 0, group, result_scales=[one]), "result_scales"),
                (lambda: scaled(q, [w], ["NN"], one, [one], 0, group, biases=[torch.ones(4)]), r"biases\[0\]"),
                (lambda: scaled(q, [b], ["NN"], one, [one], 0, group), r"Bs\[0\]: expected an FP8 weight"),
                (lambda: scaled(q, [w], ["NN"], one, [one, one], 0, group), "B_scales: expected one entry"),
                (lambda: scaled(q, [w], ["NN"], one, [one], 0, group, A_scale_out=torch.ones(2)), "A_scale_out"),
                (lambda: scaled(a, [w], ["NN"], one, [one], 0, group, A_quant_config=Float8QuantConfig()),
                 "A_scale: expected None with A_quant_config"),
                (lambda: scaled(q, [w], ["NN"], None, [one], 0, group, A_quant_config=Float8QuantConfig()),
                 "A_shard: expected a fp16/bf16/fp32 tensor"),
                (lambda: scaled(a, [w], ["NN"], None, [one], 0, group, A_quant_config=blockwise),
                 "A_quant_config: the quantize-once all-gather supports TENSORWISE and ROWWISE"),
                (lambda: scaled(a, [w], ["NN"], None, [one], 0, group, A_quant_config="rowwise"),
                 "A_quant_config: expected None or a Float8QuantConfig"),
                (lambda: scaled(a, [w], ["NN"], None, [col], 0, group, A_quant_config=Float8QuantConfig()),
                 r"B_scales\[0\]: .*TENSORWISE"),
            ]
            got_a, (c,) = scaled(q, [w], ["NN"], row * 0.5, [col * 2.0], 0, group)
            assert torch.equal(got_a.view(torch.uint8), q.view(torch.uint8)) and c.dtype == torch.bfloat16
            assert_close_to_reference(c, q.double() @ w.double())
        for call, match in cases:
            with pytest.raises(ValueError, match=match):
                call()
        # one rank: the plain products
        got_a, (c,) = fused_all_gather_matmul(a, [b], ["NN"], 0, group.group_name, num_splits=3)
        assert torch.equal(got_a, a)
        assert_close_to_reference(c, a.double() @ b.double(), dtype=torch.float32)
        mine = torch.empty(4, 3)
        _, (c1, c2) = fused_all_gather_matmul(a, [b, b], ["NN", "NN"], 0, group, outputs=[None, mine])
        assert c2 is mine and torch.equal(c1, c2)
        rs = fused_matmul_reduce_scatter(a, b, "NN", "avg", 0, group)
        assert_close_to_reference(rs, a.double() @ b.double(), dtype=torch.float32)
    finally:
        dist.destroy_process_group()
