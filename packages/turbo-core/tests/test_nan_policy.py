"""The NaN/Inf policy (docs/numerics.md) against the reference backend TORCH, as every backend runs
it (``turbo_core.testing.nan_policy``). Among the cases, the regressions of what the policy found in
TORCH: NaN in one varlen sequence's keys, values, queries or dout (or in rows past the last sequence)
reached every other sequence (``0 * NaN`` in the masked products), and a NaN sink gave finite
outputs (its NaN lse was replaced by 0)."""

from turbo_core.testing.nan_policy import NAN_CASES, nan_policy_suite

TestNanPolicyTorch = nan_policy_suite("TORCH")


def test_every_op_family_has_nan_cases():
    from turbo_core.testing import properties

    covered = {c.primitive for c in NAN_CASES}
    for family in properties._MODULES:
        served = {p.primitive for p in family.PROPERTIES} & covered
        assert served, f"{family.__name__}: no NaN/Inf policy case"
