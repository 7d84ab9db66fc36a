"""Every dev task. `nox` runs the CI matrix: the core alone, the core with each backend (each in its
own venv with only what that backend needs), the example third-party plugin, the wheel-install
check, lint, and the README followed on the CPU. `nox -s main` is the README's main job.

torch comes from TURBO_TORCH_SPEC (default torch==2.13.0, the CPU build on the dev/CI machines).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CORE = "packages/turbo-core"
BACKENDS = {
    "triton": "packages/turbo-triton",
    "hipblaslt": "packages/turbo-hipblaslt",
    "ck": "packages/turbo-ck",
    "aiter": "packages/turbo-aiter",
    "deepep": "packages/turbo-deepep",
    "cudnn": "packages/turbo-cudnn",
}
EXAMPLE = "examples/turbo-flydsl-example"
TORCH = os.environ.get("TURBO_TORCH_SPEC", "torch==2.13.0")

nox.options.default_venv_backend = "venv"
# The sessions use venv on purpose; nox's notice that it found no uv says nothing about them.
logging.getLogger("nox").addFilter(lambda record: "uv binary not found" not in record.getMessage())
nox.options.sessions = ["lint", "core", *[f"backend-{b}" for b in BACKENDS], "example", "wheels", "integrations-hf",
                        "integrations-torchtitan", "readme"]
nox.options.error_on_missing_interpreters = True


PIP_ATTEMPTS = 4
#: Seconds to wait before each further attempt: a network hiccup that broke one download often lasts
#: longer than the moment an immediate retry takes.
PIP_BACKOFF = (15, 45, 90)
#: pip's own retries of a failed connection and its socket timeout, for every pip call here (a value
#: already set in the environment stands).
PIP_ENV = {k: os.environ.get(k, v) for k, v in {"PIP_RETRIES": "10", "PIP_DEFAULT_TIMEOUT": "60"}.items()}


def _pip(session: nox.Session, *args: str, python: str | None = None) -> None:
    """`pip <args>` in the session's venv (or with the interpreter `python`), tried up to PIP_ATTEMPTS
    times, PIP_BACKOFF seconds apart: a download from the package index that breaks off mid-file
    (Triton's wheel is ~290 MB, and the pip that venv bundles resumes none) fails the command, and
    would otherwise fail the whole CI run."""
    for attempt in range(1, PIP_ATTEMPTS + 1):
        try:
            if python is None:
                session.run("python", "-m", "pip", *args, env=PIP_ENV)
            else:
                session.run(python, "-m", "pip", *args, external=True, env=PIP_ENV)
            return
        except nox.command.CommandFailed:
            if attempt == PIP_ATTEMPTS:
                raise
            wait = PIP_BACKOFF[attempt - 1]
            session.warn(f"pip {args[0]} failed (attempt {attempt} of {PIP_ATTEMPTS}); trying it again in {wait} s")
            time.sleep(wait)


def _session(name: str | None = None):
    """``@nox.session`` for a session with a venv of its own, which it removes once it is done, passed or
    failed, unless venvs are being reused (``nox -r``): without ``-r`` nox would recreate it on the next
    run anyway. Every venv holds torch (about 1 GB), most also Triton (1 GB more): the whole matrix
    kept side by side needs about 20 GB of disk, one at a time about 2.5 GB. (``main`` keeps its venv: it
    is the README's main job, and its installed ``turbo`` is there to try afterwards.)"""

    def wrap(fn):
        @functools.wraps(fn)
        def run(session: nox.Session) -> None:
            try:
                fn(session)
            finally:
                venv = session.virtualenv
                location = getattr(venv, "location", None)
                if location and not getattr(venv, "reuse_existing", True):
                    shutil.rmtree(location, ignore_errors=True)

        return nox.session(name=name)(run)  # name None: the function's own (functools.wraps)

    return wrap


def _install(session: nox.Session, *packages: str) -> None:
    _pip(session, "install", *packages)


def _base(session: nox.Session) -> None:
    # torch first, pinned, so no dependency resolution ever pulls another build of it.
    _install(session, TORCH, "numpy")


@_session()
def lint(session: nox.Session) -> None:
    """ruff; the import contracts of pyproject.toml's [tool.importlinter] (the core never imports a backend,
    the runtime never imports the tooling, no import cycles in turbo_core); no session or run history under
    packages/; one version for every package; the tools' own tests (tools/test_*.py: the history check, and
    this file's venv pruning and pip retries)."""
    _install(session, "ruff", "import-linter", "pytest", "nox")  # nox: tools/test_noxfile.py
    session.run("ruff", "check", ".")
    # import-linter reads the source statically: the core's src/ on the path is all it needs.
    session.run("lint-imports", "--no-cache", env={"PYTHONPATH": str(ROOT / CORE / "src")})
    session.run("python", "tools/check_history.py")
    session.run("pytest", "-q", "tools")
    session.run("python", "tools/check_versions.py")


@_session()
def core(session: nox.Session) -> None:
    """turbo-core alone: plugin host, dispatcher, reference backend, CLI."""
    _base(session)
    _install(session, f"./{CORE}[test,report]")
    session.run("pytest", "-q", f"{CORE}/tests", *session.posargs)


#: pytest-xdist workers of a backend's tests (its test extra brings pytest-xdist): turbo-triton's run
#: its kernels in the Triton interpreter, about half an hour on one core of the 2-core CI machine.
WORKERS = {"triton": "2"}


def _backend_session(backend: str):
    def session_fn(session: nox.Session) -> None:
        _base(session)
        _install(session, f"./{CORE}", f"./{BACKENDS[backend]}[test]")
        workers = ["-n", WORKERS[backend]] if backend in WORKERS else []
        session.run("pytest", "-q", *workers, f"{BACKENDS[backend]}/tests", *session.posargs)

    session_fn.__doc__ = f"turbo-core plus turbo-{backend} alone, running that package's tests."
    return _session(f"backend-{backend}")(session_fn)


for _name in BACKENDS:
    _backend_session(_name)


@_session()
def example(session: nox.Session) -> None:
    """The third-party example plugin, pip-installed into a fresh venv beside turbo-core."""
    _base(session)
    _install(session, f"./{CORE}", f"./{EXAMPLE}[test]")
    session.run("pytest", "-q", f"{EXAMPLE}/tests", *session.posargs)


@_session("integrations-hf")
def integrations_hf(session: nox.Session) -> None:
    """The Hugging Face Transformers integration (turbo-core[test,hf]) beside turbo-triton, for its
    TRITON subset: apply_turbo on tiny models of every supported architecture, `turbo bench train --hf
    --quick`. TURBO_HF_TESTS=1 makes a missing transformers an error there rather than a skip."""
    _base(session)
    _install(session, f"./{CORE}[test,hf]", f"./{BACKENDS['triton']}[test]")
    session.run("pytest", "-q", f"{CORE}/tests/integrations/hf", *session.posargs,
                env={"TURBO_HF_TESTS": "1", "TRITON_INTERPRET": "1"})


@_session("integrations-torchtitan")
def integrations_torchtitan(session: nox.Session) -> None:
    """The TorchTitan converter (turbo-core[test,torchtitan]) beside turbo-triton, for its TRITON
    subset: tiny Llama-3, Qwen3 and DeepSeek-V3 models converted against TorchTitan's own, selection
    through TorchTitan's converters and --override.imports. TURBO_TORCHTITAN_TESTS=1 makes a missing
    torchtitan or turbo-triton an error there rather than a skip; TRITON_INTERPRET=1 is set before
    torchtitan (which imports triton) is imported."""
    _base(session)
    _install(session, f"./{CORE}[test,torchtitan]", f"./{BACKENDS['triton']}[test]")
    session.run("pytest", "-q", f"{CORE}/tests/integrations/torchtitan", *session.posargs,
                env={"TURBO_TORCHTITAN_TESTS": "1", "TRITON_INTERPRET": "1"})


@_session()
def wheels(session: nox.Session) -> None:
    """Build the seven wheels with hatchling; install turbo-core[ck,triton] from them alone into a
    fresh venv; check that exactly core + CK + Triton were installed and are listed."""
    _install(session, "hatchling")
    dist = Path(session.create_tmp()).resolve() / "dist"
    for path in [CORE, *BACKENDS.values()]:
        with session.chdir(ROOT / path):
            session.run("python", "-m", "hatchling", "build", "-t", "wheel", "-d", str(dist))
    fresh = Path(session.create_tmp()).resolve() / "fresh"
    session.run("python", "-m", "venv", "--clear", str(fresh))
    py = str(fresh / "bin" / "python")
    # Third-party dependencies from the package index (turbo's own wheels are not there) ...
    _pip(session, "install", "-q", TORCH, "numpy", "pluggy", "rich", "triton", python=py)
    # ... then turbo from the built wheels alone: --isolated ignores pip config, --no-index the index.
    session.run(py, "-m", "pip", "--isolated", "install", "--no-index", "--find-links", str(dist),
                "turbo-core[ck,triton]", external=True)
    session.run(py, str(ROOT / "tools" / "check_wheel_install.py"), "TORCH,CK,TRITON", external=True)


@_session()
def readme(session: nox.Session) -> None:
    """The README followed on the CPU: into a fresh venv with torch alone, the `pip install ...` lines of its
    Install section, run as written; then its Python quick start and every `turbo` command it shows
    (turbo-core's tests/test_readme_run.py, with the section's `export` lines; TURBO_README_TESTS=1 makes a
    missing turbo-triton an error there rather than a skip)."""
    _install(session, TORCH)  # the torch build first, as the README says; nothing else before its own lines
    section = (ROOT / "README.md").read_text().split("\n## Install\n", 1)[-1].split("\n## ", 1)[0]
    install = [line.split(" #")[0].split() for line in section.splitlines() if line.startswith("pip install ")]
    if not install:
        session.error("README.md: no `pip install ...` line in its Install section")
    for words in install:
        _pip(session, *words[1:])
    _install(session, "pytest")
    session.run("pytest", "-q", f"{CORE}/tests/test_readme_run.py", *session.posargs,
                env={"TURBO_README_TESTS": "1"})


@nox.session
def main(session: nox.Session) -> None:
    """The README's main job: install the core with every backend, `turbo doctor` and `turbo backends`,
    then `turbo demo` (a small Llama-style model with a dense and an MoE block, built from turbo
    modules, trained for 30 steps on the best device present; fails if the loss does not fall)."""
    _base(session)
    _install(session, f"./{CORE}", *[f"./{p}" for p in BACKENDS.values()])
    session.run("turbo", "doctor")
    session.run("turbo", "backends")
    session.run("turbo", "demo")


#: The `turbo bench` suites one process runs (moe-dispatch and async-tp start their own ranks over several GPUs).
GPU_SUITES = ("gemm", "grouped_gemm", "gemm-fp8", "grouped-gemm-fp8", "attention", "norm", "activation", "quant",
              "moe", "host", "linear-fp8", "train", "train-hf", "cross-entropy")
#: Steps that are a suite run with options: ``train-hf`` is ``turbo bench train --hf`` (Hugging Face models;
#: needs transformers in the environment).
SUITE_ARGS = {"train-hf": ("train", "--hf")}


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """On a GPU machine: every package's GPU tests, then every single-process `turbo bench` suite appending
    its rows to benchmarks/data, then `turbo bench report` (docs/performance.md) and the README's generated
    blocks (python -m turbo_core.cli.readme_blocks README.md).

    Runs in the current Python environment, the one nox runs in: its torch, CUDA and Triton are what is
    measured, and a GPU machine has no package index. This repository's packages are installed into it
    editable, without dependencies or build isolation (hatchling must be importable). Posargs choose the
    steps, in this order: `tests`, suite names, `report` (default: all). A tree without .git (a copy) records
    the commit given as TURBO_BENCH_COMMIT=<sha> or <sha>-dirty.
    """
    import subprocess
    import sys

    steps = list(session.posargs) or ["tests", *GPU_SUITES, "report"]
    unknown = [s for s in steps if s not in ("tests", "report", *GPU_SUITES)]
    if unknown:
        session.error(f"unknown step {', '.join(unknown)}; steps: tests, {', '.join(GPU_SUITES)}, report")
    python = sys.executable
    probe = "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        session.error(f"nox -s gpu needs a GPU that torch sees; {python} sees none "
                      f"({(found.stderr.strip().splitlines() or ['torch.cuda.is_available() is False'])[-1]})")
    session.log(f"measuring on {found.stdout.strip()} with {python}")
    packages = sorted(p.parent for p in (ROOT / "packages").glob("*/pyproject.toml"))
    for path in packages:
        session.run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-e",
                    str(path), external=True)
    if "tests" in steps:
        for path in packages:
            # pytest exits 5 when a package has no GPU test
            # Triton kernels compiled for the GPU, not interpreted; turbo-hipblaslt builds its extension on first
            # use where its wheel was built without a toolkit.
            session.run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--turbo-only=gpu",
                        str(path / "tests"), external=True, success_codes=[0, 5],
                        env={"TRITON_INTERPRET": "0", "TURBO_HIPBLASLT_JIT": "1"})
    with session.chdir(ROOT):  # --record and report default to benchmarks/data and docs/performance.md here
        for suite in (s for s in steps if s in GPU_SUITES):
            session.run(python, "-m", "turbo_core.cli", "bench", *SUITE_ARGS.get(suite, (suite,)), "--record",
                        external=True)
        if "report" in steps:
            session.run(python, "-m", "turbo_core.cli", "bench", "report", external=True)
            session.run(python, "-m", "turbo_core.cli.readme_blocks", "README.md", external=True)
