"""turbo-hipblaslt: turbo backend HIPBLASLT (one C++ source over hipBLASLt and cuBLASLt).

Importing this package is cheap: nothing is loaded or compiled until a kernel runs. Besides the
kernels it registers, its own API lives in :mod:`turbo_hipblaslt.api`: ``gemm`` and ``linear`` (GEMM
with the library's bias/GELU epilogues) and ``capabilities`` (what the loaded library supports).
"""

__version__ = "0.1.0"
