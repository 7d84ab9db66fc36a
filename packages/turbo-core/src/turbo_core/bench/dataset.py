"""The results dataset: ``turbo bench <suite> --record [DIR]`` appends the run's rows to
``DIR/<suite>.jsonl`` (default :data:`DEFAULT_DIR`), one JSON object a line, ``<suite>`` the rows'
``suite`` field; ``turbo bench report`` reads every ``*.jsonl`` there.

A row holds the suite's fields (keys in :mod:`turbo_core.bench.runner`) and the run's provenance
(:data:`RUN_FIELDS`, from :func:`provenance`):

- ``run``: an id shared by the rows of one invocation;
- ``commit``: git HEAD of the checkout ``turbo_core`` was imported from, or the installed
  turbo-core version when it is not a checkout; ``TURBO_BENCH_COMMIT`` overrides it (a copy of
  the tree without its ``.git``, as on a lent GPU machine: ``<sha>``, or ``<sha>-dirty``);
- ``dirty``: whether that checkout had uncommitted changes to tracked files;
- ``date``: UTC, ISO 8601, to the second;
- ``device``: the GPU's name, or ``"cpu"``;
- ``driver``: the GPU driver's version (``nvidia-smi`` / ``rocm-smi``, else the CUDA driver API
  version torch reports), None when neither answers;
- ``versions``: torch, cuda, hip, triton, python and every installed ``turbo-*`` distribution;
- ``command``: the command line, as one string, after the ``TURBO_*`` variables set in the
  environment (``TURBO_TRITON_ATTN_TILES=... turbo bench attention``: a kernel's tile forced
  through its backend's variable, a backend chosen with ``TURBO_GEMM_BACKEND``...).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata as md
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

import turbo_core
from turbo_core.bench.compare import VARIANT_FIELDS

__all__ = ["DEFAULT_DIR", "RUN_FIELDS", "Run", "append", "case_key", "checkout_revision", "command", "current", "driver_version", "load", "load_file",
           "provenance", "runs", "versions"]

#: Where ``--record`` appends and ``turbo bench report`` reads, relative to the working directory.
DEFAULT_DIR = "benchmarks/data"
#: The provenance fields every row carries.
RUN_FIELDS = ("run", "commit", "dirty", "date", "device", "driver", "versions", "command")
_TIMEOUT_S = 10


def _git(cwd: Path, *args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def checkout_revision() -> tuple[str, bool]:
    """``(commit, dirty)`` of the code in use (see the module doc for the order asked)."""
    forced = os.environ.get("TURBO_BENCH_COMMIT")
    if forced:
        return forced.removesuffix("-dirty"), forced.endswith("-dirty")
    package = Path(turbo_core.__file__).resolve().parent
    top = _git(package, "rev-parse", "--show-toplevel")
    # the package must be the checkout's own source tree, not an install inside some other checkout
    if top and (Path(top) / "packages" / "turbo-core" / "src" / "turbo_core").resolve() == package:
        head = _git(package, "rev-parse", "HEAD")
        status = _git(package, "status", "--porcelain", "--untracked-files=no")
        if head:
            return head, bool(status)
    return f"turbo-core {turbo_core.__version__}", False


def driver_version(device: str) -> str | None:
    """The GPU driver's version (None on the CPU, or when nothing reports one)."""
    if device == "cpu":
        return None
    tools = (["rocm-smi", "--showdriverversion"] if torch.version.hip
             else ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if shutil.which(tools[0]):
        try:
            done = subprocess.run(tools, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            text = done.stdout.strip()
            found = re.search(r"[Dd]river version:?\s*(\S+)", text) if torch.version.hip else None
            line = found.group(1) if found else (text.splitlines() or [""])[0].strip()
            if line:
                return line
    get = getattr(torch._C, "_cuda_getDriverVersion", None)  # the CUDA driver API's integer version
    try:
        value = int(get()) if get is not None else 0
    except Exception:  # noqa: BLE001 - no driver to ask
        value = 0
    return f"CUDA driver API {value // 1000}.{value % 1000 // 10}" if value else None


def versions() -> dict[str, str | None]:
    """torch, its CUDA and HIP, triton, python, and every installed ``turbo-*`` distribution."""
    out: dict[str, str | None] = {"torch": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip}
    try:
        out["triton"] = md.version("triton")
    except md.PackageNotFoundError:
        out["triton"] = None
    out["python"] = platform.python_version()
    turbo = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("turbo-"):
            turbo[name] = dist.version
    return out | dict(sorted(turbo.items()))


def provenance(device: str, argv: Sequence[str]) -> dict:
    """The :data:`RUN_FIELDS` of a run on ``device`` (``"cuda"`` or ``"cpu"``) started by ``argv``."""
    commit, dirty = checkout_revision()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return {"run": uuid.uuid4().hex[:12], "commit": commit, "dirty": dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": name, "driver": driver_version(device), "versions": versions(), "command": command(argv)}


def command(argv: Sequence[str]) -> str:
    """``argv`` as a shell line, after the ``TURBO_*`` variables of the environment that shape the run
    (``TURBO_BENCH_COMMIT`` only names the commit)."""
    settings = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
                if k.startswith("TURBO_") and k != "TURBO_BENCH_COMMIT"]
    return " ".join([*settings, shlex.join(argv)])


def append(rows: Iterable[dict], run: dict, directory: str | os.PathLike) -> list[Path]:
    """Append each row, with ``run``'s fields, to ``directory/<row suite>.jsonl``; the files written."""
    by_suite: dict[str, list[str]] = {}
    for r in rows:
        by_suite.setdefault(r["suite"], []).append(json.dumps({**r, **run}, sort_keys=False))
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for suite, lines in by_suite.items():
        path = out / f"{suite}.jsonl"
        with path.open("a") as fh:
            fh.write("\n".join(lines) + "\n")
        written.append(path)
    return written


def load_file(path: str | os.PathLike) -> list[dict]:
    """The rows of one ``.jsonl`` file, in file order.

    Raises:
        ValueError: a line is not a JSON object with ``suite`` and the :data:`RUN_FIELDS` (the
            file and line named).
    """
    rows = []
    with Path(path).open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from None
            missing = [k for k in ("suite", *RUN_FIELDS) if not isinstance(row, dict) or k not in row]
            if missing:
                raise ValueError(f"{path}:{n}: a row without {', '.join(missing)}")
            rows.append(row)
    return rows


def load(directory: str | os.PathLike) -> list[dict]:
    """Every row of ``directory/*.jsonl`` (:func:`load_file`), the files sorted by name."""
    return [row for path in sorted(Path(directory).glob("*.jsonl")) for row in load_file(path)]


@dataclasses.dataclass
class Run:
    """The rows of one suite in one invocation, and the invocation's provenance."""

    suite: str
    meta: dict
    rows: list[dict]

    @property
    def device(self) -> str:
        return self.meta["device"]


def runs(rows: Iterable[dict]) -> list[Run]:
    """The rows grouped by (suite, run), in order of first appearance."""
    found: dict[tuple[str, str], Run] = {}
    for r in rows:
        key = (r["suite"], r["run"])
        if key not in found:
            found[key] = Run(r["suite"], {k: r[k] for k in RUN_FIELDS}, [])
        found[key].rows.append(r)
    return list(found.values())


def case_key(row: dict) -> tuple:
    """What a row measures, across runs: suite, pass, variant fields and case."""
    return (row["suite"], str(row.get("pass", "-")), *(str(row.get(f)) for f in VARIANT_FIELDS), row["case"])


def current(all_runs: Sequence[Run]) -> tuple[list[Run], dict[tuple[str, str], int]]:
    """The newest measurement of every case on every device: per (suite, device), the runs from the
    latest back (of equal dates, the one appended last first), each with the rows of its cases that
    no later run measured with the same providers (a run narrowed with ``--models`` or
    ``--providers`` leaves the other cases of an earlier run in place; a case keeps all its rows of
    its run, so its ratios compare providers timed side by side). Also returns, per (suite,
    device), how many runs are left out because later runs measured all of their cases. Ordered by
    suite, device and date, the latest first."""
    order = sorted(range(len(all_runs)), reverse=True,
                   key=lambda i: (datetime.datetime.fromisoformat(all_runs[i].meta["date"]), i))
    seen: dict[tuple[str, str], set[tuple]] = {}
    kept: dict[tuple[str, str], list[Run]] = {}
    dropped: dict[tuple[str, str], int] = {}
    for i in order:
        run = all_runs[i]
        key = (run.suite, run.device)
        done = seen.setdefault(key, set())
        fresh = {case_key(r) for r in run.rows if (*case_key(r), r["provider"]) not in done}
        rows = [r for r in run.rows if case_key(r) in fresh]
        done |= {(*case_key(r), r["provider"]) for r in run.rows}
        if rows:
            kept.setdefault(key, []).append(Run(run.suite, run.meta, rows))
        else:
            dropped[key] = dropped.get(key, 0) + 1
    return [r for key in sorted(kept) for r in kept[key]], dropped
