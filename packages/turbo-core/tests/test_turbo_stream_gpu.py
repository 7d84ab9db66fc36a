"""``TurboStream`` on the GPU (``@pytest.mark.gpu``): work queued on its ``torch_stream`` gives the
values computed on the default stream, for every device spelling and mask; on ROCm a partial mask
makes a CU-masked HIP stream, on NVIDIA it is ignored with a warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from turbo_core import TurboStream

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]


def _units() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("device", [None, 0, "cuda", "cuda:0", torch.device("cuda:0")])
@pytest.mark.parametrize("masks", ["none", "all", "first32", "odd"])
def test_work_on_the_stream(device, masks):
    words = (_units() + 31) // 32
    cu_masks = {"none": None, "all": [0xFFFFFFFF] * words, "first32": [0xFFFFFFFF],
                "odd": [0xAAAAAAAA] * words}[masks]
    partial = masks in ("first32", "odd") and not (masks == "first32" and _units() <= 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = TurboStream(device=device, cu_masks=cu_masks)
    nvidia_warned = any("ROCm only" in str(w.message) for w in caught)
    assert nvidia_warned == (partial and not torch.version.hip)
    assert stream.device == torch.device("cuda", torch.cuda.current_device() if device is None else 0)
    assert (stream.cu_masks is not None) == (partial and bool(torch.version.hip))
    assert isinstance(stream.torch_stream, torch.cuda.Stream)
    x = torch.randn(1 << 16, device="cuda:0")
    y = torch.randn(1 << 16, device="cuda:0")
    want = (x.double() * 3 + y.double()).float()
    stream.torch_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream.torch_stream):
        out = x * 3 + y
    stream.torch_stream.synchronize()
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    stream.close()
    stream.close()  # closing twice is a no-op


def test_bad_device_is_named():
    with pytest.raises(ValueError, match="^device: "):
        TurboStream("cpu")
    with pytest.raises(ValueError, match="^device: GPU index"):
        TurboStream(torch.cuda.device_count())
