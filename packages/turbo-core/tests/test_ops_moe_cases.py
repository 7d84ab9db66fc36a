"""The MoE conformance cases (``turbo_core.testing.cases.moe``) on the reference backend TORCH:
every op forward and backward against float64 loop math (the whole suite, all families, also runs
from test_ops_gemm.py's ``conformance_suite("TORCH")``)."""

import pytest

from turbo_core import use_backend
from turbo_core.testing.cases.moe import CASES


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_on_torch(case):
    with use_backend("TORCH"):
        case.run()
