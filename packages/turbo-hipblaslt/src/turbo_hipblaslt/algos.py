"""Which of the library heuristic's algorithms a call runs, and the search space ``turbo tune`` gets.

The extension takes an algorithm by its rank in the heuristic's list of usable ones (the call
tuple's ``algo``; 0: the heuristic's own first choice, the default). Before a launch, the kernels
ask the tuning database (``turbo_core.tuning.kernel_config("HIPBLASLT", primitive, key)``) for a
config ``{"algo": K}`` at the call's key and launch with that rank (:func:`launch`):

* **key** (:func:`key_of`): what the heuristic's list depends on, read from the call tuple, so
  in the library's column-major terms (``layout.py``: BLAS A and B are turbo's ``b`` and ``a`` when
  the plan is swapped): ``(arch, (m, n, k), (A, B, D dtype names), layout)``, ``layout`` the BLAS
  ops (``"TN"``: ``transa``, ``transb``), then ``":<A scale mode>,<B scale mode>"`` for scaled
  (FP8) calls, ``"+tf32"`` when fp32 inputs may use TF32, ``"+<epilogue>"`` (``bias``, ``gelu``,
  ``gelu_bias``) when there is one; e.g. ``("sm90", (4096, 8192, 4096), ("bf16", "bf16", "bf16"),
  "TN")``, ``("sm90", (4096, 8192, 4096), ("float8_e4m3fn", "float8_e4m3fn", "bf16"),
  "TN:vec128,blk128x128")``. A rank names a different algorithm at another shape, so the Space
  stores its winners with ``match="exact"``: a tuned rank serves its own key only, never the other
  shapes of its power-of-two bucket (``turbo_core.tuning.db``).
* **config**: ``{"algo": K}``, ``0 <= K < 16`` (:data:`MAX_ALGOS`); anything else is ignored with
  a one-time warning (rank 0).
* **a rank beyond the heuristic's list** (another library version, alignment or workspace size
  than when tuned): the extension refuses it at its "heuristic" stage before launching anything;
  the call then runs with rank 0, and that (primitive, key, rank) goes straight to rank 0 from
  then on (logged once).
* **cost** without kernel configs in any database: a lookup that returns at once (``has_configs``)
  without building the key (it is passed as a callable); with configs, the key (memoized per call
  signature: a tuple of 13 of the call's integers and a dict get) and a dict get.

Tuning: each kernel module registers a :class:`turbo_core.tuning.Space` through
:func:`register_space` when it loads; its candidates are ranks ``1 .. count - 1``, ``count`` the
heuristic's number of usable algorithms for that call (``_C.algo_count``; rank 0 is what ``turbo
tune`` times as the backend's heuristic baseline), and its libraries ``("cublaslt",)`` on CUDA,
``("hipblaslt",)`` on ROCm (versions from ``turbo_hipblaslt.probe``).
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable
from typing import Any

import torch

from turbo_core.tuning import ConfigReader, Key, Space, dtype_name, kernel_config
from turbo_core.tuning import register_space as _register_space
from turbo_hipblaslt import blaslt, runtime
from turbo_hipblaslt.codes import DTYPE_CODES, EPILOGUE_CODES, SCALE_CODES, SCALE_NONE
from turbo_hipblaslt.matmul_args import ALGO_SLOT, with_algo

__all__ = ["BACKEND", "MAX_ALGOS", "algo_from_config", "key_of", "launch", "libraries", "register_space", "reset",
           "tuning_key"]

BACKEND = "HIPBLASLT"
#: The most algorithms the extension asks of the heuristic (``kMaxAlgos`` in ``csrc/turbo_blaslt.cpp``).
MAX_ALGOS = 16

log = logging.getLogger("turbo")
_CODE_NAMES = {code: dtype_name(dtype) for dtype, code in DTYPE_CODES.items()}
_SCALE_NAMES = {code: name for name, code in SCALE_CODES.items()}
_EPILOGUE_NAMES = {code: name for name, code in EPILOGUE_CODES.items() if name is not None}
#: The slots of a call tuple its key depends on: device, m, n, k, transa, transb, A/B/D dtype codes,
#: compute, epilogue, A/B scale modes.
_signature = operator.itemgetter(0, 1, 2, 3, 4, 5, 7, 10, 13, 17, 18, 22, 24)
_keys: dict[tuple, tuple] = {}
_beyond: set[tuple[str, tuple, int]] = set()
_lock = threading.Lock()


def _name(code: int) -> str:
    return _CODE_NAMES.get(code, f"code{code}")


def _layout(transa: int, transb: int, compute: int, epilogue: int, a_mode: int, b_mode: int) -> str:
    text = ("T" if transa else "N") + ("T" if transb else "N")
    if a_mode != SCALE_NONE or b_mode != SCALE_NONE:
        text += f":{_SCALE_NAMES.get(a_mode, a_mode)},{_SCALE_NAMES.get(b_mode, b_mode)}"
    if compute:
        text += "+tf32"
    if epilogue:
        text += "+" + _EPILOGUE_NAMES.get(epilogue, str(epilogue))
    return text


def key_of(args: tuple) -> tuple:
    """The tuning key of call tuple ``args`` (``matmul_args.call_args``) as a plain tuple, equal to the
    :class:`~turbo_core.tuning.Key` of :func:`tuning_key` (same hash; memoized per signature)."""
    sig = _signature(args)
    key = _keys.get(sig)
    if key is None:
        device, m, n, k, transa, transb, a_code, b_code, d_code, compute, epilogue, a_mode, b_mode = sig
        key = (runtime.arch(device), (m, n, k), (_name(a_code), _name(b_code), _name(d_code)),
               _layout(transa, transb, compute, epilogue, a_mode, b_mode))
        with _lock:
            if len(_keys) >= 4096:
                _keys.clear()
            _keys[sig] = key
    return key


def tuning_key(args: tuple) -> Key:
    """:func:`key_of` as a :class:`~turbo_core.tuning.Key` (what the tuning database stores)."""
    return Key(*key_of(args))


def algo_from_config(config: Any) -> int:
    """The rank of a database config ``{"algo": K}``; ``ValueError`` naming what is wrong."""
    if not isinstance(config, dict):
        raise ValueError(f"config: expected an object {{\"algo\": rank}}, got {config!r}")
    unknown = sorted(set(config) - {"algo"})
    if unknown:
        raise ValueError(f"config: unknown field(s) {', '.join(map(str, unknown))}; known: algo")
    if "algo" not in config:
        raise ValueError("config: missing field algo")
    algo = config["algo"]
    if type(algo) is not int or not 0 <= algo < MAX_ALGOS:
        raise ValueError(f"config.algo: expected an integer rank in 0..{MAX_ALGOS - 1}, got {algo!r}")
    return algo


#: :func:`algo_from_config` per primitive, converted once per config object; a bad config is reported
#: once and gives rank 0.
_algo = {p: ConfigReader(algo_from_config, 0, f"{BACKEND} {p}", " (the heuristic's first algorithm runs)")
         for p in ("gemm", "gemm_fp8")}


def launch(primitive: str, args: tuple) -> None:
    """Run call tuple ``args`` of ``primitive`` (``"gemm"``, ``"gemm_fp8"``) with the tuned rank of
    its key, else rank 0 (``args``' own ``algo`` is replaced by the tuned one)."""
    config = kernel_config(BACKEND, primitive, lambda: key_of(args))
    algo = 0 if config is None else _algo[primitive](config)
    key = key_of(args) if algo else None
    if algo == 0 or (primitive, key, algo) in _beyond:
        blaslt.launch(args if args[ALGO_SLOT] == 0 else with_algo(args, 0))
        return
    error = runtime.ext().BlasLtError
    try:
        blaslt.launch(with_algo(args, algo))
        return
    except error as exc:
        if getattr(exc, "stage", None) != "heuristic":
            raise
        reason = str(exc)
    with _lock:
        first = (primitive, key, algo) not in _beyond
        _beyond.add((primitive, key, algo))
    if first:
        log.warning("turbo: the tuned %s %s algorithm of rank %d for %s is not available now (%s); the "
                    "heuristic's first algorithm runs instead", BACKEND, primitive, algo, Key(*key).label(), reason)
    blaslt.launch(with_algo(args, 0))


def reset() -> None:
    """Forget the memoized keys, the converted configs and the ranks found unavailable."""
    with _lock:
        _keys.clear()
        _beyond.clear()
    for reader in _algo.values():
        reader.clear()


def libraries() -> tuple[str, ...]:
    """The library a tuned rank depends on, by the platform of this torch: ``("cublaslt",)`` on
    CUDA, ``("hipblaslt",)`` on ROCm, ``()`` on a CPU-only torch."""
    if torch.version.hip:
        return ("hipblaslt",)
    if torch.version.cuda:
        return ("cublaslt",)
    return ()


def register_space(primitive: str, call_of: Callable[[Any], tuple | str]) -> None:
    """Offer ``turbo tune`` the ranks of ``primitive``'s calls: ``call_of(args)`` is the call tuple the
    kernel launches for the primitive's argument object ``args`` (data pointers may be stand-ins of
    the same alignment), or why it has none (a string)."""

    def call(args: Any) -> tuple:
        c = call_of(args)
        if isinstance(c, str):
            raise ValueError(f"args: {c}")
        return c

    def candidates(args: Any) -> list[dict]:
        c = call_of(args)
        if isinstance(c, str):
            return []
        count = min(blaslt.algo_count(c), MAX_ALGOS)
        return [{"algo": i} for i in range(1, count)]

    def key(args: Any) -> Key:
        return tuning_key(call(args))

    _register_space(Space(BACKEND, primitive, candidates=candidates, key=key, libraries=libraries(), match="exact"))
