"""The parts of the repository's README.md that tests run or check: its fenced blocks, its Python quick
start, its shell command lines and the ``turbo ...`` commands it names inline."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"

_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)\n(.*?)^```\s*$", re.M | re.S)
_INLINE = re.compile(r"(?<!`)`(turbo [^`]+)`(?!`)")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block, in order (language ``""`` when none is given)."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def quick_start(text: str) -> str:
    """The README's one ``python`` block."""
    blocks = [body for lang, body in fenced_blocks(text) if lang == "python"]
    assert len(blocks) == 1, f"expected one python block in README.md, found {len(blocks)}"
    return blocks[0]


def shell_lines(text: str) -> list[str]:
    """Every line of the plain fenced blocks, its ``#`` comment removed, blank lines left out."""
    lines = []
    for lang, body in fenced_blocks(text):
        if lang:
            continue
        for line in body.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command:
                lines.append(command)
    return lines


def install_lines(text: str) -> list[str]:
    """The command lines of the README's Install section (its first plain fenced block)."""
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    return shell_lines(section)


def install_env(text: str) -> dict[str, str]:
    """The variables that the Install section's ``export NAME=value`` lines set."""
    pairs = [line.removeprefix("export ").split("=", 1) for line in install_lines(text) if line.startswith("export ")]
    return dict(pairs)


def turbo_commands(text: str) -> list[list[str]]:
    """The argument lists of the ``turbo ...`` lines of the plain fenced blocks, in order, without duplicates."""
    found: list[list[str]] = []
    for line in shell_lines(text):
        words = shlex.split(line)
        if words[0] == "turbo" and words[1:] not in found:
            found.append(words[1:])
    return found


def inline_turbo_commands(text: str) -> list[list[str]]:
    """The argument lists of the inline code spans that start with ``turbo `` and hold no placeholder."""
    return [shlex.split(span)[1:] for span in _INLINE.findall(text) if "<" not in span and "..." not in span]
