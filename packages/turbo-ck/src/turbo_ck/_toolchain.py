"""Finding hipcc and Composable Kernel's headers, and the commands that compile ``csrc/`` with them.

Used by the wheel's build hook (``hatch_build.py``), so it imports the standard library only. Nothing is
downloaded; nothing runs except the compiler, and only from :func:`compile_extension`.

Where it looks (first hit wins): ``$TURBO_CK_ROCM_HOME``, ``$ROCM_PATH``, ``$ROCM_HOME``, the parent of
``hipcc`` on ``PATH``, ``/opt/rocm``. A root needs ``bin/hipcc`` and CK's installed headers
(``include/ck/ck.hpp``, ``include/ck/config.h`` written by CK's CMake install, and the device ops used:
``DEVICE_OPS``); ``$TURBO_CK_INCLUDE`` names another CK include directory (an installed CK elsewhere).
``TURBO_CK_SEARCH_SYSTEM=0`` keeps only the roots the variables name. ``TURBO_CK_ARCHS`` (default
``gfx942,gfx950``) picks the archs compiled: one translation unit per arch (``instances_<arch>.cpp``)
with its own ``--offload-arch`` and FP8 flavour macro, linked with the binding into ``_C.abi3.so``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["ARCH_FLAVOUR", "DEVICE_OPS", "NO_TOOLKIT", "SOURCES", "Toolchain", "compile_commands",
           "compile_extension", "find_toolchain", "source_hash", "wheel_tag"]

#: The start of every "nothing to build with" reason (the probe and the tests quote it).
NO_TOOLKIT = "built without Composable Kernel: hipcc or CK headers not found"
SOURCES = ("turbo_ck.cpp", "ck_problem.h", "ck_instances.hpp", "instances_gfx942.cpp", "instances_gfx950.cpp")
#: The CK headers the instances include (relative to the CK include dir).
DEVICE_OPS = ("ck/ck.hpp", "ck/config.h",
              "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3.hpp",
              "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3_ab_scale.hpp")
#: arch -> the CK macro selecting its FP8 flavour (gfx942: FNUZ, gfx950: OCP).
ARCH_FLAVOUR = {"gfx942": "CK_USE_FNUZ_FP8", "gfx950": "CK_USE_OCP_FP8"}
LIMITED_API = (3, 10)


@dataclass(frozen=True)
class Toolchain:
    """``root`` (ROCm), ``hipcc``, ``ck_include`` and the ``archs`` to compile."""

    root: str
    hipcc: str
    ck_include: str
    archs: tuple[str, ...]

    def describe(self) -> dict:
        return asdict(self)


def csrc_dir() -> Path:
    return Path(__file__).resolve().parent / "csrc"


def source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode())
        h.update((csrc_dir() / name).read_bytes())
    return h.hexdigest()


def wheel_tag() -> str:
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"cp{LIMITED_API[0]}{LIMITED_API[1]}-abi3-{plat}"


def parse_archs(raw: str | None) -> tuple[str, ...]:
    """``TURBO_CK_ARCHS`` ("gfx942,gfx950" by default) as a tuple; ``ValueError`` naming an unknown arch."""
    archs = tuple(a.strip() for a in (raw or "gfx942,gfx950").split(",") if a.strip())
    bad = [a for a in archs if a not in ARCH_FLAVOUR]
    if bad or not archs:
        raise ValueError(f"TURBO_CK_ARCHS: expected a comma-separated subset of {sorted(ARCH_FLAVOUR)}, got {raw!r}")
    return archs


def _roots(env: Mapping[str, str]) -> list[Path]:
    roots = [Path(env[n]) for n in ("TURBO_CK_ROCM_HOME", "ROCM_PATH", "ROCM_HOME") if env.get(n)]
    if env.get("TURBO_CK_SEARCH_SYSTEM", "1").strip() != "0":
        found = shutil.which("hipcc", path=env.get("PATH"))
        if found:
            roots.append(Path(found).resolve().parent.parent)
        roots.append(Path("/opt/rocm"))
    return list(dict.fromkeys(roots))


def _check_root(root: Path, env: Mapping[str, str], archs: tuple[str, ...]) -> Toolchain | str:
    hipcc = root / "bin" / "hipcc"
    if not hipcc.is_file():
        return f"{root}: no bin/hipcc"
    include = Path(env["TURBO_CK_INCLUDE"]) if env.get("TURBO_CK_INCLUDE") else root / "include"
    missing = [h for h in DEVICE_OPS if not (include / h).is_file()]
    if missing:
        return f"{root}: hipcc found but {include} lacks {', '.join(missing)}"
    return Toolchain(str(root), str(hipcc), str(include), archs)


def find_toolchain(env: Mapping[str, str] | None = None) -> tuple[Toolchain | None, str]:
    """``(toolchain, "")``, else ``(None, reason)``: the reason starts with :data:`NO_TOOLKIT` and says
    where it looked, e.g. ``"... (looked in /opt/rocm: no bin/hipcc)"``."""
    env = os.environ if env is None else env
    archs = parse_archs(env.get("TURBO_CK_ARCHS"))
    tried = []
    for root in _roots(env):
        found = _check_root(root, env, archs)
        if isinstance(found, Toolchain):
            return found, ""
        tried.append(found)
    return None, f"{NO_TOOLKIT} (looked in {'; '.join(tried) if tried else 'no location'})"


def compile_commands(tc: Toolchain, output: str | os.PathLike, build_dir: str | os.PathLike,
                     *, include: str | None = None) -> list[list[str]]:
    """The hipcc commands: one object per arch's instances, the binding, then the link into ``output``."""
    build = Path(build_dir)
    common = [tc.hipcc, "-O3", "-std=c++17", "-fPIC", "-fvisibility=hidden", f"-I{tc.ck_include}", f"-I{csrc_dir()}"]
    cmds, objects = [], []
    for arch in tc.archs:
        obj = build / f"instances_{arch}.o"
        cmds.append([*common, f"--offload-arch={arch}", f"-D{ARCH_FLAVOUR[arch]}", "-c",
                     str(csrc_dir() / f"instances_{arch}.cpp"), "-o", str(obj)])
        objects.append(str(obj))
    binding = build / "turbo_ck.o"
    cmds.append([*common, f"-DPy_LIMITED_API=0x{LIMITED_API[0]:02X}{LIMITED_API[1]:02X}0000",
                 *[f"-DTURBO_CK_{a.upper()}" for a in tc.archs], f"-I{include or sysconfig.get_paths()['include']}",
                 "-c", str(csrc_dir() / "turbo_ck.cpp"), "-o", str(binding)])
    cmds.append([tc.hipcc, "-shared", "-fPIC", *[f"--offload-arch={a}" for a in tc.archs], str(binding), *objects,
                 "-o", str(output)])
    return cmds


def compile_extension(tc: Toolchain, output: str | os.PathLike, build_dir: str | os.PathLike,
                      *, timeout: float = 3600.0) -> None:
    """Run :func:`compile_commands`; ``RuntimeError`` with the compiler's output on the first failure."""
    Path(build_dir).mkdir(parents=True, exist_ok=True)
    for cmd in compile_commands(tc, output, build_dir):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout)[-4000:]
            raise RuntimeError(f"compiling turbo_ck._C failed ({' '.join(cmd)}):\n{tail}")
