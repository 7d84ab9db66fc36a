"""``TurboStream`` off the GPU: construction refuses without a GPU, masks are checked, and the
ROCm path's ``hipExtStreamCreateWithCUMask`` call is marshalled as the HIP runtime expects (a
recording stand-in for the runtime; the real one runs in ``test_turbo_stream_gpu.py``)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from turbo_core import TurboStream
from turbo_core import stream as ts


def test_cpu_has_no_stream(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="^TurboStream: needs a GPU"):
        TurboStream("cuda:0", [0xFFFFFFFF])
    with pytest.raises(RuntimeError, match="^TurboStream: needs a GPU"):
        TurboStream()


@pytest.mark.parametrize("masks, where", [
    ([], "cu_masks"), (0xF, "cu_masks"), ("ff", "cu_masks"), ([0, 0], "cu_masks"),
    ([1 << 32], r"cu_masks\[0\]"), ([-1], r"cu_masks\[0\]"), ([1, 2.0], r"cu_masks\[1\]"), ([True], r"cu_masks\[0\]"),
])
def test_bad_masks_are_named(masks, where):
    with pytest.raises(ValueError, match=f"^{where}: "):
        ts.check_cu_masks(masks)


def test_masks_and_coverage():
    assert ts.check_cu_masks(None) is None and ts.check_cu_masks([1, 0xFFFFFFFF]) == (1, 0xFFFFFFFF)
    assert ts.covers((0xFFFFFFFF,), 32) and not ts.covers((0xFFFFFFFF,), 33)
    assert ts.covers((0xFFFFFFFF, 0x1), 33) and not ts.covers((0xFFFFFFFE, 0x1), 33)
    assert ts.covers((0xFFFFFFFF,) * 10, 304) and not ts.covers((0xFFFFFFFF,) * 9, 304)


def test_the_hip_call_is_marshalled_as_the_runtime_expects(monkeypatch):
    seen = {}

    class FakeHip:
        def hipExtStreamCreateWithCUMask(self, handle_ptr, size, words):  # noqa: N802 (the C name)
            seen["size"] = size.value
            seen["words"] = [words[i] for i in range(size.value)]
            seen["device"] = current[-1]
            handle_ptr.contents.value = 0xABC0
            return 0

    current = [None]

    @contextlib.contextmanager
    def device(index):
        current.append(index)
        yield
        current.pop()

    monkeypatch.setattr(torch.cuda, "device", device)
    assert ts.create_masked_stream(FakeHip(), 3, (0x0000000F, 0xFFFFFFFF)) == 0xABC0
    assert seen == {"size": 2, "words": [0xF, 0xFFFFFFFF], "device": 3}

    class Failing(FakeHip):
        def hipExtStreamCreateWithCUMask(self, handle_ptr, size, words):  # noqa: N802
            return 101  # hipErrorInvalidValue

    with pytest.raises(RuntimeError, match="hipError_t 101"):
        ts.create_masked_stream(Failing(), 0, (1,))
