"""The tuning database turbo-triton ships (``turbo_triton/tuning_db/*.json``): it loads, every entry
is for a GPU arch and records the versions it was measured with, every TRITON kernel config is one
the GEMM launcher accepts, and every backend choice was timed against the backends it beat."""

from __future__ import annotations

from pathlib import Path

import pytest

import turbo_triton
from turbo_core.tuning.db import TuningDB
from turbo_triton.gemm import configs

FILES = sorted((Path(turbo_triton.__file__).parent / "tuning_db").glob("*.json"))


def test_a_database_is_shipped():
    assert [f.name for f in FILES] == ["sm90.json"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shipped_entries_are_well_formed(path):
    db = TuningDB.load(path)
    entries = db.entries()
    assert entries
    for e in entries:
        assert e.key.arch == path.stem, e.key
        assert e.primitive in ("gemm", "gemm_fp8")
        assert "turbo-triton" in e.versions and "triton" in e.versions
        if e.backend is not None:  # a measured choice: the winner and the heuristic's backend were both timed
            assert e.backend in e.times_us and e.heuristic in e.times_us
            assert e.times_us[e.backend] == min(e.times_us.values())
        for backend, choice in e.configs.items():
            assert backend == "TRITON" and choice.key.arch == path.stem
            configs.from_dict(choice.config)  # raises on a config the launcher would ignore
            assert choice.time_us < choice.default_time_us


def test_fp8_backward_choices_are_triton_over_hipblaslt():
    """The FP8 entries record the sm90 campaign's choice of TRITON over HIPBLASLT on the backward layouts."""
    fp8 = [e for e in TuningDB.load(FILES[0]).entries() if e.primitive == "gemm_fp8"]
    assert fp8 and all(e.backend == "TRITON" and e.heuristic == "HIPBLASLT" for e in fp8)
    assert all(e.key.layout.split("/")[0] in ("NN", "TN") for e in fp8)
