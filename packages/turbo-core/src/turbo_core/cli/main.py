"""``turbo`` — the command-line entry point (``turbo backends``, ``turbo doctor``, ``turbo bench``, ``turbo accuracy``, ``turbo profile``, ``turbo tune``)."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turbo", description="turbo: training operators and their backends")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("backends", help="list every backend: package, version, availability, primitives")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p = sub.add_parser("doctor", help="explain the platform and any plugin or configuration problem")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    from turbo_core.cli import bench_cmd

    bench_cmd.add_parser(sub)
    from turbo_core.cli import profile_cmd

    profile_cmd.add_parser(sub)
    from turbo_core.cli import accuracy_cmd

    accuracy_cmd.add_parser(sub)
    from turbo_core.cli import demo_cmd

    demo_cmd.add_parser(sub)
    from turbo_core.cli import tune_cmd

    tune_cmd.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "backends":
        from turbo_core.cli.backends_cmd import run
    elif args.command == "bench":
        from turbo_core.cli.bench_cmd import run
    elif args.command == "profile":
        from turbo_core.cli.profile_cmd import run
    elif args.command == "accuracy":
        from turbo_core.cli.accuracy_cmd import run
    elif args.command == "demo":
        from turbo_core.cli.demo_cmd import run
    elif args.command == "tune":
        from turbo_core.cli.tune_cmd import run
    else:
        from turbo_core.cli.doctor_cmd import run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
