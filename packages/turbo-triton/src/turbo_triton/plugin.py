"""Plugin module of the TRITON backend (entry point ``triton`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_triton import __version__


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="TRITON",
        package="turbo-triton",
        version=__version__,
        platforms=("cuda", "rocm", "cpu"),
        archs=None,
        probe="turbo_triton.probe:probe",
        description="Triton kernels (portable: AMD and NVIDIA; the CPU through TRITON_INTERPRET=1)",
        notes="dense gemm, FP8 gemm (tensorwise, rowwise, blockwise, emulated MX), grouped gemm and grouped FP8 "
              "gemm (tensorwise, rowwise, blockwise; forward/dgrad and the variable-K wgrad), flash attention "
              "(forward and backward: dense and varlen, causal, window, GQA, sink, head dims up to 256; FP8 E4M3 "
              "with 64-row block scales, dense), sparse MLA attention (DeepSeek-V3.2 top-k over a shared latent, "
              "forward and backward), rmsnorm (and its FP8-output forward, ROWWISE/BLOCKWISE/MX) "
              "and swiglu/geglu (forward and backward), cross entropy (forward and backward, ignore_index, label "
              "smoothing), FP8 quantize/dequantize (every granularity, fused row+column "
              "with_trans), MXFP4 quantize/with_trans/dequantize, grouped FP8 (BLOCKWISE, MX) and MXFP4 "
              "quantize/with_trans/dequantize, the MoE router (group-limited top-k, forward and "
              "backward) and MoE permutation (preprocess, permute, unpermute forward and backward, "
              "indices_to_multihot, tokens_per_expert_to_mask) are implemented; grouped MX FP8 GEMM is not "
              "implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("gemm", "TRITON", "turbo_triton.gemm.launch:gemm",
                    check="turbo_triton.gemm.launch:can_handle", variants=("bf16", "fp16", "fp32")))
    register(Kernel("gemm_fp8", "TRITON", "turbo_triton.gemm_fp8.launch:gemm_fp8",
                    check="turbo_triton.gemm_fp8.launch:can_handle",
                    variants=("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "hybrid")))
    grouped_fp8 = ("TENSORWISE", "ROWWISE", "BLOCKWISE", "e4m3", "e5m2", "hybrid", "fnuz")
    register(Kernel("grouped_gemm_fp8", "TRITON", "turbo_triton.grouped_gemm_fp8.launch:grouped_gemm_fp8",
                    check="turbo_triton.grouped_gemm_fp8.launch:can_handle", variants=grouped_fp8))
    register(Kernel("grouped_gemm_fp8_variable_k", "TRITON",
                    "turbo_triton.grouped_gemm_fp8.launch:grouped_gemm_fp8_variable_k",
                    check="turbo_triton.grouped_gemm_fp8.launch:can_handle_variable_k", variants=grouped_fp8))
    register(Kernel("grouped_gemm", "TRITON", "turbo_triton.grouped_gemm.launch:grouped_gemm",
                    check="turbo_triton.grouped_gemm.launch:can_handle", variants=("bf16", "fp16", "fp32")))
    register(Kernel("grouped_gemm_variable_k", "TRITON", "turbo_triton.grouped_gemm.launch:grouped_gemm_variable_k",
                    check="turbo_triton.grouped_gemm.launch:can_handle_variable_k",
                    variants=("bf16", "fp16", "fp32")))
    fp8_quant = ("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "fnuz")
    register(Kernel("quantize_fp8", "TRITON", "turbo_triton.quantization.quantize:quantize_fp8",
                    check="turbo_triton.quantization.quantize:can_handle", variants=fp8_quant))
    register(Kernel("quantize_fp8_with_trans", "TRITON",
                    "turbo_triton.quantization.quantize_with_trans:quantize_fp8_with_trans",
                    check="turbo_triton.quantization.quantize_with_trans:can_handle",
                    variants=("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "fnuz")))
    register(Kernel("dequantize_fp8", "TRITON", "turbo_triton.quantization.dequantize:dequantize_fp8",
                    check="turbo_triton.quantization.dequantize:can_handle", variants=fp8_quant))
    register(Kernel("moe_permute_preprocess", "TRITON", "turbo_triton.moe.permute_preprocess:moe_permute_preprocess",
                    check="turbo_triton.moe.permute_preprocess:can_handle", variants=("routing_map", "topk_indices")))
    register(Kernel("moe_permute", "TRITON", "turbo_triton.moe.permute:moe_permute",
                    check="turbo_triton.moe.permute:can_handle", variants=("bf16", "fp16", "fp32", "fp8")))
    register(Kernel("moe_unpermute", "TRITON", "turbo_triton.moe.unpermute:moe_unpermute",
                    check="turbo_triton.moe.unpermute:can_handle", variants=("bf16", "fp16", "fp32")))
    register(Kernel("moe_unpermute_bwd", "TRITON", "turbo_triton.moe.unpermute:moe_unpermute_bwd",
                    check="turbo_triton.moe.unpermute:can_handle_bwd", variants=("bf16", "fp16", "fp32")))
    for name in ("indices_to_multihot", "indices_to_multihot_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.moe.multihot:{name}",
                        check="turbo_triton.moe.multihot:can_handle", variants=("bf16", "fp16", "fp32")))
    register(Kernel("tokens_per_expert_to_mask", "TRITON", "turbo_triton.moe.multihot:tokens_per_expert_to_mask",
                    check="turbo_triton.moe.multihot:can_handle_tpe_mask", variants=("int32", "int64")))
    attention = ("fp32", "fp16", "bf16", "dense", "varlen", "gqa", "causal", "window", "sink", "deterministic")
    for name in ("attention_fwd", "attention_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.attention.launch:{name}",
                        check="turbo_triton.attention.launch:can_handle", variants=attention))
    fp8_attention = ("e4m3", "blockwise-64", "dense", "gqa", "causal", "window", "deterministic")
    for name in ("attention_fp8_fwd", "attention_fp8_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.attention.fp8_launch:{name}",
                        check="turbo_triton.attention.fp8_launch:can_handle", variants=fp8_attention))
    for name in ("sparse_mla_fwd", "sparse_mla_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.sparse_mla.launch:{name}",
                        check="turbo_triton.sparse_mla.launch:can_handle", variants=("fp32", "fp16", "bf16", "sink"),
                        deterministic=name == "sparse_mla_fwd"))
    router = ("bf16", "fp16", "fp32", "sigmoid", "softmax")
    register(Kernel("moe_routing_fwd", "TRITON", "turbo_triton.moe.routing:moe_routing_fwd",
                    check="turbo_triton.moe.routing:can_handle", variants=router))
    register(Kernel("moe_routing_bwd", "TRITON", "turbo_triton.moe.routing:moe_routing_bwd",
                    check="turbo_triton.moe.routing:can_handle_bwd", variants=router))
    fp4 = ("fp4", "MX_BLOCKWISE")
    register(Kernel("quantize_fp4", "TRITON", "turbo_triton.quantization.fp4:quantize_fp4",
                    check="turbo_triton.quantization.fp4:can_handle", variants=fp4))
    register(Kernel("quantize_fp4_with_trans", "TRITON", "turbo_triton.quantization.fp4:quantize_fp4_with_trans",
                    check="turbo_triton.quantization.fp4:can_handle_with_trans", variants=fp4))
    register(Kernel("dequantize_fp4", "TRITON", "turbo_triton.quantization.fp4:dequantize_fp4",
                    check="turbo_triton.quantization.fp4:can_handle_dequantize", variants=fp4))
    grouped_quant = ("BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "fnuz")
    register(Kernel("grouped_quantize_fp8", "TRITON", "turbo_triton.quantization.grouped:grouped_quantize_fp8",
                    check="turbo_triton.quantization.grouped:can_handle_quantize_fp8", variants=grouped_quant))
    register(Kernel("grouped_quantize_fp8_with_trans", "TRITON",
                    "turbo_triton.quantization.grouped:grouped_quantize_fp8_with_trans",
                    check="turbo_triton.quantization.grouped:can_handle_quantize_fp8_with_trans",
                    variants=grouped_quant))
    register(Kernel("grouped_dequantize_fp8", "TRITON", "turbo_triton.quantization.grouped:grouped_dequantize_fp8",
                    check="turbo_triton.quantization.grouped:can_handle_dequantize_fp8", variants=grouped_quant))
    register(Kernel("grouped_quantize_fp4", "TRITON", "turbo_triton.quantization.grouped:grouped_quantize_fp4",
                    check="turbo_triton.quantization.grouped:can_handle_quantize_fp4", variants=fp4))
    register(Kernel("grouped_quantize_fp4_with_trans", "TRITON",
                    "turbo_triton.quantization.grouped:grouped_quantize_fp4_with_trans",
                    check="turbo_triton.quantization.grouped:can_handle_quantize_fp4_with_trans", variants=fp4))
    register(Kernel("grouped_dequantize_fp4", "TRITON", "turbo_triton.quantization.grouped:grouped_dequantize_fp4",
                    check="turbo_triton.quantization.grouped:can_handle_dequantize_fp4", variants=fp4))
    for name in ("rmsnorm_fwd", "rmsnorm_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.normalization.launch:{name}",
                        check="turbo_triton.normalization.launch:can_handle", variants=("bf16", "fp16", "fp32")))
    register(Kernel("rmsnorm_fwd_fp8", "TRITON", "turbo_triton.normalization.fp8_launch:rmsnorm_fwd_fp8",
                    check="turbo_triton.normalization.fp8_launch:can_handle",
                    variants=("bf16", "fp16", "fp32", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    for name in ("swiglu_fwd", "swiglu_bwd", "geglu_fwd", "geglu_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.activation.launch:{name}",
                        check="turbo_triton.activation.launch:can_handle", variants=("bf16", "fp16", "fp32")))
    for name in ("swiglu_fwd_fp8", "geglu_fwd_fp8"):
        register(Kernel(name, "TRITON", f"turbo_triton.activation.fp8_launch:{name}",
                        check="turbo_triton.activation.fp8_launch:can_handle",
                        variants=("bf16", "fp16", "fp32", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    for name in ("cross_entropy_fwd", "cross_entropy_bwd"):
        register(Kernel(name, "TRITON", f"turbo_triton.loss.launch:{name}",
                        check="turbo_triton.loss.launch:can_handle", variants=("bf16", "fp16", "fp32")))
