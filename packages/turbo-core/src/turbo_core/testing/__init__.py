"""Test kit shared by turbo-core and every backend package (third-party ones included)."""

from turbo_core.testing.bits import assert_same_bits, bit_mismatch
from turbo_core.testing.determinism import deterministic_check
from turbo_core.testing.numerics import (
    SNR_DB,
    TOLERANCES,
    assert_close_normwise,
    assert_close_to_reference,
    assert_snr,
    snr_db,
    tolerance,
)
from turbo_core.testing.plugin_checks import backend_row, imported_modules_after

__all__ = [
    "SNR_DB",
    "TOLERANCES",
    "assert_close_normwise",
    "assert_close_to_reference",
    "assert_same_bits",
    "assert_snr",
    "backend_row",
    "bit_mismatch",
    "deterministic_check",
    "imported_modules_after",
    "snr_db",
    "tolerance",
]
