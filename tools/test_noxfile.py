"""noxfile.py's own machinery: a test session removes its venv when it ends, passed or failed, and keeps
it under ``nox -r``; ``main`` and ``gpu`` keep theirs; pip installs are retried with waits, then the
failure stands. Run: ``python -m pytest tools/test_noxfile.py`` (needs nox, as the lint session has)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

nox = pytest.importorskip("nox")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("turbo_noxfile", ROOT / "noxfile.py")
noxfile = importlib.util.module_from_spec(_spec)
sys.modules["turbo_noxfile"] = noxfile
_spec.loader.exec_module(noxfile)


class _Venv:
    def __init__(self, location: Path, reuse_existing: bool) -> None:
        self.location = str(location)
        self.reuse_existing = reuse_existing


class _Session:
    """What the noxfile's helpers touch of a nox session."""

    def __init__(self, venv=None, fail_runs: int = 0) -> None:
        self.virtualenv = venv
        self.fail_runs = fail_runs
        self.runs: list[tuple] = []
        self.warnings: list[str] = []

    def run(self, *args, **kwargs) -> None:
        self.runs.append((args, kwargs))
        if len(self.runs) <= self.fail_runs:
            raise nox.command.CommandFailed()

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def _venv(tmp_path: Path, reuse: bool) -> _Venv:
    location = tmp_path / "venv"
    (location / "lib").mkdir(parents=True)
    (location / "lib" / "torch.so").write_text("1 GB, in a real venv")
    return _Venv(location, reuse)


_names = itertools.count()


def _wrapped(body):
    """``body`` as the noxfile wraps a test session (``_session``, registered under a name of its own),
    called directly."""
    return noxfile._session(f"fake-session-for-tests-{next(_names)}")(body).func


@pytest.mark.parametrize("fails", [False, True], ids=["passed", "failed"])
def test_a_test_session_removes_its_venv_when_it_ends(tmp_path, fails):
    venv = _venv(tmp_path, reuse=False)
    ran = []

    def body(session):
        ran.append(Path(session.virtualenv.location).exists())  # there while the session runs
        if fails:
            raise nox.command.CommandFailed("tests failed")

    run = _wrapped(body)
    if fails:
        with pytest.raises(nox.command.CommandFailed):  # the failure still reaches nox
            run(_Session(venv))
    else:
        run(_Session(venv))
    assert ran == [True]
    assert not Path(venv.location).exists()


def test_reused_venvs_are_kept(tmp_path):
    venv = _venv(tmp_path, reuse=True)
    _wrapped(lambda session: None)(_Session(venv))
    assert (Path(venv.location) / "lib" / "torch.so").exists()


def test_every_matrix_session_prunes_and_main_and_gpu_keep_their_venvs():
    from nox.registry import get

    sessions = get()
    # _session's wrapper carries the session body as __wrapped__ (functools.wraps); a plain one does not
    pruned = {name for name, fn in sessions.items() if getattr(fn.func, "__wrapped__", None) is not None}
    assert set(noxfile.nox.options.sessions) <= pruned
    assert {"main", "gpu"}.isdisjoint(pruned)


def test_pip_is_tried_again_after_waits_then_succeeds(monkeypatch):
    waits = []
    monkeypatch.setattr(noxfile.time, "sleep", waits.append)
    session = _Session(fail_runs=2)
    noxfile._pip(session, "install", "triton")
    assert len(session.runs) == 3 and waits == list(noxfile.PIP_BACKOFF[:2])
    args, kwargs = session.runs[-1]
    assert args == ("python", "-m", "pip", "install", "triton")
    assert set(kwargs["env"]) == {"PIP_RETRIES", "PIP_DEFAULT_TIMEOUT"}
    assert len(session.warnings) == 2


def test_pip_gives_up_after_its_attempts(monkeypatch):
    waits = []
    monkeypatch.setattr(noxfile.time, "sleep", waits.append)
    session = _Session(fail_runs=99)
    with pytest.raises(nox.command.CommandFailed):
        noxfile._pip(session, "install", "no-such-package", python="/venv/bin/python")
    assert len(session.runs) == noxfile.PIP_ATTEMPTS and waits == list(noxfile.PIP_BACKOFF)
    assert all(kw.get("external") is True and args[0] == "/venv/bin/python" for args, kw in session.runs)
