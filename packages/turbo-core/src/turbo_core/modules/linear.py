"""``Linear``: ``torch.nn.Linear`` whose matmul is turbo's ``gemm``."""

from __future__ import annotations

import torch

from turbo_core.ops.gemm import gemm

__all__ = ["Linear"]


class Linear(torch.nn.Linear):
    """``y = x @ W^T + bias`` with ``W: [out_features, in_features]`` (the NT layout).

    Same constructor, initialisation and state_dict as ``torch.nn.Linear``. ``x`` may have any
    number of leading dims; they are flattened to ``[T, in_features]`` for the GEMM. The output
    dtype is the input's. A weight carrying ``main_grad`` gets Megatron's fused wgrad accumulation.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dim {self.in_features}, got shape {tuple(x.shape)}")
        x2d = x.reshape(-1, self.in_features)
        pattern = "megatron" if hasattr(self.weight, "main_grad") else None
        y = gemm(x2d, self.weight, trans_a=False, trans_b=True, out_dtype=x.dtype,
                 fuse_bgrad_accum_pattern=pattern)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)
