"""``RMSNorm``: an ``nn.Module`` over turbo's ``rmsnorm`` (Primus-Turbo's constructor)."""

from __future__ import annotations

import numbers

import torch

from turbo_core.dispatch.specs.validate import require_eps
from turbo_core.ops.normalization import rmsnorm

__all__ = ["RMSNorm"]


def _hidden_size(normalized_shape: object) -> int:
    if isinstance(normalized_shape, numbers.Integral) and not isinstance(normalized_shape, bool):
        size = int(normalized_shape)
    elif isinstance(normalized_shape, (tuple, list, torch.Size)) and len(normalized_shape) == 1 \
            and isinstance(normalized_shape[0], numbers.Integral) and not isinstance(normalized_shape[0], bool):
        size = int(normalized_shape[0])
    else:
        raise ValueError(
            "normalized_shape: expected an int or a 1-element tuple (turbo's RMSNorm normalizes over the"
            f" last dim only), got {normalized_shape!r}"
        )
    if size < 1:
        raise ValueError(f"normalized_shape: expected a positive size, got {normalized_shape!r}")
    return size


class RMSNorm(torch.nn.Module):
    """``y = x * rsqrt(mean(x^2, last dim) + eps) * g`` with ``g = weight``, or ``1 + weight`` when
    ``zero_centered_gamma``, or 1 without ``elementwise_affine``.

    Args:
        normalized_shape: H, an int or a 1-element tuple (the last dim only).
        eps: ``None`` means ``1e-6`` (Primus-Turbo's default; ``torch.nn.RMSNorm`` takes
            ``finfo(dtype).eps`` instead).
        elementwise_affine: learn ``weight [H]`` (without it the norm has no parameter, and the op
            runs with ``gamma=None``).
        zero_centered_gamma: ``weight`` starts at zeros and the effective gain is ``1 + weight``.
        device, dtype: of ``weight``.

    ``x`` is ``[..., H]``, fp16/bf16/fp32; the output has x's shape and dtype (see
    :func:`turbo_core.ops.rmsnorm`). The state_dict is ``torch.nn.RMSNorm``'s (``weight``), so
    checkpoints load either way; with ``zero_centered_gamma`` the stored values mean ``1 + weight``.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine", "zero_centered_gamma"]

    def __init__(self, normalized_shape: int | tuple[int], eps: float | None = None,
                 elementwise_affine: bool = True, zero_centered_gamma: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        hidden = _hidden_size(normalized_shape)
        eps = 1e-6 if eps is None else eps
        require_eps(eps)
        self.normalized_shape = (hidden,)
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        if self.elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            with torch.no_grad():
                self.weight.fill_(0.0 if self.zero_centered_gamma else 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != self.normalized_shape[0]:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x: expected last dim {self.normalized_shape[0]}, got {shape}")
        return rmsnorm(x, self.weight, self.eps, self.zero_centered_gamma)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine},"
                f" zero_centered_gamma={self.zero_centered_gamma}")
