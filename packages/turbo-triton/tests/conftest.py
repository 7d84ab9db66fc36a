"""turbo-triton's tests run the real kernels on the CPU through Triton's interpreter."""

import os

# Set before triton is imported anywhere in this process (and inherited by subprocesses).
os.environ.setdefault("TRITON_INTERPRET", "1")
