"""Hatchling build hook: compile ``turbo_hipblaslt._C`` when a BLASLt toolkit is found.

* Toolkit found (ROCm hipBLASLt or CUDA cuBLASLt, see ``src/turbo_hipblaslt/_toolchain.py``): the
  extension is compiled (a CPython stable-ABI library, ``_C.abi3.so``, no libtorch, no pybind11) and the
  wheel is platform-specific, tagged ``cp310-abi3-<platform>``. An editable install compiles it in
  place, into ``src/turbo_hipblaslt/``.
* None found: a pure-Python wheel; the backend then reports "built without a BLASLt toolkit; found
  neither ROCm hipBLASLt nor CUDA cuBLASLt (...)" and ``TURBO_HIPBLASLT_JIT=1`` can build it later.

``TURBO_HIPBLASLT_BUILD``: ``auto`` (default), ``0`` (always pure), ``1`` (fail without a toolkit).
``TURBO_HIPBLASLT_PLATFORM=cuda|rocm`` picks one platform. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "src" / "turbo_hipblaslt"


def _toolchain_module():
    """``src/turbo_hipblaslt/_toolchain.py`` loaded by path (the package itself is not importable
    in the isolated build environment: it needs turbo_core and torch)."""
    name = "_turbo_hipblaslt_toolchain"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PACKAGE / "_toolchain.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class BlasLtBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        mode = os.environ.get("TURBO_HIPBLASLT_BUILD", "auto").strip().lower() or "auto"
        if mode not in ("auto", "0", "1"):
            raise ValueError(f"TURBO_HIPBLASLT_BUILD: expected auto, 0 or 1, got {mode!r}")
        if mode == "0":
            self.app.display_info("turbo-hipblaslt: TURBO_HIPBLASLT_BUILD=0: building a pure-Python wheel")
            return
        tc_mod = _toolchain_module()
        tc, reason = tc_mod.find_toolchain()
        if tc is None:
            if mode == "1":
                raise RuntimeError(f"TURBO_HIPBLASLT_BUILD=1 but {reason}")
            self.app.display_info(f"turbo-hipblaslt: pure-Python wheel: {reason}")
            return
        editable = version == "editable"
        if editable:
            out_dir = PACKAGE
        else:
            self._tmp = tempfile.mkdtemp(prefix="turbo_hipblaslt_build_")
            out_dir = Path(self._tmp)
        library = out_dir / "_C.abi3.so"
        self.app.display_info(f"turbo-hipblaslt: compiling turbo_hipblaslt._C against {tc.platform} ({tc.library})")
        tc_mod.compile_extension(tc, library)
        info = out_dir / "_build_info.json"
        info.write_text(json.dumps({"toolchain": tc.describe(), "source_sha256": tc_mod.source_hash(),
                                    "abi": "abi3", "limited_api": list(tc_mod.LIMITED_API)}, indent=1))
        build_data["pure_python"] = False
        build_data["tag"] = tc_mod.wheel_tag()
        if not editable:
            build_data["force_include"][str(library)] = "turbo_hipblaslt/_C.abi3.so"
            build_data["force_include"][str(info)] = "turbo_hipblaslt/_build_info.json"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            self._tmp = None
