"""The compiled extension of a backend package, loaded once per process, with the reason when it cannot be.

A backend that ships a C/C++ extension (``turbo_ck._C``, ``turbo_hipblaslt._C``) declares one
:class:`Extension` and asks it three things: whether the install ships the module (:meth:`~Extension.installed`,
without importing it), why nothing can be loaded (:meth:`~Extension.missing_reason`, cheap: the plugin
module and the probe ask it at discovery) and the module itself (:meth:`~Extension.load`, on a kernel's
first call). A failed load is remembered with its reason, so a broken build is reported the same way on
every call instead of retried. :meth:`~Extension.check_or_decline` lets a plugin register its kernels
where the module is missing: ``turbo backends`` then lists what the backend would serve, and each
kernel declines with the reason.

Importing this module compiles and loads nothing; a backend that can build its extension on first use
passes its own ``build`` callable (the core never runs a compiler).

It also holds :data:`DTYPE_CODES`, the integer codes of torch dtypes that cross into both compiled
backends (their C sources declare the same enum).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["DTYPE_CODES", "Extension", "ExtensionUnavailable"]

#: torch dtype -> the integer a compiled backend's entry points take for it (``csrc/ck_problem.h`` of
#: turbo-ck and ``csrc/turbo_blaslt.cpp`` of turbo-hipblaslt declare the same values).
DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 0,
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float8_e4m3fn: 3,
    torch.float8_e5m2: 4,
    torch.float8_e4m3fnuz: 5,
    torch.float8_e5m2fnuz: 6,
}


class ExtensionUnavailable(RuntimeError):
    """The extension cannot be loaded here; the message says why."""


class Extension:
    """The compiled module ``name`` (e.g. ``"turbo_ck._C"``) of one backend.

    ``absent()`` says why nothing can be loaded when the install ships no compiled module: a reason,
    or ``None`` when ``build`` can make one. It must be cheap (no import of the library, no compiling).
    ``build()`` (optional) compiles and imports the module on first use, raising
    :class:`ExtensionUnavailable` with the reason when it cannot. ``configure(module)`` (optional)
    applies settings to a freshly loaded module; its :class:`ExtensionUnavailable` (a bad setting) is
    raised to the caller but not remembered, so a corrected setting takes effect on the next call.
    """

    def __init__(self, name: str, *, absent: Callable[[], str | None],
                 build: Callable[[], ModuleType] | None = None,
                 configure: Callable[[ModuleType], None] | None = None) -> None:
        self.name = name
        self._absent = absent
        self._build = build
        self._configure = configure
        self._module: ModuleType | None = None
        self._failure: str | None = None

    def installed(self) -> bool:
        """Whether this install ships the compiled module (found, not imported)."""
        return importlib.util.find_spec(self.name) is not None

    def loaded(self) -> ModuleType | None:
        """The module when :meth:`load` has loaded it in this process, else ``None`` (never loads)."""
        return self._module

    def missing_reason(self) -> str | None:
        """Why no module can be loaded (a remembered failure, else ``absent()``'s answer), or ``None``.
        Imports no library and compiles nothing."""
        if self._failure is not None:
            return self._failure
        if self._module is not None or self.installed():
            return None
        return self._absent()

    def load(self) -> ModuleType:
        """The module: imported (or built by ``build``, then imported) on the first call, the same object
        afterwards. :class:`ExtensionUnavailable` with the reason when there is none to load; a failure to
        import or build is remembered and raised again by every later call."""
        if self._module is not None:
            return self._module
        if self._failure is not None:
            raise ExtensionUnavailable(self._failure)
        try:
            module = self._import_or_build()
        except ExtensionUnavailable as exc:
            self._failure = str(exc)
            raise
        except Exception as exc:  # a broken build, or a shared library the loader cannot find
            self._failure = f"the compiled extension {self.name} failed to load: {type(exc).__name__}: {exc}"
            raise ExtensionUnavailable(self._failure) from exc
        if self._configure is not None:
            self._configure(module)
        self._module = module
        return module

    def _import_or_build(self) -> ModuleType:
        if self.installed():
            return importlib.import_module(self.name)
        reason = self._absent()
        if reason is not None or self._build is None:
            raise ExtensionUnavailable(reason or f"the compiled extension {self.name} is not installed")
        return self._build()

    def check_or_decline(self, check: Callable | str | None) -> Callable | str | None:
        """A kernel's capability check for registration: ``check`` itself (a callable, a lazy
        ``"module:function"`` string, or ``None`` for "handles everything") when a module can be loaded,
        else a check that declines every call with :meth:`missing_reason`'s answer at registration."""
        reason = self.missing_reason()
        if reason is None:
            return check

        def declined(args) -> str:
            return reason

        return declined

    def forget_failure(self) -> None:
        """Let :meth:`load` try again (after a toolkit was installed, say); a loaded module stays."""
        self._failure = None
