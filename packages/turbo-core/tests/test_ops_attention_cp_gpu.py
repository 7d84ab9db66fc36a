"""Context-parallel attention on a GPU.

- One GPU: the ring driver with every step's attention calls on the GPU's default backends, its
  ranks as threads of this process (``turbo_core.testing.context_parallel.check_ring_case``), bf16 and
  FP8, dense and varlen, every layout and mask, against float64 attention on the whole sequence.
- Two GPUs: the public ops end to end over NCCL (Ulysses, ring, zigzag, varlen, FP8; forward and
  backward), the cases of ``test_ops_attention_cp`` in bf16.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from ranks_harness import needs_two_gpus, run_ranks

from turbo_core.testing.context_parallel import check_ring_case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]


@pytest.mark.parametrize("ring_size", [2, 4])
@pytest.mark.parametrize("layout,causal", [("contiguous", False), ("contiguous", True), ("zigzag", True)])
@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_ring_steps_on_the_gpu(ring_size, layout, causal, varlen):
    check_ring_case("cuda", ring_size=ring_size, layout=layout, causal=causal, varlen=varlen, dtype=torch.bfloat16,
                    heads=(4, 2), head_dim=64, seqlen=256)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_steps_fp8_on_the_gpu(layout):
    check_ring_case("cuda", ring_size=2, layout=layout, causal=True, fp8=True, dtype=torch.bfloat16, heads=(2, 2),
                    head_dim=64, seqlen=256)


def test_ring_steps_on_the_reference_backend_on_the_gpu():
    check_ring_case("cuda", ring_size=2, layout="zigzag", causal=True, varlen=True, backend="TORCH")


def _check_nccl(rank: int, world: int, dev: torch.device) -> None:
    from test_ops_attention_cp import CASES_2, _groups, _run_case

    groups = _groups(world, rank)
    for i, case in enumerate(CASES_2):
        if not case.fp8:
            case = dataclasses.replace(case, dtype=torch.bfloat16)
        _run_case(case, groups, seed=300 + i, dev=dev)


@needs_two_gpus
def test_usp_attention_over_nccl(tmp_path):
    run_ranks(_check_nccl, 2, tmp_path, "nccl")
