"""Keep only the tuned choices of a ``turbo tune`` database that its ``turbo tune --check`` confirmed.

A campaign keeps a kernel config when it beat the backend's heuristics by ``--min-gain`` in one
timing; ``--check`` re-times it independently. This script writes the database to ship: every
entry of ``DB`` minus the stored configs (and backend choices) whose check row is not ``ok`` or whose
ratio (heuristic time / stored time) is below ``--min-ratio`` (default 1.0: no slower than the
heuristics in the re-timing either). Entries left with neither a config nor a backend choice other
than their heuristic are dropped; a backend choice equal to the heuristic's is left out (the entry
keeps its configs only), so a shipped file never overrides another package's choice for the same
key with a non-decision. Prints what was dropped and why.

A script, not a suite or a test: it is a release step that edits a database file from the outputs of a
``turbo tune`` campaign and its check, both run on the GPU the database is for.

    python3 tools/ship_tuning_db.py hipblaslt_sm90.json hipblaslt_sm90.check.json \\
        --out packages/turbo-hipblaslt/src/turbo_hipblaslt/tuning_db/sm90.json

Several check reports may be given (``--check A B``); a choice must pass in every one that timed it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("db", help="the campaign's database (turbo tune --out)")
    p.add_argument("check", nargs="+", help="turbo tune --check --report files of that database")
    p.add_argument("--out", required=True)
    p.add_argument("--min-ratio", type=float, default=1.0)
    args = p.parse_args()

    from turbo_core.tuning.db import TuningDB

    db = TuningDB.load(args.db)
    verdict: dict[tuple[str, str], list[str]] = {}  # (entry label, "backend X" / "X config") -> reasons to drop
    for path in args.check:
        for row in json.load(open(path)):
            if row["status"] == "same":
                continue
            why = []
            if row["status"] != "ok":
                why.append(row["status"])
            elif row["ratio"] is not None and row["ratio"] < args.min_ratio:
                why.append(f"ratio {row['ratio']:.3f} < {args.min_ratio}")
            verdict.setdefault((row["entry"], row["stored"]), []).extend(why)
    out = TuningDB()
    kept = dropped = 0
    for e in db.entries():
        label = f"{e.primitive} {e.key.label()}"
        if e.backend is not None:
            why = verdict.get((label, f"backend {e.backend}"))
            if why:  # the backend choice (with its config, if any, which was timed with it)
                print(f"drop {label} backend {e.backend}: {'; '.join(why)}")
                e.configs.pop(e.backend, None)
                e.backend = None if e.backend != e.heuristic else e.backend
        for b in list(e.configs):
            why = verdict.get((label, f"{b} config"))
            if why:
                print(f"drop {label} {b} config: {'; '.join(why)}")
                del e.configs[b]
        if e.backend is not None and e.backend == e.heuristic:  # no news: keep the configs only
            e.backend, e.times_us, e.heuristic, e.heuristic_time_us = None, {}, None, None
        if not e.configs and e.backend is None:
            dropped += 1
            continue
        kept += 1
        out.add(e)
    meta = json.load(open(args.db)).get("meta", {})
    meta["shipped_by"] = ["ship_tuning_db.py", *(os.path.basename(a) if os.path.exists(a) else a for a in sys.argv[1:])]
    out.save(args.out, meta)
    print(f"wrote {kept} entries to {args.out} ({dropped} dropped: unconfirmed or nothing to change)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
