"""Where a BLASLt call runs: the device index, the current stream's handle, one workspace per
(device, stream) (kept only when made outside CUDA-graph capture: ``turbo_core.graph_pool``), torch's
TF32 setting and the library's capabilities per device. Imported by the kernels on first use (never by
the plugin module)."""

from __future__ import annotations

import functools
import os
import threading

import torch

from turbo_core.graph_pool import may_cache
from turbo_core.platform import platform_of
from turbo_hipblaslt._ext import EXTENSION
from turbo_hipblaslt.codes import (
    DTYPE_CODES,
    EPILOGUE_CODES,
    SCALE_BLOCK128,
    SCALE_OUTER_VEC,
    SCALE_SCALAR,
    SCALE_VEC128,
)
from turbo_hipblaslt.layout import BlasPlan
from turbo_hipblaslt.matmul_args import Side, call_args, probe_args

__all__ = ["FP8_FP32_OUT_ENV", "arch", "capabilities", "device_index", "ext", "fp8_fp32_out_allowed", "fp8_needs_tn",
           "fp8_reduced_accumulation", "reset", "run_on", "stream_handle", "tf32", "workspace", "workspace_bytes"]

DEFAULT_WORKSPACE_MB = 32
#: Opt-in: serve FP8 GEMMs with an fp32 result where the tensor cores accumulate FP8 at reduced precision.
FP8_FP32_OUT_ENV = "TURBO_HIPBLASLT_FP8_FP32_OUT"
#: (device, stream) -> (pointer, bytes, None) of the kept workspace (see :func:`workspace`); its tensor in _kept.
_workspaces: dict[tuple[int, int], tuple[int, int, None]] = {}
_kept: dict[tuple[int, int], torch.Tensor] = {}
_lock = threading.Lock()
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def ext():
    """The loaded extension module (``ExtensionUnavailable`` with the reason when there is none)."""
    return EXTENSION.load()


def workspace_bytes() -> int:
    """``$TURBO_HIPBLASLT_WORKSPACE_MB`` (default 32) in bytes: the most a call may use."""
    raw = os.environ.get("TURBO_HIPBLASLT_WORKSPACE_MB", "").strip()
    if not raw:
        return DEFAULT_WORKSPACE_MB << 20
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb < 0:
        raise ValueError(f"TURBO_HIPBLASLT_WORKSPACE_MB: expected a non-negative integer (MiB), got {raw!r}")
    return mb << 20


def device_index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=16)
def arch(index: int) -> str:
    """turbo's name of device ``index``'s architecture (``"sm90"``, ``"gfx942"``: ``turbo_core.platform``);
    the first field of this backend's tuning keys (``turbo_hipblaslt.algos``)."""
    return platform_of(torch.device("cuda", index)).arch or "unknown"


def stream_handle(index: int) -> int:
    """The raw handle (``cudaStream_t`` / ``hipStream_t``) of the current stream of device ``index``."""
    if _raw_stream is not None:
        return int(_raw_stream(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def workspace(index: int, stream: int) -> tuple[int, int, torch.Tensor | None]:
    """``(pointer, bytes, held)`` of the workspace for a call on (device ``index``, ``stream``):
    ``$TURBO_HIPBLASLT_WORKSPACE_MB`` bytes (0 bytes: no workspace).

    A documented cache (``turbo_core.graph_pool`` gives the rule): one workspace per (device, stream),
    so concurrent calls on two streams never share one, allocated on that stream by the first call
    outside CUDA-graph capture and kept until :func:`reset`; ``held`` is then ``None``. A call that
    finds none while ``may_cache()`` is false (a capture, or a CUDA-graph trees warm-up, whose tree
    manager runs on a stream of its own) gets a workspace of its own, ``held``: the caller keeps it
    until the call is launched (:func:`turbo_hipblaslt.blaslt.args_for` does), then it is freed in
    stream order like any temporary (inside a capture, by the graph's pool). A kept workspace
    outlives graphs captured with it: :func:`reset` frees it, so reset only with no captured graph
    left that launches on that stream."""
    entry = _workspaces.get((index, stream))
    if entry is not None:
        return entry
    size = workspace_bytes()
    ws = _allocate(index, size)
    if not may_cache():
        return ws.data_ptr(), size, ws
    with _lock:
        entry = _workspaces.get((index, stream))
        if entry is None:
            entry = _workspaces[(index, stream)] = (ws.data_ptr(), size, None)
            _kept[(index, stream)] = ws
    return entry


def _allocate(index: int, nbytes: int) -> torch.Tensor:
    """``max(nbytes, 1)`` bytes on device ``index``, from its current stream's share of the caching
    allocator (a graph's pool while one captures or warms up there)."""
    return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=torch.device("cuda", index))


def tf32() -> int:
    """1 when torch lets fp32 matmuls use TF32 (``torch.backends.cuda.matmul.allow_tf32``), else 0."""
    return 1 if torch.backends.cuda.matmul.allow_tf32 else 0


def run_on(index: int, fn, *args):
    """``fn(*args)`` with device ``index`` current (handles are created per current device)."""
    if torch.cuda.current_device() == index:
        return fn(*args)
    with torch.cuda.device(index):
        return fn(*args)


@functools.lru_cache(maxsize=16)
def capabilities(index: int) -> dict:
    """What the loaded library supports on device ``index``: the extension's ``capabilities(index)``
    (platform, library, header/library versions, scale modes compiled in), the device's name and
    compute capability, and ``modes``: for each FP8 scaling mode and epilogue, ``None`` when the
    library's heuristic has an algorithm for a representative 256^3 call on this device, else why not."""
    caps = dict(run_on(index, ext().capabilities, index))
    props = torch.cuda.get_device_properties(index)
    caps["device"] = props.name
    caps["compute_capability"] = (props.major, props.minor)
    caps["modes"] = _probe_modes(index, caps)
    return caps


def _probe_modes(index: int, caps: dict) -> dict[str, str | None]:
    # turbo's NT call (a [M, K], b [N, K], both K-contiguous) as the library sees it: swapped, TN.
    plan = BlasPlan(256, 256, 256, True, False, True, 256, 256, 256)
    ocp = caps["platform"] == "cuda" or caps["ocp_fp8"]
    fp8 = DTYPE_CODES[torch.float8_e4m3fn if ocp else torch.float8_e4m3fnuz]
    bf16 = DTYPE_CODES[torch.bfloat16]
    ws = workspace_bytes()
    combos = {  # name: (a's scale mode, b's scale mode)
        "TENSORWISE": (SCALE_SCALAR, SCALE_SCALAR),
        "ROWWISE": (SCALE_OUTER_VEC, SCALE_OUTER_VEC),
        "BLOCKWISE 1x128 x 1x128": (SCALE_VEC128, SCALE_VEC128),
        "BLOCKWISE 1x128 x 128x128": (SCALE_VEC128, SCALE_BLOCK128),
        "BLOCKWISE 128x128 x 1x128": (SCALE_BLOCK128, SCALE_VEC128),
    }
    out: dict[str, str | None] = {}
    for name, (ma, mb) in combos.items():
        args = call_args(plan, Side(256, fp8, 256, ma), Side(256, fp8, 256, mb), 256, bf16, device=index,
                         workspace_size=ws)
        out[f"fp8 {name}"] = run_on(index, ext().check, *probe_args(args))
    for epilogue in ("bias", "gelu", "gelu_bias"):
        args = call_args(plan, Side(256, bf16), Side(256, bf16), 256, bf16, device=index,
                         epilogue=EPILOGUE_CODES[epilogue], bias_ptr=256 if "bias" in epilogue else 0,
                         bias_code=bf16 if "bias" in epilogue else -1, workspace_size=ws)
        out[f"bf16 epilogue {epilogue}"] = run_on(index, ext().check, *probe_args(args))
    return out


def _cuda_ada_or_hopper(index: int) -> bool:
    caps = capabilities(index)
    cc = tuple(caps["compute_capability"])
    return caps["platform"] == "cuda" and (cc == (8, 9) or cc[0] == 9)


def fp8_needs_tn(index: int) -> bool:
    """cuBLASLt runs FP8 only in the "TN" layout (both operands contiguous along K) on sm89/sm90;
    Blackwell and hipBLASLt take every layout."""
    return _cuda_ada_or_hopper(index)


def fp8_reduced_accumulation(index: int) -> bool:
    """Whether the library's FP8 GEMMs on device ``index`` add products at less than fp32 precision:
    cuBLASLt on sm89/sm90, whose FP8 tensor-core MMAs keep only about 14 bits of the running sum
    (cuBLASLt's default, non-"fast" mode promotes the partial sums into fp32 registers between MMA
    steps, e.g. once per 128-wide scale block for BLOCKWISE, but every step itself is imprecise).
    With cuBLASLt 13 on sm90 (BLOCKWISE 128x256x384, fp32 result, results of standard deviation ~20) the
    errors reach about 2e-2 against float64, half the elements beyond fp32's tolerance (1e-4 + 1e-4 |ref|).
    Blackwell and hipBLASLt are assumed to accumulate FP8 in fp32 (not checked on those GPUs)."""
    return _cuda_ada_or_hopper(index)


def fp8_fp32_out_allowed() -> bool:
    """``$TURBO_HIPBLASLT_FP8_FP32_OUT`` (``0``, the default, or ``1``): serve FP8 GEMMs with an fp32
    result (``out_dtype=float32`` or an fp32 ``out``, e.g. the fused wgrad's ``main_grad``) even where
    :func:`fp8_reduced_accumulation` holds, accepting that precision. Read at every capability check;
    set it before the first call (turbo's dispatcher caches the backend it selected for a signature)."""
    raw = os.environ.get(FP8_FP32_OUT_ENV, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ValueError(f"{FP8_FP32_OUT_ENV}: expected 0 or 1, got {raw!r}")


def reset() -> None:
    """Free the workspaces and forget the extension's cached descriptors and algorithms (after the
    device's queued work, which may still use a workspace)."""
    with _lock:
        if _workspaces and torch.cuda.is_available():
            torch.cuda.synchronize()
        _workspaces.clear()
        _kept.clear()
    capabilities.cache_clear()
    module = EXTENSION.loaded()
    if module is not None:
        module.clear_cache()
