"""Direct BLASLt GEMMs with the library's epilogues (bias, GELU), outside turbo's dispatcher: what a
Linear module calls to fuse its bias into the GEMM. turbo's ``gemm`` primitive has no bias, so these
functions are this package's own API.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.gemm import GEMM, GemmArgs, gemm_dims
from turbo_hipblaslt import algos, blaslt, runtime
from turbo_hipblaslt import gemm as _gemm
from turbo_hipblaslt.codes import DTYPE_CODES
from turbo_hipblaslt.layout import LayoutUnsupported
from turbo_hipblaslt.matmul_args import Side

__all__ = ["ACTIVATIONS", "capabilities", "gemm", "linear"]

#: Activations the epilogue can apply (``None``: none).
ACTIVATIONS = (None, "gelu")


def capabilities(device: torch.device | int | str | None = None) -> dict:
    """What the loaded library supports on ``device`` (default: the current GPU): ``platform``,
    ``library``, ``header_version`` / ``library_version`` (e.g. 130000 for cuBLASLt 13.0),
    ``outer_vec`` (ROWWISE FP8), ``block128`` (BLOCKWISE FP8), ``ocp_fp8``, ``fnuz_fp8``, the device
    name and compute capability. Builds/loads the extension (``ExtensionUnavailable`` if it cannot)."""
    if device is None:
        index = torch.cuda.current_device()
    elif isinstance(device, int):
        index = device
    else:
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"device: expected a GPU device, got {dev}")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    return dict(runtime.capabilities(index))


def _check_bias(bias: object, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias: expected a torch.Tensor or None, got {type(bias).__name__}")
    if bias.dim() != 1 or bias.shape[0] != n:
        raise ValueError(f"bias: expected shape ({n},) (one value per output column N), got {tuple(bias.shape)}")
    if bias.dtype != dtype:
        raise TypeError(f"bias: expected the result dtype {dtype}, got {bias.dtype}")
    if bias.device != device:
        raise ValueError(f"bias: expected a tensor on {device}, got {bias.device}")
    return bias.contiguous()


def gemm(a: torch.Tensor, b: torch.Tensor, *, trans_a: bool = False, trans_b: bool = False,
         out_dtype: torch.dtype | None = None, trans_c: bool = False, out: torch.Tensor | None = None,
         bias: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
    """``C = act(op(a) @ op(b) + bias)`` in one BLASLt call.

    a, b, trans_a, trans_b, out_dtype, trans_c, out: as turbo's ``gemm`` primitive
        (:class:`turbo_core.dispatch.specs.gemm.GemmArgs`): ``a`` ``[M, K]`` (``[K, M]`` when
        ``trans_a``), ``b`` ``[K, N]`` (``[N, K]`` when ``trans_b``), fp16/bf16/fp32; result ``[M, N]``
        (``[N, M]`` when ``trans_c``); ``out`` accumulates (``out += C``) and cannot be combined with
        ``bias``/``activation``.
    bias: ``[N]`` in the result dtype on a's device, added to every row of ``op(a) @ op(b)`` before
        the activation (needs ``trans_c=False``: the library broadcasts a bias along its own rows).
    activation: ``None`` or ``"gelu"``: the library's GELU epilogue (cuBLASLt's is the tanh
        approximation, ``torch.nn.functional.gelu(x, approximate="tanh")``).

    Numerics: fp32 accumulation; bias added and GELU applied in fp32 in the epilogue; rounded once.
    Algorithm: the heuristic's first choice, or the rank a tuning database holds for the call's key
    (``turbo_hipblaslt.algos``: primitive ``gemm``, the epilogue in the key's layout, e.g. ``"TN+bias"``).
    The inputs must be on a GPU with the extension loadable; a configuration the library cannot run
    raises ``ValueError`` (layouts) or ``BlasLtError`` (the library's status)."""
    args = GemmArgs(a, b, trans_a, trans_b, out_dtype, trans_c, out)
    GEMM.check_args(args)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")
    if bias is None and activation is None:
        reason = _gemm.can_handle(args)
        if reason:
            raise ValueError(reason)
        return _gemm.gemm(args)
    if out is not None:
        raise ValueError("out: accumulating into out cannot be combined with a bias or activation epilogue")
    reason = _gemm.gpu_reason(a, "gemm")
    if reason:
        raise ValueError(f"a: {reason}")
    result = args.result_dtype
    if (a.dtype, result) not in _gemm.DIRECT:
        raise TypeError(f"out_dtype: the {a.dtype} -> {result} epilogue path is not served (pairs: fp32->fp32, "
                        "fp16->fp16/fp32, bf16->bf16/fp32)")
    m, n, k = gemm_dims(args)
    if bias is not None:
        if trans_c:
            raise ValueError("bias: not with trans_c (the library broadcasts a bias along its own rows, which are "
                             "M for a transposed result)")
        bias = _check_bias(bias, n, result, a.device)
    shape = (n, m) if trans_c else (m, n)
    if m == 0 or n == 0 or k == 0:
        c = torch.zeros(shape, dtype=torch.float32, device=a.device)
        if bias is not None:
            c = c + bias.float()
        if activation == "gelu":
            c = torch.nn.functional.gelu(c, approximate="tanh")
        return c.to(result)
    d = torch.empty(shape, dtype=result, device=a.device)
    try:
        p = blaslt.plan(a, trans_a, b, trans_b, d, trans_c, need_swapped=bias is not None)
    except LayoutUnsupported as exc:
        raise ValueError(f"bias: the library adds a bias along its own rows, which are not N here ({exc})") from None
    code = DTYPE_CODES[a.dtype]
    epilogue = {(True, None): "bias", (False, "gelu"): "gelu", (True, "gelu"): "gelu_bias"}[(bias is not None,
                                                                                            activation)]
    algos.launch("gemm", blaslt.args_for(p, Side(a.data_ptr(), code), Side(b.data_ptr(), code), d,
                                         epilogue=epilogue, bias=bias))
    return d


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           activation: str | None = None) -> torch.Tensor:
    """``act(x @ weight.T + bias)`` with the bias (and GELU) fused into the GEMM's epilogue.

    x: ``[..., K]``; weight: ``[N, K]`` (a Linear's layout); bias: ``[N]`` or ``None``, x's dtype;
    result ``[..., N]`` in x's dtype. See :func:`gemm` for numerics."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError("x: expected a tensor of at least 1 dim")
    x2 = x.reshape(-1, x.shape[-1])
    y = gemm(x2, weight, trans_b=True, bias=bias, activation=activation)
    return y.reshape(*x.shape[:-1], y.shape[-1])
