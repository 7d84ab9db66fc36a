"""Sparse MLA attention on Triton (DeepSeek-V3.2's top-k attention over one shared latent): the
kernels (``kernels``) and the launchers the plugin registers (``launch``)."""
