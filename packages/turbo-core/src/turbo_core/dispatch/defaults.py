"""Per-platform default backends: step 4 of the selection order.

``DEFAULTS[primitive][platform]`` is an ordered preference list; the first backend in it that is
installed, available and capable of the call is the default. The platform key is tried most
specific first: the GPU arch (``"gfx950"``, ``"sm90"``), then the kind (``"rocm"``, ``"cuda"``,
``"cpu"``), then ``"*"``. When no listed backend can serve a call, dispatch falls back to the first
capable registered backend with a one-time warning (step 5).

Primus-Turbo's defaults (hipBLASLt for dense GEMM, Triton for grouped GEMM, ...) are the model.
The reference backend TORCH is the default on the CPU only: on a GPU it serves as the fallback.
"""

from __future__ import annotations

from turbo_core.backend import BackendType as B
from turbo_core.platform import Platform

__all__ = ["DEFAULTS", "default_order"]

_CPU = {"cpu": (B.TORCH,)}
#: turbo-cudnn's backend (cuDNN through PyTorch; NVIDIA GPUs only).
_CUDNN = B("CUDNN")

DEFAULTS: dict[str, dict[str, tuple[str, ...]]] = {
    "gemm": {"rocm": (B.HIPBLASLT, B.TRITON), "cuda": (B.HIPBLASLT, B.TRITON), **_CPU},
    "gemm_fp8": {"rocm": (B.HIPBLASLT, B.TRITON), "cuda": (B.HIPBLASLT, B.TRITON), **_CPU},
    # MXFP4 GEMM is gfx950-only; Primus-Turbo defaults to AITER only for preshuffled weights, and
    # turbo-aiter preshuffles per call, so hipBLASLt leads.
    "gemm_fp4": {"gfx950": (B.HIPBLASLT, B.AITER, B.TRITON), "rocm": (B.HIPBLASLT, B.TRITON),
                 "cuda": (B.HIPBLASLT, B.TRITON), **_CPU},
    "grouped_gemm": {"rocm": (B.TRITON, B.CK, B.HIPBLASLT), "cuda": (B.TRITON,), **_CPU},
    "grouped_gemm_variable_k": {"rocm": (B.TRITON, B.CK, B.HIPBLASLT), "cuda": (B.TRITON,), **_CPU},
    "grouped_gemm_fp8": {"rocm": (B.TRITON, B.CK, B.HIPBLASLT), "cuda": (B.TRITON,), **_CPU},
    "grouped_gemm_fp8_variable_k": {"rocm": (B.TRITON, B.CK, B.HIPBLASLT), "cuda": (B.TRITON,), **_CPU},
    # attention_bwd / attention_fp8_bwd run on the forward's backend (the ops pin it); these
    # entries serve direct primitive calls. On NVIDIA GPUs cuDNN's fused attention (turbo-cudnn) leads
    # where it serves the call (the `attention` suite measures TRITON at 0.7-0.9x of it); TRITON serves
    # the rest (varlen, windows, sinks, deterministic backward).
    "attention_fwd": {"gfx950": (B.FLYDSL, B.AITER, B.TRITON), "rocm": (B.AITER, B.TRITON), "cuda": (_CUDNN, B.TRITON),
                      **_CPU},
    "attention_bwd": {"gfx950": (B.FLYDSL, B.AITER, B.TRITON), "rocm": (B.AITER, B.TRITON), "cuda": (_CUDNN, B.TRITON),
                      **_CPU},
    # FP8 attention: TRITON first on GPUs (within the FP8 SNR gate, far faster than TORCH's fp32 emulation).
    "attention_fp8_fwd": {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU},
    "attention_fp8_bwd": {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU},
    # Sparse MLA (Primus-Turbo: FLYDSL on gfx950, else TRITON); the backward runs on the forward's backend.
    "sparse_mla_fwd": {"gfx950": (B.FLYDSL, B.TRITON), "rocm": (B.TRITON,), "cuda": (B.TRITON,), **_CPU},
    "sparse_mla_bwd": {"gfx950": (B.FLYDSL, B.TRITON), "rocm": (B.TRITON,), "cuda": (B.TRITON,), **_CPU},
}

# Norms and GLUs: TRITON (the `norm` and `activation` suites measure it); AITER also serves the RMSNorm forward on ROCm.
DEFAULTS.update({name: {"rocm": (B.TRITON, B.AITER), "cuda": (B.TRITON,), **_CPU} for name in ("rmsnorm_fwd",)})
# The FP8-output RMSNorm: TRITON's fused kernel, then TORCH (the composition, for rows TRITON declines).
DEFAULTS["rmsnorm_fwd_fp8"] = {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU}
DEFAULTS.update({name: {"rocm": (B.TRITON,), "cuda": (B.TRITON,), **_CPU}
                 for name in ("rmsnorm_bwd", "swiglu_fwd", "swiglu_bwd", "geglu_fwd", "geglu_bwd")})
# The FP8-output GLUs: TRITON's fused kernel, then TORCH (the composition, for rows TRITON declines).
DEFAULTS.update({name: {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU}
                 for name in ("swiglu_fwd_fp8", "geglu_fwd_fp8")})
# Cross entropy: TRITON's fused row kernels (the `cross-entropy` suite measures them against eager torch,
# torch.compile and liger-kernel).
DEFAULTS.update({name: {"rocm": (B.TRITON,), "cuda": (B.TRITON,), **_CPU}
                 for name in ("cross_entropy_fwd", "cross_entropy_bwd")})

# Quantization: TRITON first on GPUs (the reference's bits, several times its speed; the `quant` suite measures it).
_QUANT = ("quantize_fp8", "quantize_fp8_with_trans", "dequantize_fp8", "grouped_quantize_fp8",
          "grouped_quantize_fp8_with_trans", "grouped_dequantize_fp8", "grouped_quantize_fp4",
          "grouped_quantize_fp4_with_trans", "grouped_dequantize_fp4")
DEFAULTS.update({name: {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU} for name in _QUANT})
# MXFP4 and the MoE router: TRITON first on GPUs (bit-exact FP4, the reference's router selections, faster).
_CHECKED = ("quantize_fp4", "quantize_fp4_with_trans", "dequantize_fp4", "moe_routing_fwd", "moe_routing_bwd")
DEFAULTS.update({name: {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU} for name in _CHECKED})

# MoE data movement: TRITON first on GPUs (bit-exact, no host sync, faster; the `moe` suite measures it).
_MOE = ("moe_permute_preprocess", "moe_permute", "moe_unpermute", "moe_unpermute_bwd", "indices_to_multihot",
        "indices_to_multihot_bwd", "tokens_per_expert_to_mask")
DEFAULTS.update({name: {"rocm": (B.TRITON, B.TORCH), "cuda": (B.TRITON, B.TORCH), **_CPU} for name in _MOE})

# MoE dispatch/combine: DeepEP's Buffer when installed, else the torch.distributed all-to-all (both
# turbo-deepep); TORCH serves one process only (it declines larger groups).
_EP = ("DEEP_EP_BUFFER", B.DEEP_EP, B.TORCH)
DEFAULTS.update({name: {"rocm": _EP, "cuda": _EP, "cpu": (B.TORCH, B.DEEP_EP)} for name in ("moe_dispatch", "moe_combine")})


def default_order(primitive: str, platform: Platform) -> tuple[str, ...]:
    table = DEFAULTS.get(primitive, _CPU)
    for key in (platform.arch, platform.kind, "*"):
        if key is not None and key in table:
            return table[key]
    return ()
