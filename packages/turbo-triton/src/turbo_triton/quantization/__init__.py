"""FP8 quantization (``quantize_fp8``, ``quantize_fp8_with_trans``, ``dequantize_fp8``) in Triton:
TENSORWISE, ROWWISE, BLOCKWISE (1-D blocks along any axis, 2-D tiles) and MX_BLOCKWISE (E8M0),
bit-identical to the TORCH reference. One launcher module per primitive; kernels in
``kernels.py``, the element/scale arithmetic they share in ``numerics.py``."""
