"""RMSNorm (``rmsnorm_fwd`` with the fused residual add, ``rmsnorm_bwd``) in Triton: row kernels
with fp32 math, portable pointer loads (AMD, NVIDIA, the CPU interpreter)."""
