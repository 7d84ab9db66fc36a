"""``WeightQuantCache``: a weight's FP8/FP4 copies, made once per weight update and reused by every
micro-batch, recomputation and eval forward until the weight changes.

The low-precision GEMM ops (``gemm_fp8``, ``gemm_fp4``, ``grouped_gemm_fp8``, ``grouped_gemm_fp4``)
take ``weight_cache=``; ``Float8Linear`` and ``GroupedLinear`` (with an FP8 config) pass their own
cache, and ``fused_mega_moe_fp8`` (and its FP8 stages) one process-wide cache for its expert weights,
so the weight is quantized once per optimizer step rather than once per micro-batch.

**When the cache is consulted** (every condition, else ``b`` is quantized as usual):

* a :class:`WeightQuantCache` is passed as ``weight_cache`` (the explicit opt-in: the caller
  vouches that ``b`` is a weight), and no :func:`weight_cache_disabled` block is active;
* ``b`` is a plain ``torch.nn.Parameter`` (``type(b) is torch.nn.Parameter``: a leaf; not a
  :class:`QuantizedTensor`, not a tensor subclass such as a ``DTensor``, whose local data can change
  behind the Parameter);
* not while ``torch.compile`` traces (``torch.compiler.is_compiling()``: inside a compiled graph the
  weight's quantization is traced like any other op), not during CUDA-graph capture of b's device
  (a graph would keep reading the cached copies after the weight changes; the quantization is
  captured instead), and not in ``torch.inference_mode`` (inference tensors cannot be saved for a
  later backward).

**When an entry is reused** (a hit): the same Parameter object (held by a weak reference, so the
cache never keeps a weight alive; its entry and copies are dropped when the weight is freed), the
same ``weight._version`` (bumped by every in-place write to the Parameter: ``optimizer.step()``'s
updates, ``copy_`` / ``load_state_dict``), ``data_ptr``, shape, strides, dtype and device, the same
quantization scheme (granularity, block size, forward and backward dtypes, FP4 options: resolved
from the config's current fields on every call, so a config replaced or changed after construction
misses), the same layout of the op, and the same *update generation*. The generation is bumped
after every ``torch.optim`` optimizer step (a global post-step hook: fused optimizers such as
``Adam(fused=True)`` update parameters without bumping ``_version``, and Megatron-style optimizers
copy master weights in through ``.data``) and by :func:`invalidate_weight_caches`. The entry must
also hold every copy the call needs (the forward copy, and the column copy when the backward needs
it); otherwise all of them are made again.

**What is not seen**: a write through ``weight.data`` (``weight.data.copy_(w)``, ``weight.data.mul_(s)``)
outside an optimizer step. PyTorch gives ``.data`` its own version counter, so such a write leaves
``weight._version`` unchanged and the cache would return the old copies. Write under
``torch.no_grad()`` to the Parameter itself (``weight.copy_(w)``), or call
:func:`invalidate_weight_caches` (or the cache's ``clear()``) after writing through ``.data``.

**Gradients are unchanged**: cached copies are the outputs of the same quantization calls (bit for
bit), never written in place; an entry is replaced, not updated. A forward saves the copies it used
for its backward, so the backward of a micro-batch multiplies by exactly the quantized weight its
forward used, even when the weight changes in between; a recomputed forward (activation
checkpointing) quantizes the weight as it is at recomputation, as it would without the cache.

**Memory**: an entry holds the weight's low-precision copies (for a bf16 weight with a column copy,
about the weight's size) from one forward to the next miss. ``clear()`` frees them; deleting the
module that owns the cache frees them too. Entries are made only in eager calls outside CUDA-graph
capture (the rule of ``turbo_core.graph_pool``: no allocation made in a graph's memory pool is kept
past its call), so no copy ever lives in a graph's pool.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch

__all__ = ["WeightQuantCache", "invalidate_weight_caches", "weight_cache_disabled"]

_generation = 0  # bumped after every torch.optim step and by invalidate_weight_caches()
_disabled = 0  # depth of weight_cache_disabled() blocks (process-wide)
_hook: object = None  # torch.optim's global post-step hook handle, registered by the first cache


def _bump(*_args: object) -> None:
    global _generation
    _generation += 1


def _install_optimizer_hook() -> None:
    global _hook
    if _hook is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _hook = register_optimizer_step_post_hook(_bump)


def invalidate_weight_caches() -> None:
    """Make every entry of every :class:`WeightQuantCache` stale: the next use of each weight
    quantizes it again (its old copies are freed then, or by ``clear()``). Call it after writing
    weights through ``.data`` outside an optimizer step (see the module docstring)."""
    _bump()


@contextlib.contextmanager
def weight_cache_disabled() -> Iterator[None]:
    """Inside the block every op quantizes its weight as if no cache were passed (process-wide,
    nestable); entries are neither read nor stored."""
    global _disabled
    _disabled += 1
    try:
        yield
    finally:
        _disabled -= 1


class _Entry(NamedTuple):
    ref: weakref.ref
    key: tuple
    dims: frozenset
    quantized: dict


class WeightQuantCache:
    """The quantized copies of the weights one owner (a module) multiplies by; see the module
    docstring for when they are reused.

    Attributes:
        hits, misses: counts of calls that reused an entry / quantized the weight (and stored it).
    """

    def __init__(self) -> None:
        _install_optimizer_hook()
        self._entries: dict[int, _Entry] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"WeightQuantCache(entries={len(self)}, hits={self.hits}, misses={self.misses})"

    # A copied or pickled owner starts with an empty cache: entries belong to the original weights.
    def __deepcopy__(self, memo: dict) -> WeightQuantCache:
        return type(self)()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def clear(self) -> None:
        """Drop every entry (their copies are freed unless a pending backward still holds them)."""
        self._entries.clear()

    def get(self, weight: torch.Tensor, tag: object, need: set[int],
            make: Callable[[set[int]], dict]) -> dict:
        """The quantizations of ``weight`` for the stored dims ``need``: an entry's when it is
        valid for ``weight`` in its current state and ``tag`` (the scheme and layout of the op) and
        holds ``need``, else ``make(need)``, stored (the stale entry is dropped first, so its copies
        are freed before the new ones are made). The caller checks :func:`usable` first."""
        key = (tag, weight._version, weight.data_ptr(), tuple(weight.shape), weight.stride(), weight.dtype,
               weight.device, _generation)
        wid = id(weight)
        entry = self._entries.get(wid)
        if entry is not None and entry.ref() is weight and entry.key == key and need <= entry.dims:
            self.hits += 1
            return entry.quantized
        self._entries.pop(wid, None)
        self.misses += 1
        quantized = make(need)
        dims = frozenset({0, 1}) if None in quantized else frozenset(quantized)
        self._entries[wid] = _Entry(weakref.ref(weight, _dropper(self, wid)), key, dims, quantized)
        return quantized


def _dropper(cache: WeightQuantCache, wid: int) -> Callable[[weakref.ref], None]:
    """The weak reference's callback: remove the freed weight's entry (if it is still that
    weight's). It holds the cache weakly, so a live weight never keeps its cache alive."""
    cache_ref = weakref.ref(cache)

    def drop(ref: weakref.ref) -> None:
        owner = cache_ref()
        if owner is not None:
            entry = owner._entries.get(wid)
            if entry is not None and entry.ref is ref:
                del owner._entries[wid]

    return drop


def check_cache(weight_cache: object) -> WeightQuantCache | None:
    if weight_cache is not None and not isinstance(weight_cache, WeightQuantCache):
        raise TypeError(f"weight_cache: expected a WeightQuantCache or None, got {type(weight_cache).__name__}")
    return weight_cache


def usable(weight_cache: WeightQuantCache | None, weight: object) -> bool:
    """Whether ``weight_cache`` is consulted for ``weight`` (the rule of the module docstring)."""
    if weight_cache is None or _disabled or type(weight) is not torch.nn.Parameter:
        return False
    if torch.compiler.is_compiling() or torch.is_inference_mode_enabled() or weight.is_inference():
        return False
    return not (weight.is_cuda and torch.cuda.is_current_stream_capturing())


def quantize_weight(weight_cache: WeightQuantCache | None, weight: torch.Tensor, tag: object, need: set[int],
                    make: Callable[[set[int]], dict],
                    uncached: Callable[[set[int]], dict] | None = None) -> dict:
    """``make(need)``, through ``weight_cache`` when :func:`usable`; otherwise ``uncached(need)``
    (default ``make``): a cached copy may be laid out for reuse where a per-call one is not."""
    if usable(weight_cache, weight):
        return weight_cache.get(weight, tag, need, make)
    return (uncached or make)(need)
