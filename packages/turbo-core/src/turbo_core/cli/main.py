"""``turbo`` — the command-line entry point: ``turbo backends``, ``doctor``, ``bench``, ``accuracy``,
``profile``, ``tune`` and ``demo``, one module each (``<name>_cmd``, with ``add_parser(sub)`` and
``run(args)``). A command module imports at its top only what building its parser needs; ``run``
imports the command's machinery (benchmark suites, the demo model, rich's progress bars), so
``turbo --help`` and ``turbo backends`` stay fast."""

from __future__ import annotations

import argparse
import sys

from turbo_core.cli import (
    accuracy_cmd,
    backends_cmd,
    bench_cmd,
    demo_cmd,
    doctor_cmd,
    profile_cmd,
    tune_cmd,
)

#: Subcommand -> its module, in ``turbo --help`` order.
COMMANDS = {"backends": backends_cmd, "doctor": doctor_cmd, "bench": bench_cmd, "profile": profile_cmd,
            "accuracy": accuracy_cmd, "demo": demo_cmd, "tune": tune_cmd}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turbo", description="turbo: training operators and their backends")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return COMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
