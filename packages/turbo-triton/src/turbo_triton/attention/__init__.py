"""Flash attention on Triton: forward (``fwd_kernel``), backward (``bwd_kernels``), tiles per
architecture (``configs``) and the launchers the plugin registers (``launch``)."""
