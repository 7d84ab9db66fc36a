"""FP8 GEMM (``gemm_fp8``): TENSORWISE, ROWWISE, BLOCKWISE and emulated MX_BLOCKWISE scaling."""
