"""The shared conformance suite on the GPU: ``conformance_suite("TRITON", device="cuda")`` and
``conformance_suite("TORCH", device="cuda")`` through pytest, with a JSON summary (run on the GPU
machine).

Run from the repository root (no install needed):

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/conformance_gpu.py --out conformance_gpu.json \\
      [--backends TRITON,TORCH] [--families gemm,moe,...] [-k EXPR] [--workers 8] [--max-minutes 9]

What it does: writes a two-line test module into a temporary folder (one suite class per backend,
so no package conftest applies: turbo-core's would unload TURBO_PLUGINS, turbo-triton's would set
TRITON_INTERPRET=1), runs pytest on it in a subprocess — over ``--workers`` pytest-xdist processes
when xdist is installed (Triton's compilation is CPU-bound; they share the one GPU and Triton's
cache) — and records every test report as it arrives, so a run stopped at ``--max-minutes`` still
leaves a summary of what ran. The JSON (rewritten at the end) holds, per backend: passed / failed /
skipped / error / not_run counts, the same per family (``turbo_core.testing.cases.FAMILIES``), each
failure with its message, the skip reasons with their counts and a few case ids, and every case's
outcome; plus the GPU, torch, triton and the command.

``--device cpu`` runs the same thing on the CPU (TRITON under TRITON_INTERPRET=1, set for the
subprocess when unset): the script's own smoke test, e.g. ``--device cpu --families normalization``.
Exit status: 0 when nothing failed and the run was complete, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

LINES_ENV = "CONFORMANCE_GPU_LINES"  # the recorder's output (JSON lines), set for the subprocess
FAMILIES_ENV = "CONFORMANCE_GPU_FAMILIES"  # comma-separated families to keep ("" = all)
PLUGIN = os.path.splitext(os.path.basename(__file__))[0]  # this module, loaded by pytest with -p


# -- the pytest plugin (loaded in the subprocess) ---------------------------------------------------

def _family_of() -> dict[str, str]:
    """case id -> family."""
    import importlib

    from turbo_core.testing.cases import FAMILIES

    return {c.id: fam for fam in FAMILIES
            for c in importlib.import_module(f"turbo_core.testing.cases.{fam}").CASES}


def _case_id(nodeid: str) -> str:
    return nodeid[nodeid.index("[") + 1: -1] if "[" in nodeid else nodeid


def _backend_of(nodeid: str) -> str:
    parts = nodeid.split("::")
    return parts[1][len("Test"):] if len(parts) > 2 else "?"


def pytest_collection_modifyitems(config, items):
    keep = {f for f in os.environ.get(FAMILIES_ENV, "").split(",") if f}
    if not keep:
        return
    family = _family_of()
    selected = [i for i in items if family.get(_case_id(i.nodeid)) in keep]
    deselected = [i for i in items if family.get(_case_id(i.nodeid)) not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


class _Recorder:
    """Appends one JSON line per report that decides a test's outcome (on the controller only)."""

    def __init__(self, path: str):
        self.path = path

    def pytest_runtest_logreport(self, report):
        if report.when != "call" and report.outcome == "passed":
            return
        message = ""
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)[-2000:]
        line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                "message": message, "duration": round(report.duration, 3)}
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def pytest_configure(config):
    path = os.environ.get(LINES_ENV)
    if path and not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(_Recorder(path), "conformance-gpu-recorder")


# -- the driver ------------------------------------------------------------------------------------

def _environment(device: str, env: dict) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "hip": torch.version.hip, "device": device, "TRITON_INTERPRET": env.get("TRITON_INTERPRET"),
            "TURBO_PLUGINS": env.get("TURBO_PLUGINS")}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.startswith("cuda") and torch.cuda.is_available():
        dev = torch.device(device)
        index = dev.index if dev.index is not None else 0
        props = torch.cuda.get_device_properties(index)
        info["gpu"] = props.name
        info["capability"] = f"{props.major}.{props.minor}"
        info["driver"] = _driver()
    return info


def _driver() -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _summarize(lines: list[dict], backends: list[str], expected: dict[str, str] | None) -> dict:
    """Per backend: counts, per family, failures, skip reasons, every case's outcome."""
    family = _family_of()
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    outcome: dict[str, tuple[str, str]] = {}
    for line in lines:
        kind = line["outcome"]
        if kind == "failed" and line["when"] != "call":
            kind = "error"
        old = outcome.get(line["nodeid"])
        if old is None or rank[kind] > rank[old[0]]:
            outcome[line["nodeid"]] = (kind, line["message"])
    result = {}
    for backend in backends:
        got = {_case_id(n): o for n, o in outcome.items() if _backend_of(n) == backend}
        counts = collections.Counter(k for k, _ in got.values())
        fams: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for case, (kind, _) in got.items():
            fams[family.get(case, "?")][kind] += 1
        not_run = None
        if expected is not None:
            missing = [c for c in expected if c not in got]
            not_run = len(missing)
            for c in missing:
                fams[expected[c]]["not_run"] += 1
        skips: dict[str, list[str]] = collections.defaultdict(list)
        for case, (kind, msg) in got.items():
            if kind == "skipped":
                skips[msg].append(case)
        result[backend] = {
            "passed": counts["passed"], "failed": counts["failed"], "skipped": counts["skipped"],
            "error": counts["error"], "not_run": not_run,
            "families": {f: dict(c) for f, c in sorted(fams.items())},
            "failures": [{"case": c, "family": family.get(c, "?"), "outcome": k, "message": m}
                         for c, (k, m) in sorted(got.items()) if k in ("failed", "error")],
            "skip_reasons": [{"reason": r, "count": len(ids), "examples": ids[:5]}
                             for r, ids in sorted(skips.items(), key=lambda kv: -len(kv[1]))],
            "cases": {c: k for c, (k, _) in sorted(got.items())},
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON summary to write")
    ap.add_argument("--backends", default="TRITON,TORCH", help="comma-separated backend names")
    ap.add_argument("--device", default="cuda", help="the device the cases run on (default cuda)")
    ap.add_argument("--families", default="", help="comma-separated families to run (default all)")
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression (no not_run count then)")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                    help="pytest-xdist processes when xdist is installed (1: none)")
    ap.add_argument("--max-minutes", type=float, default=9.0, help="stop pytest after this long")
    args = ap.parse_args()

    from turbo_core.backend import normalize_backend_name
    from turbo_core.testing.cases import FAMILIES

    backends = [normalize_backend_name(b) for b in args.backends.split(",") if b.strip()]
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        ap.error(f"--families: unknown {unknown}; known: {', '.join(FAMILIES)}")
    env = dict(os.environ)
    if args.device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
    elif env.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("warning: TRITON_INTERPRET is set: Triton kernels run in the interpreter, not on the GPU",
              file=sys.stderr)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    env[FAMILIES_ENV] = ",".join(families)

    tmp = tempfile.mkdtemp(prefix="conformance_gpu_")
    lines_path = os.path.join(tmp, "reports.jsonl")
    env[LINES_ENV] = lines_path
    module = os.path.join(tmp, "test_conformance_run.py")
    with open(module, "w") as f:
        f.write("from turbo_core.testing.conformance import conformance_suite\n\n")
        for b in backends:
            f.write(f"Test{b} = conformance_suite({b!r}, device={args.device!r})\n")
    cmd = [sys.executable, "-m", "pytest", module, "-q", "-p", PLUGIN, "-p", "no:cacheprovider",
           "--rootdir", tmp, "-o", "addopts=", "--tb=line", "-rN"]
    import importlib.util

    workers = args.workers if importlib.util.find_spec("xdist") is not None else 1
    if workers > 1:
        cmd += ["-n", str(workers)]
    if args.keyword:
        cmd += ["-k", args.keyword]

    from turbo_core.testing.conformance import all_cases

    family = _family_of()
    expected = None if args.keyword else {c.id: family[c.id] for c in all_cases()
                                          if not families or family[c.id] in families}
    summary = {"command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "pytest": cmd[3:],
               "workers": workers}
    print("running:", " ".join(cmd), flush=True)
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=args.max_minutes * 60)
        complete = code in (0, 1)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        code, complete = None, False
        print(f"stopped after {args.max_minutes} minutes", file=sys.stderr)
    lines = []
    if os.path.exists(lines_path):
        with open(lines_path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    summary.update({"wall_s": round(time.time() - start, 1), "pytest_exit": code, "complete": complete,
                    "environment": _environment(args.device, env),  # after the run: no CUDA context beside it
                    "backends": _summarize(lines, backends, expected)})
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    ok = complete
    for b, r in summary["backends"].items():
        ok = ok and not r["failed"] and not r["error"]
        print(f"{b} on {args.device}: {r['passed']} passed, {r['failed']} failed, {r['error']} errors, "
              f"{r['skipped']} skipped, not run {r['not_run']}")
        for fam, c in r["families"].items():
            print(f"  {fam}: {dict(c)}")
        for fail in r["failures"][:20]:
            print(f"  FAIL {fail['case']}: {fail['message'][:200]}")
        for s in r["skip_reasons"][:10]:
            print(f"  skip x{s['count']}: {s['reason'][:200]}")
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
