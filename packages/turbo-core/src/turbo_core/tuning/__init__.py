"""Offline tuning: the database that ``turbo tune`` writes and dispatch reads.

Two levels, one file format (``turbo_core.tuning.db``):

* **backend choice** per ``(primitive, key)``: step 3 of the selection order (auto-tune), in its
  persistent form. After ``use_backend``, code and environment choices and before the defaults
  table: ``turbo_core.dispatch.dispatcher``.
* **kernel configs** per ``(backend, primitive, config key)``: launchers ask :func:`kernel_config`
  and fall back to their heuristics on ``None`` (TRITON's dense GEMM does).

Where databases come from and when they load: ``turbo_core.tuning.active``. Keys:
``turbo_core.tuning.keys``. Search spaces backends offer: ``turbo_core.tuning.spaces``. The
campaign behind ``turbo tune`` is tooling: ``turbo_core.bench.campaign``.

This package sits below ``turbo_core.dispatch`` and never imports it: a change of the database
reaches the dispatcher's selection cache through :func:`on_change`. Importing it is cheap.
"""

from turbo_core.tuning.active import (
    ENV_DB,
    ENV_SWITCH,
    ConfigReader,
    best,
    disabled,
    forcing,
    info,
    kernel_config,
    lookup,
    on_change,
    overridden,
    record,
    reload,
    reset,
    save,
    shipped_files,
)
from turbo_core.tuning.db import ConfigChoice, Entry, TuningDB
from turbo_core.tuning.keys import Key, bucket, dtype_name, key_for, register_key
from turbo_core.tuning.spaces import Space, get_space, register_space

__all__ = [
    "ENV_DB",
    "ENV_SWITCH",
    "ConfigChoice",
    "ConfigReader",
    "Entry",
    "Key",
    "Space",
    "TuningDB",
    "best",
    "bucket",
    "disabled",
    "dtype_name",
    "forcing",
    "get_space",
    "info",
    "kernel_config",
    "key_for",
    "lookup",
    "on_change",
    "overridden",
    "record",
    "register_key",
    "register_space",
    "reload",
    "reset",
    "save",
    "shipped_files",
]
