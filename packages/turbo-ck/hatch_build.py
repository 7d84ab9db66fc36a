"""Hatchling build hook: compile ``turbo_ck._C`` when hipcc and Composable Kernel's headers are found.

* Found (``src/turbo_ck/_toolchain.py`` says where it looks): the CK instances are compiled per arch
  (``TURBO_CK_ARCHS``, default gfx942,gfx950) into a CPython stable-ABI library ``_C.abi3.so`` (no libtorch,
  no pybind11); the wheel is tagged ``cp310-abi3-<platform>``. An editable install compiles in place.
* Not found: a pure-Python wheel; the backend reports "built without Composable Kernel: hipcc or CK headers
  not found (looked in ...)".

``TURBO_CK_BUILD``: ``auto`` (default), ``0`` (always pure), ``1`` (fail without the toolkit). Nothing is
downloaded.
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
PACKAGE = ROOT / "src" / "turbo_ck"


def _toolchain_module():
    """``_toolchain.py`` loaded by path (the package needs torch, absent from the build environment)."""
    name = "_turbo_ck_toolchain"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PACKAGE / "_toolchain.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class CkBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        mode = os.environ.get("TURBO_CK_BUILD", "auto").strip().lower() or "auto"
        if mode not in ("auto", "0", "1"):
            raise ValueError(f"TURBO_CK_BUILD: expected auto, 0 or 1, got {mode!r}")
        if mode == "0":
            self.app.display_info("turbo-ck: TURBO_CK_BUILD=0: building a pure-Python wheel")
            return
        tc_mod = _toolchain_module()
        tc, reason = tc_mod.find_toolchain()
        if tc is None:
            if mode == "1":
                raise RuntimeError(f"TURBO_CK_BUILD=1 but {reason}")
            self.app.display_info(f"turbo-ck: pure-Python wheel: {reason}")
            return
        self._tmp = tempfile.mkdtemp(prefix="turbo_ck_build_")
        editable = version == "editable"
        out_dir = PACKAGE if editable else Path(self._tmp)
        library = out_dir / "_C.abi3.so"
        self.app.display_info(f"turbo-ck: compiling turbo_ck._C for {', '.join(tc.archs)} with {tc.hipcc}")
        tc_mod.compile_extension(tc, library, Path(self._tmp) / "obj")
        info = out_dir / "_build_info.json"
        info.write_text(json.dumps({"toolchain": tc.describe(), "source_sha256": tc_mod.source_hash(),
                                    "abi": "abi3"}, indent=1))
        build_data["pure_python"] = False
        build_data["tag"] = tc_mod.wheel_tag()
        if not editable:
            build_data["force_include"][str(library)] = "turbo_ck/_C.abi3.so"
            build_data["force_include"][str(info)] = "turbo_ck/_build_info.json"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            self._tmp = None
