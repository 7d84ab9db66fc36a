"""Grouped GEMM (mixture-of-experts) in Triton: the forward/dgrad kernel over tokens packed by group
and the variable-K wgrad kernel, both persistent and sync-free (group offsets read on the device),
with a TMA path on Hopper and a portable pointer path (AMD, other NVIDIA, the CPU interpreter)."""
