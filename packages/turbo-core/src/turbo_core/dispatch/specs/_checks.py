"""Small validators shared by the primitive specs; every error names the argument."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def require_tensor(name: str, value: object, *, ndim: int | tuple[int, ...] | None = None,
                   dtypes: tuple[torch.dtype, ...] | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if value.dim() not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name}: expected a {want} tensor, got shape {tuple(value.shape)}")
    if dtypes is not None and value.dtype not in dtypes:
        names = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name}: expected dtype in ({names}), got {dtype_name(value.dtype)}")
    return value


def require_same_device(**tensors: torch.Tensor | None) -> None:
    present = {k: v for k, v in tensors.items() if v is not None}
    devices = {k: v.device for k, v in present.items()}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(f"{name}: expected a tensor on {first} (like {first_name}), got {dev}")


def require_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")


def require_dtype(name: str, value: object, allowed: tuple[torch.dtype, ...]) -> None:
    if not isinstance(value, torch.dtype) or value not in allowed:
        names = ", ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{name}: expected one of ({names}), got {value!r}")
