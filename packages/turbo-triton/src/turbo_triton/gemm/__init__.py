"""Dense GEMM (bf16/fp16/fp32) in Triton: a persistent TMA kernel on Hopper and a portable
persistent kernel (AMD, other NVIDIA, the CPU interpreter)."""
