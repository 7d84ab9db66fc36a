"""``docs/primus-compatibility.md``'s turbo_deepep names (``primus_turbo.pytorch.deep_ep``) import."""

from __future__ import annotations

from pathlib import Path

import pytest

from turbo_core.testing.compat_doc import promised_names, resolve

DOC = Path(__file__).resolve().parents[3] / "docs" / "primus-compatibility.md"
PROMISED = promised_names(DOC, "turbo_deepep")


def test_the_table_promises_deep_eps_buffer_api():
    assert {"turbo_deepep.Buffer", "turbo_deepep.Config", "turbo_deepep.EventOverlap"} <= set(PROMISED)


@pytest.mark.parametrize("name", PROMISED)
def test_every_promised_name_imports(name):
    assert resolve(name) is not None
