"""The shrunk examples that the property tests (``test_properties_triton_gpu.py``) found on the GPU,
each checked on its own with the property's own oracle, repeated, and with the launcher's outputs
poisoned (``poisoned_empty``: an element no program writes shows up). Run with
``TRITON_INTERPRET=0 pytest --turbo-only=gpu``; ``gpu_support`` says why.

Each case is the exact example hypothesis reported. The same cases run under the CPU interpreter in
``test_property_regressions_triton.py`` (turbo-core's ``test_property_regressions.py`` holds the ones
that concern the reference)."""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, poisoned_empty

from turbo_core.testing.properties import activation_fp8, normalization, quantization
from turbo_core.testing.properties.harness import Target

pytestmark = [pytest.mark.gpu, COMPILED]

FP8 = torch.float8_e4m3fn
#: Calls per case: a flaky failure (one that shows on the first call of a fresh allocation) repeats.
REPEATS = 20

CASES = {
    # q of the fused SwiGLU -> MX FP8 against quantize_fp8 of swiglu_fwd's y: 13 rows of width 1
    # (one block, padded to 128); hypothesis saw it fail on a first call only
    "swiglu_fwd_fp8 MX 13x1": (
        "swiglu_fwd_fp8", activation_fp8._check("swiglu"),
        activation_fp8.GluFp8Case(t=13, h=1, dtype=torch.bfloat16, masked=False, scale=1.0,
                                  granularity="MX_BLOCKWISE", block_size=32, fp8=FP8, store_y=False, seed=1)),
    # scale_inv of the fused RMSNorm -> ROWWISE FP8 against quantize_fp8 of rmsnorm_fwd's y (fp32 rows of 64)
    "rmsnorm_fwd_fp8 ROWWISE 2x64 fp32": (
        "rmsnorm_fwd_fp8", normalization._check_fwd_fp8,
        normalization.NormCase(t=2, h=64, dtype=torch.float32, gamma=None, zero_centered=False, residual=False,
                               eps=1e-06, kind="normal", seed=0, granularity="ROWWISE", block_size=None, fp8=FP8,
                               store_y=False)),
    # the row copy of a grouped MX with_trans whose one group is empty (0 rows, width 1: all padding)
    "grouped_quantize_fp8_with_trans MX empty group": (
        "grouped_quantize_fp8_with_trans", quantization._check_grouped_quantize_with_trans,
        quantization.GroupedQuantCase(lens=(0,), extra=0, n=1, granularity="MX_BLOCKWISE", rowwise=False,
                                      block_size=32, dtype=FP8, in_dtype=torch.float32, index_dtype=torch.int64,
                                      kind="normal", layout="contiguous", seed=0)),
    # MXFP4 col-wise of a 1 x 1 input: a pair-kernel tile of one column cannot hold two pairs a thread
    "quantize_fp4 col 1x1": (
        "quantize_fp4", quantization._check_quantize_fp4,
        quantization.Fp4Case(shape=(1, 1), axis=-2, two_d=(False, False), sr=False, in_dtype=torch.bfloat16,
                             kind="normal", layout="contiguous", seed=0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_shrunk_property_example(name):
    primitive, check, case = CASES[name]
    target = Target("TRITON", "cuda", primitive)
    check(case, target)  # compiles
    for _ in range(REPEATS):
        with poisoned_empty():
            check(case, target)
