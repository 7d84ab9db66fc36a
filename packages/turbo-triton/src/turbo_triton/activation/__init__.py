"""SwiGLU / GeGLU with per-token probabilities and row mask (``swiglu_fwd/bwd``, ``geglu_fwd/bwd``)
in Triton: elementwise tiles with fp32 math, portable pointer loads (AMD, NVIDIA, the interpreter)."""
