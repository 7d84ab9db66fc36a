"""turbo-cudnn: turbo backend CUDNN, flash attention on NVIDIA GPUs through cuDNN's fused attention
(the graph PyTorch's ``scaled_dot_product_attention`` runs on Hopper and newer).

Importing this package is cheap: it registers kernels and probes; nothing touches the GPU until a
kernel runs.
"""

__version__ = "0.1.0"
