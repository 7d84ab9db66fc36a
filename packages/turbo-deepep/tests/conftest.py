"""turbo-deepep's fused-path tests run its Triton kernels on the CPU through Triton's interpreter.

Set before triton is imported anywhere in this process (and inherited by the worker processes);
not on a machine with a GPU, where the NCCL tests run the compiled kernels.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
