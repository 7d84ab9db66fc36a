"""The tuning database turbo-hipblaslt ships (``turbo_hipblaslt/tuning_db/*.json``): algorithm ranks
only (no backend choices), each a config the launcher accepts, stored for its exact key, with the
cuBLASLt version it was tuned with."""

from __future__ import annotations

from pathlib import Path

import pytest

import turbo_hipblaslt
from turbo_core.tuning.db import TuningDB
from turbo_hipblaslt.algos import algo_from_config

FILES = sorted((Path(turbo_hipblaslt.__file__).parent / "tuning_db").glob("*.json"))


def test_a_database_is_shipped():
    assert [f.name for f in FILES] == ["sm90.json"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shipped_ranks_are_well_formed(path):
    entries = TuningDB.load(path).entries()
    assert entries
    for e in entries:
        assert e.backend is None and e.primitive in ("gemm", "gemm_fp8")
        assert list(e.configs) == ["HIPBLASLT"]
        choice = e.configs["HIPBLASLT"]
        assert choice.match == "exact" and choice.key.arch == path.stem == e.key.arch
        assert algo_from_config(choice.config) >= 1  # rank 0 is the heuristic's own choice: never stored
        assert choice.time_us < choice.default_time_us
        assert "cublaslt" in choice.versions
