"""A CPU stand-in for ``turbo_hipblaslt._C``: the same entry points and the same 29 integers, computed
in float64 on raw CPU memory (the pointers are real addresses of CPU tensors), with the scale modes
read the way the package documents cuBLASLt reading them (``scales.py``) and cuBLASLt's Hopper rule
enforced (FP8 only as "TN"). It lets the whole Python side (plans, pointers, copies, scale layouts,
grouped loops, the epilogue API, the ops' forward/backward through the dispatcher) run on the CPU.
What it cannot check is the real library's agreement with these semantics: the GPU tests do that.

Its heuristic offers ``offers`` algorithms for every configuration it accepts (``offers_for``, when set,
decides per call); ranks change nothing numerically, but each launch is recorded with its ``algo``, and
a rank beyond the offer fails at the "heuristic" stage as the extension does."""

from __future__ import annotations

import ctypes
import math
from typing import NamedTuple

import torch

DTYPES = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float8_e4m3fn, 4: torch.float8_e5m2,
          5: torch.float8_e4m3fnuz, 6: torch.float8_e5m2fnuz}
FP8 = {3, 4, 5, 6}


class BlasLtError(RuntimeError):
    def __init__(self, message: str, status: str, stage: str) -> None:
        super().__init__(message)
        self.status, self.stage = status, stage


class Call(NamedTuple):
    device: int
    m: int
    n: int
    k: int
    transa: int
    transb: int
    a: int
    a_type: int
    lda: int
    b: int
    b_type: int
    ldb: int
    d: int
    d_type: int
    ldd: int
    alpha: float
    beta: float
    compute: int
    epilogue: int
    bias: int
    bias_type: int
    a_scale: int
    a_scale_mode: int
    b_scale: int
    b_scale_mode: int
    stream: int
    workspace: int
    workspace_size: int
    algo: int


def raw(ptr: int, dtype: torch.dtype, numel: int) -> torch.Tensor:
    """``numel`` elements of ``dtype`` at address ``ptr`` (shares the memory)."""
    size = numel * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer((ctypes.c_uint8 * size).from_address(ptr), dtype=torch.uint8).view(dtype)


def colmajor(ptr: int, dtype: torch.dtype, rows: int, cols: int, ld: int) -> torch.Tensor:
    return raw(ptr, dtype, (cols - 1) * ld + rows).as_strided((rows, cols), (1, ld))


def _scaled(x: torch.Tensor, ptr: int, mode: int, outer_dim: int) -> torch.Tensor:
    """``x`` (float64, ``[outer, K]`` when ``outer_dim == 0`` else ``[K, outer]``) times its scales."""
    if mode < 0:
        return x
    xo = x if outer_dim == 0 else x.t()  # [outer, K]
    outer, k = xo.shape
    kb = math.ceil(k / 128)
    if mode == 0:
        s = raw(ptr, torch.float32, 1).double()[0]
        out = xo * s
    elif mode == 1:  # OUTER_VEC_32F
        out = xo * raw(ptr, torch.float32, outer).double()[:, None]
    elif mode == 2:  # VEC128_32F: (r, kb) at kb * outer + r
        s = raw(ptr, torch.float32, kb * outer).double().reshape(kb, outer).t()
        out = xo * s.repeat_interleave(128, dim=1)[:, :k]
    else:  # BLK128x128_32F: (rb, kb) at rb * L4 + kb
        l4 = -(-kb // 4) * 4
        rb = math.ceil(outer / 128)
        s = raw(ptr, torch.float32, rb * l4).double().reshape(rb, l4)[:, :kb]
        out = xo * s.repeat_interleave(128, 0)[:outer].repeat_interleave(128, 1)[:, :k]
    return out if outer_dim == 0 else out.t()


class FakeExt:
    PLATFORM = "cuda"
    LIBRARY = "simulated cuBLASLt"
    HEADER_VERSION = 0
    BlasLtError = BlasLtError

    def __init__(self, offers: int = 4) -> None:
        self.calls: list[Call] = []
        self.offers = offers
        self.offers_for = None  # optional: Call -> how many algorithms the heuristic offers for it
        self.counted: list[Call] = []  # the calls algo_count was asked about
        self.attempts: list[Call] = []  # every non-empty matmul asked for, failed ones included
        self.many: list[tuple[tuple, list]] = []  # every matmul_many call: (common, groups)
        self.relayouts: list[tuple] = []  # every transpose_bytes call: (rows, cols, ld_src, trans, ld_dst)
        self.transform_status: str | None = None

    def _offers(self, c: Call) -> int:
        return self.offers if self.offers_for is None else self.offers_for(c)

    def _config_reason(self, c: Call) -> str | None:
        if any(t not in DTYPES for t in (c.a_type, c.b_type, c.d_type)):
            return "setup: CUBLAS_STATUS_NOT_SUPPORTED (dtype code)"
        if c.a_type in FP8 or c.b_type in FP8:
            if not (c.transa and not c.transb):
                return "heuristic: CUBLAS_STATUS_NOT_SUPPORTED (FP8 needs TN on sm90)"
            if c.a_type in (4, 6) and c.b_type in (4, 6):
                return "heuristic: CUBLAS_STATUS_NOT_SUPPORTED (E5M2 x E5M2)"
        if c.lda < max(1, c.k if c.transa else c.m) or c.ldb < max(1, c.n if c.transb else c.k) or c.ldd < max(1, c.m):
            return "setup: CUBLAS_STATUS_INVALID_VALUE (leading dimension)"
        return None

    def _reason(self, c: Call) -> str | None:
        why = self._config_reason(c)
        if why is None and c.algo >= self._offers(c):
            why = (f"heuristic: CUBLAS_STATUS_NOT_SUPPORTED (the heuristic offers only {self._offers(c)} "
                   f"algorithm(s) for m={c.m} n={c.n} k={c.k}, algo={c.algo} requested)")
        return why

    def check(self, *args) -> str | None:
        return self._reason(Call(*args))

    def algo_count(self, *args) -> int:
        c = Call(*args)
        self.counted.append(c)
        return 0 if self._config_reason(c) else min(self._offers(c), 16)

    def library_version(self) -> int:
        return 120903

    def matmul(self, *args) -> None:
        c = Call(*args)
        if c.m == 0 or c.n == 0 or c.k == 0:
            return
        self.attempts.append(c)
        reason = self._reason(c)
        if reason:
            stage, rest = reason.split(": ", 1)
            raise BlasLtError(reason, rest.split(" ")[0], stage)
        self.calls.append(c)
        A = colmajor(c.a, DTYPES[c.a_type], c.k if c.transa else c.m, c.m if c.transa else c.k, c.lda).double()
        B = colmajor(c.b, DTYPES[c.b_type], c.n if c.transb else c.k, c.k if c.transb else c.n, c.ldb).double()
        opa = _scaled(A.t() if c.transa else A, c.a_scale, c.a_scale_mode, 0)  # [m, k]: outer m
        opb = _scaled(B.t() if c.transb else B, c.b_scale, c.b_scale_mode, 1)  # [k, n]: outer n
        D = colmajor(c.d, DTYPES[c.d_type], c.m, c.n, c.ldd)
        out = c.alpha * (opa @ opb) + (c.beta * D.double() if c.beta else 0.0)
        if c.epilogue & 1:
            out = out + raw(c.bias, DTYPES[c.bias_type], c.m).double()[:, None]
        if c.epilogue & 2:
            out = torch.nn.functional.gelu(out, approximate="tanh")
        D.copy_(out.to(D.dtype))

    def matmul_many(self, common: tuple, groups) -> None:
        self.many.append((tuple(common), [tuple(g) for g in groups]))
        for m, n, k, a, b, d in groups:
            args = list(common)
            args[1:4] = [m, n, k]
            args[6], args[9], args[12] = a, b, d
            self.matmul(*args)

    def transpose_bytes(self, device, rows, cols, src, ld_src, trans, dst, ld_dst, stream) -> None:
        """The extension's byte relayout: dst (column-major rows x cols, ld_dst) = op(src); recorded in
        ``relayouts``; ``transform_status`` set makes it fail with that status, as a library that cannot."""
        if self.transform_status:
            raise BlasLtError(f"transform: {self.transform_status}", self.transform_status, "transform")
        if ld_dst < max(rows, 1) or ld_src < max(cols if trans else rows, 1):
            raise ValueError("transpose_bytes: a leading dim below the matrix's rows")
        self.relayouts.append((rows, cols, ld_src, trans, ld_dst))
        if rows == 0 or cols == 0:
            return
        s = colmajor(src, torch.uint8, cols if trans else rows, rows if trans else cols, ld_src)
        colmajor(dst, torch.uint8, rows, cols, ld_dst).copy_(s.t() if trans else s)

    def capabilities(self, device: int) -> dict:
        return {"platform": "cuda", "library": self.LIBRARY, "header_version": 0, "library_version": 0,
                "handle_status": "CUBLAS_STATUS_SUCCESS", "outer_vec": True, "block128": True, "ocp_fp8": True,
                "fnuz_fp8": False, "alignment_prefs": True}

    def cache_info(self):
        return (0, 0, 0, 0)

    def clear_cache(self) -> None:
        pass


class RocmFakeExt(FakeExt):
    """The ROCm-flavoured fake: also has ``matmul_grouped`` (hipBLASLt's one-launch grouped GEMM), which
    records each call's ``(common, groups)`` and computes every non-empty group in float64 like ``matmul``
    (without recording those in ``calls``). ``grouped_offers=False`` makes it answer that the library has
    no grouped algorithm (``False``, nothing computed)."""

    PLATFORM = "rocm"
    LIBRARY = "simulated hipBLASLt"

    def __init__(self, offers: int = 4, grouped_offers: bool = True) -> None:
        super().__init__(offers)
        self.grouped: list[tuple[tuple, list]] = []
        self.grouped_offers = grouped_offers

    def matmul_grouped(self, common: tuple, groups) -> bool:
        groups = [tuple(g) for g in groups]
        self.grouped.append((tuple(common), groups))
        if not self.grouped_offers:
            return False
        saved = list(self.calls)
        for m, n, k, a, b, d in groups:
            args = list(common)
            args[1:4] = [m, n, k]
            args[6], args[9], args[12] = a, b, d
            self.matmul(*args)
        self.calls = saved
        return True


def simulate(monkeypatch, fake: FakeExt | None = None) -> FakeExt:
    """Route turbo_hipblaslt's kernels to ``fake`` (a new :class:`FakeExt` by default) on CPU tensors, as
    device 0 of an sm90 GPU with cuBLASLt's capabilities; returns the fake."""
    from turbo_hipblaslt import gemm, gemm_fp8, grouped_gemm, relayout, runtime

    fake = fake or FakeExt()
    caps = {**fake.capabilities(0), "compute_capability": (9, 0), "device": "simulated", "modes": {}}
    monkeypatch.setattr(runtime, "ext", lambda: fake)
    monkeypatch.setattr(runtime, "device_index", lambda t: 0)
    monkeypatch.setattr(runtime, "stream_handle", lambda index: 0)
    monkeypatch.setattr(runtime, "workspace", lambda index, stream: (0, 0, None))
    monkeypatch.setattr(runtime, "run_on", lambda index, fn, *args: fn(*args))
    monkeypatch.setattr(runtime, "capabilities", lambda index: caps)
    monkeypatch.setattr(runtime, "fp8_needs_tn", lambda index: True)
    monkeypatch.setattr(runtime, "tf32", lambda: 0)
    monkeypatch.setattr(runtime, "arch", lambda index: "sm90")
    monkeypatch.setattr(relayout, "_fallback", {})
    for module in (gemm, gemm_fp8, grouped_gemm):
        monkeypatch.setattr(module, "gpu_reason", lambda t, what: None)
    for module in (gemm, gemm_fp8):  # launch templates start empty, as in a new process on this "device"
        monkeypatch.setattr(module, "_templates", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    return fake
