"""Grouped FP8 GEMM (mixture-of-experts) in Triton: the forward/dgrad kernel and the variable-K wgrad
kernel for TENSORWISE, ROWWISE and BLOCKWISE scaling (E4M3, E5M2, HYBRID), persistent and sync-free
like the bf16 grouped GEMM, with a TMA path on Hopper and a portable pointer path."""
