"""Plugin module of the CUDNN backend (entry point ``cudnn`` in ``turbo.backends``).

Cheap to import: the kernels and their capability checks are named lazily (``"module:function"``)
and the probe reads PyTorch's build flags only.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_cudnn import __version__

NOTES = ("cuDNN's fused flash attention through PyTorch's own cuDNN SDPA operators: fp16/bf16, dense, "
         "causal (s_q == s_kv), GQA/MQA, forward and backward; the shapes PyTorch's can_use_cudnn_attention "
         "admits. Varlen, sinks, windows, dropout and deterministic backward go to the next backend.")


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="CUDNN",
        package="turbo-cudnn",
        version=__version__,
        platforms=("cuda",),
        probe="turbo_cudnn.probe:probe",
        description="cuDNN fused attention through PyTorch (NVIDIA GPUs)",
        notes=NOTES,
    )


@hookimpl
def turbo_register_kernels(register):
    variants = ("fp16", "bf16", "dense", "gqa", "causal")
    register(Kernel("attention_fwd", "CUDNN", "turbo_cudnn.attention:attention_fwd",
                    check="turbo_cudnn.attention:can_handle", variants=variants))
    # cuDNN accumulates dq across key blocks in an order it does not promise to repeat.
    register(Kernel("attention_bwd", "CUDNN", "turbo_cudnn.attention:attention_bwd",
                    check="turbo_cudnn.attention:can_handle", variants=variants, deterministic=False))
