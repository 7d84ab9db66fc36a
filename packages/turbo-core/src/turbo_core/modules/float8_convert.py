"""``convert_to_float8``: turn a model's linear layers into ``Float8Linear``, with a recipe per layer."""

from __future__ import annotations

from collections.abc import Callable

import torch

from turbo_core.low_precision import Float8QuantConfig
from turbo_core.modules.float8_linear import Float8Linear
from turbo_core.modules.linear import Linear
from turbo_core.ops.gemm_fp8 import fp8_config

__all__ = ["FP8_DIM_MULTIPLE", "convert_to_float8", "dims_fit_fp8"]

#: Both dims of a layer the default rule converts are multiples of this.
FP8_DIM_MULTIPLE = 16

#: The classes converted: exactly these (a subclass's own ``forward`` would be lost in the swap).
_CONVERTIBLE = (torch.nn.Linear, Linear)


def dims_fit_fp8(module: torch.nn.Linear, fqn: str = "") -> bool:
    """The default rule: ``in_features`` and ``out_features`` are multiples of 16.

    A Linear's three GEMMs contract along ``in_features`` (forward), ``out_features`` (dgrad) and the
    tokens (wgrad). FP8 tensor-core GEMMs read 16-byte rows: Hopper's TMA copies and cuBLASLt /
    hipBLASLt FP8 need leading dims that are multiples of 16 one-byte elements, and turbo's Triton
    FP8 GEMM takes its TMA and Gluon paths only then. A layer with other dims runs on slower paths
    where FP8 does not pay for its quantization, and such layers are small ones whose accuracy
    matters most (routers over a few experts, heads over an odd vocabulary)."""
    return module.in_features % FP8_DIM_MULTIPLE == 0 and module.out_features % FP8_DIM_MULTIPLE == 0


def _check_callable(name: str, fn: object) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name}: expected a callable(module, fqn) or None, got {type(fn).__name__}")


def convert_to_float8(model: torch.nn.Module, config: Float8QuantConfig | None = None, *,
                      module_filter_fn: Callable[[torch.nn.Module, str], bool] | None = None,
                      config_fn: Callable[[torch.nn.Module, str], Float8QuantConfig | None] | None = None
                      ) -> torch.nn.Module:
    """Turn every selected ``torch.nn.Linear`` (and turbo's ``Linear``) of ``model`` into a
    :class:`Float8Linear`, in place, each with its own recipe.

    A layer is converted when its class is exactly ``torch.nn.Linear`` or
    ``turbo_core.modules.Linear`` (subclasses keep their own ``forward``, which a class swap would
    drop; ``Float8Linear`` layers stay as they are) and ``module_filter_fn(layer, fqn)`` is true.
    The swap keeps the layer object, its parameters (same tensors: optimizer state and tied weights
    stay valid), buffers, hooks and place in its parent; the state_dict is unchanged. ``model``
    itself is converted when it is such a layer.

    Args:
        model: the module to convert (in place).
        config: the recipe of every converted layer that ``config_fn`` does not choose;
            ``None`` means TENSORWISE E4M3.
        module_filter_fn: ``(layer, fqn) -> bool``, ``fqn`` being the layer's name in
            ``model.named_modules()`` (``""`` for ``model``). ``None`` means :func:`dims_fit_fp8`
            (both dims multiples of 16, the reason is there); a function given replaces that rule
            (call ``dims_fit_fp8`` inside it to keep it).
        config_fn: ``(layer, fqn) -> Float8QuantConfig | None``: the recipe of each converted
            layer; ``None`` (the function, or what it returns for a layer) means ``config``.

    Returns:
        ``model``. Each converted layer computes ``gemm_fp8`` with its recipe and owns a weight
        cache (see :class:`Float8Linear`).

    Raises:
        TypeError naming the argument: ``model`` not a module, ``config`` not a
        ``Float8QuantConfig``, a filter or ``config_fn`` not callable, a filter returning a
        non-bool, or ``config_fn`` returning something other than a config or None (with the
        layer's fqn). Nothing is converted when an argument is wrong; a ``config_fn`` error leaves
        the layers before it converted.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    default = fp8_config(config)
    _check_callable("module_filter_fn", module_filter_fn)
    _check_callable("config_fn", config_fn)
    keep = dims_fit_fp8 if module_filter_fn is None else module_filter_fn
    chosen = []
    for fqn, layer in model.named_modules():
        if type(layer) not in _CONVERTIBLE:
            continue
        take = keep(layer, fqn)
        if not isinstance(take, bool):
            raise TypeError(f"module_filter_fn: expected a bool for {fqn!r}, got {type(take).__name__}")
        if take:
            chosen.append((fqn, layer))
    for fqn, layer in chosen:
        cfg = None if config_fn is None else config_fn(layer, fqn)
        if cfg is not None and not isinstance(cfg, Float8QuantConfig):
            raise TypeError(f"config_fn: expected a Float8QuantConfig or None for {fqn!r}, got {type(cfg).__name__}")
        Float8Linear.from_float(layer, config=default if cfg is None else cfg, inplace=True)
    return model
