"""Cross entropy (``cross_entropy_fwd``, ``cross_entropy_bwd``) in Triton: one program per row walking
the vocabulary in chunks, fp32 math; the logits are read once forward and once backward, and the
gradient is written once."""
