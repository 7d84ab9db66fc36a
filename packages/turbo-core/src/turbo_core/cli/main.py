"""``turbo`` — the command-line entry point: ``turbo backends``, ``doctor``, ``bench``, ``accuracy``,
``profile``, ``tune`` and ``demo``, one module each (``<name>_cmd``, with ``add_parser(sub)`` and
``run(args)``). A command module imports at its top only what building its parser needs; ``run``
imports the command's machinery (benchmark suites, the demo model, rich's progress bars), so
``turbo --help`` and ``turbo backends`` stay fast.

Exit status 2, with one line per problem on stderr and no traceback, for a bad command line, a bad turbo
setting of the environment (checked before any command but ``doctor``, which lists it among its
problems; :mod:`turbo_core.cli.settings_check`), or a backend chosen by a setting that cannot run a
call (``turbo_core.BackendError``)."""

from __future__ import annotations

import argparse
import os
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
    from turbo_core.cli import settings_check
    from turbo_core.dispatch.dispatcher import BackendError

    args = _parser().parse_args(argv)
    if args.command != "doctor":
        problems = settings_check.problems()
        if problems:
            for line in problems:
                print(f"turbo {args.command}: {line}", file=sys.stderr)
            return 2
    try:
        return COMMANDS[args.command].run(args)
    except BackendError as exc:
        print(f"turbo {args.command}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`turbo backends --matrix | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
