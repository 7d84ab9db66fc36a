"""Async tensor parallelism: a GEMM overlapped with the collective before or after it
(Primus-Turbo's ``ops/async_tp.py``). Forward only: the results do not track gradients.

``fused_all_gather_matmul``: ``A = all_gather(A_shard, gather_dim)`` and ``C_i = A @ op(B_i)``
for every ``B_i`` (the sequence-parallel input of a column-parallel linear layer).
``fused_all_gather_scaled_matmul``: the same with FP8 operands, ``torch._scaled_mm``'s convention
(``C_i = (A * A_scale) @ op(B_i * B_scale_i) (+ bias_i)``, TENSORWISE or ROWWISE scales), either
pre-quantized or quantized once before the exchange (``A_quant_config``).
``fused_matmul_reduce_scatter``: ``C = A @ op(B)``, then a reduce-scatter (sum or average over the
ranks) along ``scatter_dim`` (the output of a row-parallel linear layer).

How the overlap works:

* Each rank's rows are cut into chunks, ``(rank, split)`` pairs, taken in a chunk order
  (``layout``: ``"rank"``-major or ``"split"``-major, ring order from the local rank).
* The chunks move over one of two transports (``transport``): ``symm``, symmetric memory with the
  copies on the GPU's copy engines over NVLink, or ``nccl``, the process group's async collectives,
  where symmetric memory cannot serve (a CPU / gloo group, a group across hosts, a failed
  rendezvous, or ``TURBO_ASYNC_TP_TRANSPORT=nccl``). :func:`async_tp_transport` says which one a
  group uses, and why.
* All-gather (``gather``): the local chunks' GEMMs run first, while the first transfers are in
  flight; each remote chunk's GEMM waits for that chunk's own event (``symm``) or collective
  (``nccl``) only.
* Reduce-scatter (``scatter``): each chunk's partial products are sent to their destination and
  summed there while the next chunk's GEMM runs.
* ``num_splits`` and ``order``: given, or ``None`` for the choice tuned for the call's shape
  (M, N, K, world, dtypes, layout, transport) in turbo's tuning database, else a documented
  heuristic (``plan``); :func:`async_tp_plan` says which one a call gets. ``turbo bench async-tp``
  times the candidates and records the fastest.

The GEMMs are the ``gemm`` / ``gemm_fp8`` primitives, so they run on whichever backend the
dispatcher picks for the device. The result is the unfused composition (all-gather, matmul,
reduce-scatter) up to the order of the reduction over ranks: each GEMM sums its products in fp32 and
rounds once into the output dtype; the reduce-scatter sums those rounded values in the collective's
arithmetic (``nccl``) or in fp32, rounded once (``symm``).

``comm_method="pipeline"`` is the one method here. Primus's fused Triton GEMM + reduce-scatter
kernel (``"tile"``), its ring exchange and its AMD SDMA copies (``enable_sdma``) are not
implemented; asking for them raises a ValueError. The stream lists (``gemm_streams``,
``comm_streams``, ``copy_streams``) are accepted for signature compatibility and not used: the GEMMs
run on the current stream, ``symm``'s copies and sums on side streams of turbo's own.

Calls on one group run in the order of one stream: the ops of a group share its symmetric workspace,
and each call ends with a barrier after its last use of it. The first call on a group (per device)
makes a collective check of the transport and may allocate the workspace: run it eagerly before a
CUDA graph captures the op.
"""

from turbo_core.ops.async_tp.ag_matmul import fused_all_gather_matmul
from turbo_core.ops.async_tp.ag_scaled_matmul import fused_all_gather_scaled_matmul
from turbo_core.ops.async_tp.mm_reduce_scatter import fused_matmul_reduce_scatter
from turbo_core.ops.async_tp.select import async_tp_plan, async_tp_transport

__all__ = ["async_tp_plan", "async_tp_transport", "fused_all_gather_matmul", "fused_all_gather_scaled_matmul",
           "fused_matmul_reduce_scatter"]
