"""Fail on session or run history in the product: ``python tools/check_history.py [PATH ...]``.

Source, docstrings, comments and READMEs under ``packages/`` state what the code does and why, in the
present tense; measurements live in the results dataset (``benchmarks/data``) and history in git. This
check lists every line (``file:line: text``) that narrates instead:

* session and run tags: "Session 18", "session-10", "S17", result files tagged "-s9-", "run1", "run 2";
* dates (2026-11-30) and issue numbers ("issue 5", "issue5-targets");
* measured deltas: "was 0.65x", "66% -> 78%", "1799 vs 1078 GB/s", "4.3 us against 5.8", "1.4x faster",
  that is a number followed by x, %, us, µs, TB/s, GB/s or TFLOP/s after "was", beside an arrow, "vs"
  or "against", or before "faster"/"slower".

Shape arrows ("[M, K] -> [M, N]"), ``-> None`` annotations, version numbers, hex, arch names
("sm90", "gfx942") and ISO timestamps do not match, and in Python files a date counts only in comments
and docstrings (in a string literal it is test data: a results row, a report heading). A line that must quote such text (a test of this check, a third-party
changelog) carries ``check-history: ignore``.

Scans ``.py .md .toml .cpp .h .hpp`` files (default: ``packages/`` beside this script's folder); prints
a one-line summary; exits 1 when anything matched. Standard library only.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

SUFFIXES = frozenset({".py", ".md", ".toml", ".cpp", ".h", ".hpp"})
SKIP_DIRS = frozenset({".git", "__pycache__", "build", "dist", ".nox", ".venv", "node_modules"})
WAIVER = "check-history: ignore"

_NUM = r"\d+(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?"  # 0.65, 74-80, 1.41-2.47
_UNIT = r"(?:(?:x|%|us|µs|TB/s|GB/s|TFLOP/s|TFLOPS)(?![\w/]))"
_FIGURE = rf"~?{_NUM}\s?{_UNIT}"
_ARROW = r"(?:->|→|=>)"

#: (name, pattern): what each one catches is named in the report.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("session", re.compile(r"\bsessions?[\s_-]?\d+", re.IGNORECASE)),
    ("run tag", re.compile(r"(?<![\w.])S\d{1,2}[a-z]?(?![\w.])")),  # S17, S18b; not sub.s32, S4096, s0
    ("run tag", re.compile(r"[-_]s\d{1,2}[a-z]?(?=[-_.*])")),  # attention-sweep-s9-mla, fast-s17*-h200
    ("run tag", re.compile(r"\brun[-_]?\d+\b", re.IGNORECASE)),  # run1, run-2, run8
    ("run tag", re.compile(r"\bRun \d+\b")),  # "Run 1's failures"; not "between run 0 and run 1"
    ("date", re.compile(r"(?<![\w.])20\d\d-[01]\d-[0-3]\d(?![\dT])")),  # not an ISO timestamp (test data)
    ("issue", re.compile(r"\bissue[\s_#-]?\d+", re.IGNORECASE)),
    ("delta", re.compile(rf"\bwas\s(?:about\s|at\s)?~?{_NUM}\s?{_UNIT}")),
    ("delta", re.compile(rf"{_FIGURE}\s?{_ARROW}\s?~?{_NUM}")),
    ("delta", re.compile(rf"(?<![\w.]){_NUM}\s?{_ARROW}\s?{_FIGURE}")),
    ("delta", re.compile(rf"(?<![\w.]){_NUM}\s?{_UNIT}?\s(?:vs\.?|against)\s~?{_FIGURE}")),
    ("delta", re.compile(rf"{_FIGURE}\s(?:vs\.?|against)\s~?{_NUM}")),
    ("delta", re.compile(rf"{_FIGURE}\s(?:faster|slower)\b")),
)


def default_root() -> Path:
    return Path(__file__).resolve().parent.parent / "packages"


def files_under(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_file():
            if path.suffix in SUFFIXES:
                yield path
            continue
        for sub in sorted(path.rglob("*")):
            if sub.is_file() and sub.suffix in SUFFIXES and not SKIP_DIRS & set(sub.parts):
                yield sub


def line_hits(text: str, prose: str | None = None) -> list[str]:
    """The names of the patterns ``text`` (one line) matches, empty for a clean or waived line. ``prose``:
    the comment and docstring text of a Python line (``None``: the whole line is prose); dates count
    there only, since a date in a string literal is test data (a results row, a report heading)."""
    if WAIVER in text:
        return []
    names = {name for name, pattern in PATTERNS if name not in _PROSE_ONLY and pattern.search(text)}
    names |= {name for name, pattern in PATTERNS if name in _PROSE_ONLY and pattern.search(text if prose is None
                                                                                            else prose)}
    return sorted(names)


_PROSE_ONLY = frozenset({"date"})


def python_prose(text: str) -> dict[int, str] | None:
    """Line number -> the comment and docstring text on that line of Python source ``text`` (a string
    that stands alone as a statement counts as a docstring); ``None`` when it does not tokenize."""
    prose: dict[int, list[str]] = {}
    previous = tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                prose.setdefault(tok.start[0], []).append(tok.string)
            elif tok.type == tokenize.STRING and previous in _STATEMENT_START:
                for number, line in enumerate(tok.string.splitlines(), tok.start[0]):
                    prose.setdefault(number, []).append(line)
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                previous = tok.type
    except (tokenize.TokenError, SyntaxError):
        return None
    return {number: " ".join(parts) for number, parts in prose.items()}


_STATEMENT_START = frozenset({tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING})


def scan(path: Path) -> Iterator[tuple[int, list[str], str]]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    prose = python_prose(text) if path.suffix == ".py" else None
    for number, line in enumerate(text.splitlines(), 1):
        names = line_hits(line, None if prose is None else prose.get(number, ""))
        if names:
            yield number, names, line.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: packages/)")
    args = parser.parse_args(argv)
    paths = args.paths or [default_root()]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such path: {', '.join(missing)}")
    cwd = Path.cwd()
    scanned, hits, hit_files = 0, 0, 0
    for path in files_under(paths):
        scanned += 1
        found = list(scan(path))
        if not found:
            continue
        hit_files += 1
        shown = path.resolve().relative_to(cwd) if path.resolve().is_relative_to(cwd) else path
        for number, names, line in found:
            hits += 1
            print(f"{shown}:{number}: [{', '.join(names)}] {line[:200]}")
    if hits:
        print(f"check_history: {hits} line(s) in {hit_files} of {scanned} files narrate sessions, runs, dates or "
              "measured deltas; state what the code does (measurements belong in benchmarks/data, history in git)")
        return 1
    print(f"check_history: no session or run history in {scanned} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
