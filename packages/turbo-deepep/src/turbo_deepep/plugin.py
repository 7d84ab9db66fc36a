"""Plugin module of turbo-deepep (entry point ``deep_ep`` in ``turbo.backends``): two backends of
``moe_dispatch`` / ``moe_combine`` (family ``moe_dispatch_combine``).

- ``DEEP_EP_BUFFER`` (:mod:`turbo_deepep.deepep_adapter`): drives a module with DeepEP's ``Buffer``
  API (``deep_ep``, ROCm DeepEP, ``uccl.ep``) when one imports; GPU tensors, 2+ ranks. Priority 20:
  tried first where no default or setting decides.
- ``DEEP_EP`` (:mod:`turbo_deepep.all_to_all`): ``torch.distributed.all_to_all_single`` on the
  caller's group (NCCL, RCCL, gloo), any dtype, one process too. Priority 10.

A third party adds another engine (UCCL's own, MORI, ...) the same way: describe a backend, register
``moe_dispatch`` and ``moe_combine`` kernels whose handles carry its name.

Cheap to import: no kernel module, no DeepEP import here; the probes and kernels load on first use.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_deepep import __version__

_A2A = "turbo_deepep.all_to_all"
_ADAPTER = "turbo_deepep.deepep_adapter"
_DTYPES = ("bf16", "fp16", "fp32", "fp8")


@hookimpl
def turbo_backend_info():
    return [
        BackendInfo(
            name="DEEP_EP",
            package="turbo-deepep",
            version=__version__,
            platforms=("cpu", "cuda", "rocm"),
            archs=None,
            probe="turbo_deepep.probe:probe",
            description="MoE dispatch/combine over torch.distributed all_to_all_single (NCCL, RCCL, gloo)",
            notes="moe_dispatch/moe_combine: exact mode (counts exchanged once, one host sync) and num_worst_tokens "
                  "mode (fixed slots, no host sync; every rank the same token count), FP8 tokens with their "
                  "scales, any float dtype, one process too; on GPUs of one host the rows move through symmetric "
                  "memory (TURBO_DEEPEP_TRANSPORT=collective: all_to_all_single); checked on CPU/gloo with 2 "
                  "and 4 ranks; NCCL/RCCL runs are GPU-marked tests, not run here",
        ),
        BackendInfo(
            name="DEEP_EP_BUFFER",
            package="turbo-deepep",
            version=__version__,
            platforms=("cuda", "rocm"),
            archs=None,
            probe="turbo_deepep.probe:probe_buffer",
            description="MoE dispatch/combine through DeepEP's Buffer (deep_ep, ROCm DeepEP, uccl.ep) when installed",
            notes="normal-mode dispatch/combine (bf16, or fp8 e4m3 with 1x128 scales), num_worst_tokens within "
                  "one node; argument translation checked on CPU with a fake Buffer; never run against a real "
                  "DeepEP yet",
        ),
    ]


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("moe_dispatch", "DEEP_EP_BUFFER", f"{_ADAPTER}:moe_dispatch", check=f"{_ADAPTER}:can_handle_dispatch",
                    variants=("bf16", "fp8"), autotune=False, priority=20))
    register(Kernel("moe_combine", "DEEP_EP_BUFFER", f"{_ADAPTER}:moe_combine", check=f"{_ADAPTER}:can_handle_combine",
                    variants=("bf16",), autotune=False, priority=20))
    register(Kernel("moe_dispatch", "DEEP_EP", f"{_A2A}.dispatch:moe_dispatch", check=f"{_A2A}.dispatch:can_handle",
                    variants=_DTYPES, autotune=False, priority=10))
    register(Kernel("moe_combine", "DEEP_EP", f"{_A2A}.combine:moe_combine", check=f"{_A2A}.combine:can_handle",
                    variants=("bf16", "fp16", "fp32"), autotune=False, priority=10))
