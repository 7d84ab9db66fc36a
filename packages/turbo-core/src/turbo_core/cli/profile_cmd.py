"""``turbo profile [options] bench <suite> [suite args...]`` and ``turbo profile [options] -- python
train.py [args...]``: run under ``torch.profiler`` and print the hot-kernel table, each kernel
attributed to the turbo op and backend that launched it (``turbo_core.profiling``).

Options go before the target. ``--tool nsys|ncu|rocprof`` instead re-runs the same target in a
subprocess under that tool, with the turbo ranges emitted as NVTX / roctx ranges.

A Python target that calls no turbo op (no call reaches the dispatcher, so the table holds PyTorch's
own ops only) exits 1 after the table, or with the target's own non-zero status, and says so on
stderr with every installed backend and whether it can run here (Triton on a CPU: set
``TRITON_INTERPRET=1``). When its turbo ops all ran on the reference backend TORCH while other
backends are installed, a note names those backends and why they ran nothing; the status is the
target's. A bench target reports for itself (``turbo bench`` exits 1 when no turbo provider ran).
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import subprocess
import sys

import torch

from turbo_core import timing
from turbo_core.bench.runner import environment
from turbo_core.cli import bench_cmd
from turbo_core.cli.inventory import backend_rows
from turbo_core.profiling.labels import parse_label
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


def turbo_calls(events) -> collections.Counter:
    """``{(primitive, backend): calls}`` from the profiler's events: one ``turbo::<primitive>[<backend>]``
    range (its CPU copy) per dispatched call."""
    calls: collections.Counter = collections.Counter()
    for event in events:
        parsed = parse_label(event.name)
        if parsed is not None and getattr(event.device_type, "name", "CPU") == "CPU":
            calls[parsed] += 1
    return calls


def _backend_line(row: dict) -> str:
    status = "can run here" if row["available"] else f"cannot run here: {row['reason']}"
    return f"  {row['name']} ({row['package']} {row['version']}): {status}"


def explain_turbo_calls(calls: collections.Counter) -> list[str]:
    """stderr lines about which backends served the target's turbo calls: why none ran when there was no
    call (every installed backend and its status), or, when every call ran on the reference backend TORCH,
    the other installed backends and why they served none; no line when another backend ran a call."""
    rows = backend_rows()
    if not calls:
        return ["turbo profile: the target ran no turbo op: none of its calls reached turbo's dispatcher "
                "(turbo_core.ops, turbo_core.modules, or a model converted by turbo_core.integrations); "
                "the table above is PyTorch's own ops", "turbo profile: installed backends:",
                *(_backend_line(r) for r in rows)]
    if {backend for _, backend in calls} != {"TORCH"}:
        return []
    others = [r for r in rows if r["name"] != "TORCH"]
    if not others:
        return []
    down = [r for r in others if not r["available"]]
    up = [r["name"] for r in others if r["available"]]
    head = "turbo profile: every turbo op ran on the reference backend TORCH"
    if up:
        head += (f" ({', '.join(up)} can run here but served none of its calls; choose a backend with "
                 "turbo_core.use_backend or TURBO_<FAMILY>_BACKEND)")
    return [head + ("; these backends cannot run here:" if down else "")] + [
        f"  {r['name']}: {r['reason']}" for r in down]


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
    events = prof.events()
    rows = hot_rows(events)
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
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if code not in (0, None):
        print(f"turbo profile: the target exited with {code}", file=sys.stderr)
    if words[0] != "bench":
        calls = turbo_calls(events)
        for line in explain_turbo_calls(calls):
            print(line, file=sys.stderr)
        if not calls and status == 0:
            return 1
    return status
