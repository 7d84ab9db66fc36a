"""``TurboStream``: a GPU stream that may be restricted to a subset of compute units (Primus-Turbo's
``primus_turbo.pytorch.core.TurboStream``).

``TurboStream(device, cu_masks)`` makes a stream on ``device`` and hands it to PyTorch as
``.torch_stream`` (a ``torch.cuda.Stream``), for ``with torch.cuda.stream(ts.torch_stream): ...``
and for the stream arguments of the async-TP ops.

``cu_masks``: ``None`` (every compute unit), or 32-bit words of a bit mask where bit ``i % 32`` of
word ``i // 32`` enables compute unit ``i`` (ROCm's ``hipExtStreamCreateWithCUMask`` layout; units
past the last word are disabled). Where the mask takes effect:

* ROCm: the stream is made by ``hipExtStreamCreateWithCUMask`` (through ctypes, from the HIP
  runtime that PyTorch has loaded) and wrapped as a ``torch.cuda.ExternalStream``; it is destroyed
  with ``hipStreamDestroy`` by :meth:`TurboStream.close` or when the object is collected. As in
  Primus-Turbo, work queued on it must be finished (or synchronised) before that.
* NVIDIA: CUDA streams cannot be restricted to a subset of SMs. The stream is an ordinary
  ``torch.cuda.Stream`` on every SM; a mask that leaves some SM out is ignored with a
  ``RuntimeWarning`` (results are the same, only the overlap differs).
* CPU (torch sees no GPU): there is no stream; construction raises ``RuntimeError``.

Unlike Primus-Turbo, which clamps bad mask words and replaces a malformed list by the all-units
mask, a mask that is not a list of ints in ``[0, 0xFFFFFFFF]`` with at least one bit set raises
``ValueError``.
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Sequence

import torch

__all__ = ["TurboStream"]

_WORD_MAX = 0xFFFFFFFF


def _check_device(device: torch.device | str | int | None) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(f"device: expected a torch.device, a device string, a GPU index or None, got {device!r}")
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device: expected a GPU device ('cuda', 'cuda:N' or an index), got {str(dev)!r}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    count = torch.cuda.device_count()
    if dev.index >= count:
        raise ValueError(f"device: GPU index {dev.index} out of range ({count} visible)")
    return dev


def check_cu_masks(cu_masks: Sequence[int] | None) -> tuple[int, ...] | None:
    """``cu_masks`` as a tuple of 32-bit words, or ``None``; ``ValueError`` naming the argument."""
    if cu_masks is None:
        return None
    if not isinstance(cu_masks, (list, tuple)) or not cu_masks:
        raise ValueError(f"cu_masks: expected None or a non-empty list of 32-bit ints, got {cu_masks!r}")
    for i, word in enumerate(cu_masks):
        if isinstance(word, bool) or not isinstance(word, int) or not 0 <= word <= _WORD_MAX:
            raise ValueError(f"cu_masks[{i}]: expected an int in [0, 0xFFFFFFFF], got {word!r}")
    if not any(cu_masks):
        raise ValueError("cu_masks: every bit is 0, so the stream could run on no compute unit")
    return tuple(cu_masks)


def covers(cu_masks: tuple[int, ...], num_units: int) -> bool:
    """Whether the mask enables every one of ``num_units`` compute units."""
    return all(i // 32 < len(cu_masks) and cu_masks[i // 32] >> (i % 32) & 1 for i in range(num_units))


def _hip_runtime() -> ctypes.CDLL:
    # PyTorch's ROCm build has loaded libamdhip64 already; dlopen of the same name returns it.
    return ctypes.CDLL("libamdhip64.so")


def create_masked_stream(lib: object, index: int, cu_masks: tuple[int, ...]) -> int:
    """``hipExtStreamCreateWithCUMask`` on GPU ``index`` (the current device is switched for the
    call, as the HIP runtime makes the stream on the current device); returns the stream handle."""
    handle = ctypes.c_void_p()
    words = (ctypes.c_uint32 * len(cu_masks))(*cu_masks)
    with torch.cuda.device(index):
        err = lib.hipExtStreamCreateWithCUMask(ctypes.pointer(handle), ctypes.c_uint32(len(cu_masks)), words)
    if err != 0:
        raise RuntimeError(f"hipExtStreamCreateWithCUMask failed on GPU {index} with hipError_t {err}")
    if not handle.value:
        raise RuntimeError(f"hipExtStreamCreateWithCUMask returned no stream on GPU {index}")
    return handle.value


class TurboStream:
    """A stream on one GPU, optionally restricted to some compute units (module docstring).

    Args:
        device: ``torch.device``, ``"cuda"`` / ``"cuda:N"``, a GPU index, or ``None`` (the
            current GPU).
        cu_masks: ``None`` or 32-bit mask words (bit ``i % 32`` of word ``i // 32`` enables
            compute unit ``i``); applied on ROCm only.

    Attributes:
        torch_stream: the ``torch.cuda.Stream`` (an ``ExternalStream`` for a masked ROCm stream).
        device: the ``torch.device`` (with its index).
        cu_masks: the mask words as a tuple, or ``None``; ``None`` too where no mask was applied.

    Raises:
        RuntimeError on a machine where torch sees no GPU; TypeError / ValueError naming
        ``device`` or ``cu_masks`` for bad values.
    """

    def __init__(self, device: torch.device | str | int | None = None, cu_masks: Sequence[int] | None = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("TurboStream: needs a GPU (CUDA or ROCm); torch sees none on this machine")
        masks = check_cu_masks(cu_masks)
        self.device = _check_device(device)
        self._raw: int | None = None
        self._lib: object = None
        num_units = torch.cuda.get_device_properties(self.device.index).multi_processor_count
        if masks is not None and covers(masks, num_units):
            masks = None  # every unit enabled: an ordinary stream is the same stream
        if masks is not None and torch.version.hip:
            self._lib = _hip_runtime()
            self._raw = create_masked_stream(self._lib, self.device.index, masks)
            self.torch_stream = torch.cuda.ExternalStream(self._raw, device=self.device)
        else:
            if masks is not None:
                warnings.warn("TurboStream: cu_masks restrict compute units on ROCm only; this NVIDIA stream "
                              "runs on every SM", RuntimeWarning, stacklevel=2)
                masks = None
            self.torch_stream = torch.cuda.Stream(device=self.device)
        self.cu_masks = masks

    def close(self) -> None:
        """Destroy a masked ROCm stream now (a no-op otherwise, or when already closed): its queued
        work must be finished first. The ``torch_stream`` must not be used afterwards."""
        raw, self._raw = getattr(self, "_raw", None), None
        if raw is not None:
            with torch.cuda.device(self.device.index):
                err = self._lib.hipStreamDestroy(ctypes.c_void_p(raw))
            if err != 0:
                raise RuntimeError(f"hipStreamDestroy failed on GPU {self.device.index} with hipError_t {err}")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception as exc:  # never raise from a finaliser
            warnings.warn(f"TurboStream: destroying the stream failed: {exc}", RuntimeWarning, stacklevel=1)

    def __repr__(self) -> str:
        masks = "None" if self.cu_masks is None else "[" + ", ".join(f"0x{w:08X}" for w in self.cu_masks) + "]"
        return f"TurboStream(device={str(self.device)!r}, cu_masks={masks})"
