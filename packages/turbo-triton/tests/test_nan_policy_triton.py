"""The NaN/Inf policy (docs/numerics.md) against TRITON under the CPU interpreter. Among the cases,
the regression of what the policy found: the FP8 GEMMs (dense and grouped) read the interpreter's
FP8 conversion, which takes NaN and Inf codes for numbers (E4M3's NaN became 480)."""

from turbo_core.testing.nan_policy import nan_policy_suite

TestNanPolicyTriton = nan_policy_suite("TRITON")
