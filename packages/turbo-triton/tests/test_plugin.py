"""The TRITON plugin: discovered through its entry point, honest about availability, cheap to import."""

import pytest
import torch

import turbo_triton
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("TRITON")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-triton"
    assert row["version"] == turbo_triton.__version__
    assert row["plugin"] == "triton"  # the installed entry point, not TURBO_PLUGINS


# Exactly the primitives with a kernel in this package; the listing must not advertise others.
QUANT = {"quantize_fp8", "quantize_fp8_with_trans", "dequantize_fp8"}
MOE = {"moe_permute_preprocess", "moe_permute", "moe_unpermute", "moe_unpermute_bwd", "indices_to_multihot",
       "indices_to_multihot_bwd", "tokens_per_expert_to_mask", "moe_routing_fwd", "moe_routing_bwd"}
FP4 = {"quantize_fp4", "quantize_fp4_with_trans", "dequantize_fp4"}
GROUPED_QUANT = {"grouped_quantize_fp8", "grouped_quantize_fp8_with_trans", "grouped_dequantize_fp8"}
GROUPED_FP4 = {"grouped_quantize_fp4", "grouped_quantize_fp4_with_trans", "grouped_dequantize_fp4"}
ATTENTION = {"attention_fwd", "attention_bwd"}
FP8_ATTENTION = {"attention_fp8_fwd", "attention_fp8_bwd"}
SPARSE_MLA = {"sparse_mla_fwd", "sparse_mla_bwd"}
# Producers whose output comes out quantized to FP8 (the norm, the GLUs).
PRODUCER_FP8 = {"rmsnorm_fwd_fp8", "swiglu_fwd_fp8", "geglu_fwd_fp8"}
LOSS = {"cross_entropy_fwd", "cross_entropy_bwd"}
SERVED = QUANT | FP4 | GROUPED_QUANT | GROUPED_FP4 | MOE | ATTENTION | FP8_ATTENTION | SPARSE_MLA | PRODUCER_FP8 | LOSS | {"gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8", "grouped_gemm_fp8_variable_k", "grouped_gemm_variable_k", "rmsnorm_fwd", "rmsnorm_bwd",
          "swiglu_fwd", "swiglu_bwd", "geglu_fwd", "geglu_bwd"}


def test_registers_only_what_it_can_run(row):
    assert set(row["primitives"]) == SERVED
    for name in (SERVED - {"gemm_fp8", "grouped_gemm_fp8", "grouped_gemm_fp8_variable_k"} - QUANT - FP4 - GROUPED_QUANT
                 - GROUPED_FP4 - MOE - ATTENTION - FP8_ATTENTION - SPARSE_MLA - PRODUCER_FP8):
        assert row["primitives"][name]["variants"] == ["bf16", "fp16", "fp32"]
    for name in SPARSE_MLA:
        assert row["primitives"][name]["variants"] == ["fp32", "fp16", "bf16", "sink"]
    for name in PRODUCER_FP8:
        assert row["primitives"][name]["variants"] == ["bf16", "fp16", "fp32", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"]
    assert row["primitives"]["gemm_fp8"]["variants"] == ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE",
                                                         "e4m3", "e5m2", "hybrid"]
    for name in ("grouped_gemm_fp8", "grouped_gemm_fp8_variable_k"):
        assert row["primitives"][name]["variants"] == ["TENSORWISE", "ROWWISE", "BLOCKWISE", "e4m3", "e5m2",
                                                       "hybrid", "fnuz"]
    for name in FP8_ATTENTION:
        assert row["primitives"][name]["variants"] == ["e4m3", "blockwise-64", "dense", "gqa", "causal", "window",
                                                       "deterministic"]
    for name in ATTENTION:
        assert row["primitives"][name]["variants"] == ["fp32", "fp16", "bf16", "dense", "varlen", "gqa", "causal",
                                                       "window", "sink", "deterministic"]
    for name in ("quantize_fp8", "dequantize_fp8"):
        assert row["primitives"][name]["variants"] == ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE",
                                                       "e4m3", "e5m2", "fnuz"]
    assert row["primitives"]["quantize_fp8_with_trans"]["variants"] == ["ROWWISE", "BLOCKWISE", "MX_BLOCKWISE",
                                                                        "e4m3", "e5m2", "fnuz"]
    for name in GROUPED_QUANT:
        assert row["primitives"][name]["variants"] == ["BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "fnuz"]
    for name in FP4 | GROUPED_FP4:
        assert row["primitives"][name]["variants"] == ["fp4", "MX_BLOCKWISE"]
    assert row["primitives"]["moe_permute_preprocess"]["variants"] == ["routing_map", "topk_indices"]
    assert row["primitives"]["moe_permute"]["variants"] == ["bf16", "fp16", "fp32", "fp8"]
    for name in ("moe_unpermute", "moe_unpermute_bwd", "indices_to_multihot", "indices_to_multihot_bwd"):
        assert row["primitives"][name]["variants"] == ["bf16", "fp16", "fp32"]
    assert row["primitives"]["tokens_per_expert_to_mask"]["variants"] == ["int32", "int64"]
    assert "not implemented yet" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_triton" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the no-GPU reason does not apply")
def test_no_gpu_reason_and_interpreter_mode():
    row = backend_row("TRITON", env={"TRITON_INTERPRET": "0"})
    assert row["available"] is False
    assert row["reason"].startswith("no GPU") and "TRITON_INTERPRET=1" in row["reason"]
    assert backend_row("TRITON", env={"TRITON_INTERPRET": "1"})["available"] is True
