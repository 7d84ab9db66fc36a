"""``turbo profile [options] bench <suite> [suite args...]`` and ``turbo profile [options] -- python
train.py [args...]``: run under ``torch.profiler`` and print the hot-kernel table, each kernel
attributed to the turbo op and backend that launched it (``turbo_core.profiling``).

Options go before the target. ``--tool nsys|ncu|rocprof`` instead re-runs the same target in a
subprocess under that tool, with the turbo ranges emitted as NVTX / roctx ranges.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

import torch

from turbo_core import timing
from turbo_core.bench.runner import environment
from turbo_core.cli import bench_cmd
from turbo_core.profiling.session import (
    TOOLS,
    ProfileError,
    emit_nvtx,
    profile_call,
    python_target,
    tool_command,
)
from turbo_core.profiling.table import format_table, hot_rows

_USAGE_HINT = "give a target: `turbo profile bench <suite> [args]` or `turbo profile -- python train.py [args]`"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "profile", help="run a bench suite or a Python command under torch.profiler; hot-kernel table",
        description="Options come before the target: turbo profile [options] bench <suite> [suite args] | "
                    "turbo profile [options] -- python train.py [args]")
    p.add_argument("--top", type=int, default=20, help="rows to print (default 20; 0: all)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (chrome://tracing, Perfetto) here")
    p.add_argument("--out", metavar="FILE", help="write the table rows as JSON here")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks (slower; shown in the trace)")
    p.add_argument("--tool", choices=list(TOOLS),
                   help="re-run the target under this external profiler (subprocess) instead of torch.profiler")
    p.add_argument("--tool-args", metavar="ARGS",
                   help="arguments for --tool placed before the command, one shell-quoted string "
                        "(replaces the defaults, e.g. nsys: 'profile --trace=cuda,nvtx,osrt -o turbo_profile')")
    p.add_argument("--emit-nvtx", action="store_true",
                   help="run under torch.autograd.profiler.emit_nvtx (what --tool uses; no table)")
    p.add_argument("target", nargs=argparse.REMAINDER,
                   help="`bench <suite> [suite args]` or `-- python script.py [args]` / `-- python -m module`")


def _bench_args(words: list[str]) -> argparse.Namespace:
    """The ``turbo bench`` arguments in ``words`` (argparse exits 2 with its message on bad ones)."""
    parser = argparse.ArgumentParser(prog="turbo")
    bench_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["bench", *words])


def _target(words: list[str]):
    """``(callable, device)`` running the target in this process."""
    if words and words[0] == "bench":
        bench_args = _bench_args(words[1:])

        def run_bench() -> int:
            timing.QUEUE_AHEAD = False  # no sleep kernel in the trace
            return bench_cmd.run(bench_args)

        return run_bench, bench_args.device
    if not words:
        raise ProfileError(_USAGE_HINT)
    return python_target(words), None


def run(args) -> int:
    words = list(args.target)
    if words and words[0] == "--":
        words = words[1:]
    try:
        if args.top < 0:
            raise ProfileError(f"--top must be >= 0, got {args.top}")
        if args.tool:
            tool_args = shlex.split(args.tool_args) if args.tool_args is not None else None
            if not words:
                raise ProfileError(_USAGE_HINT)
            turbo_args = words if words[0] == "bench" else ["--", *words]
            cmd = tool_command(args.tool, turbo_args, tool_args)
            ignored = [f for f, v in (("--trace", args.trace), ("--out", args.out)) if v]
            if ignored:
                print(f"turbo profile: {', '.join(ignored)} ignored with --tool ({args.tool} writes its own report)",
                      file=sys.stderr)
            print(f"turbo profile: running {shlex.join(cmd)}", file=sys.stderr)
            return subprocess.call(cmd)
        fn, device = _target(words)
        if args.emit_nvtx:
            with emit_nvtx():
                code = fn()
            return code if isinstance(code, int) else 0
    except ProfileError as exc:
        print(f"turbo profile: {exc}", file=sys.stderr)
        return 2

    prof, code = profile_call(fn, with_stack=args.with_stack)
    rows = hot_rows(prof.events())
    print(format_table(rows, top=args.top or None))
    if args.trace:
        prof.export_chrome_trace(args.trace)
        print(f"turbo profile: wrote trace {args.trace}", file=sys.stderr)
    if args.out:
        env = environment(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        env["argv"] = ["turbo", *sys.argv[1:]]
        with open(args.out, "w") as fh:
            json.dump({"environment": env, "kind": rows[0].kind if rows else None,
                       "rows": [r.as_dict() for r in rows]}, fh, indent=1)
        print(f"turbo profile: wrote {args.out}", file=sys.stderr)
    if code not in (0, None):
        print(f"turbo profile: the target exited with {code}", file=sys.stderr)
    return code if isinstance(code, int) else (0 if code is None else 1)
