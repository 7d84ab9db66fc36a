"""Algorithm selection on the CPU, over the simulated library (``fake_ext``: its heuristic offers
``offers`` algorithms, records the rank each launch asked for, and refuses a rank beyond its offer at
the "heuristic" stage, as the extension does): the kernels launch the rank a tuning database holds for
their call's key and only for that key, rank 0 without one, rank 0 again when the stored rank is not
offered; ``turbo tune``'s search spaces for gemm and gemm_fp8; the library version probes.

The expected keys are derived here from the BLAS convention, not from the package's planner: a
row-major ``[r, c]`` tensor reads as the column-major ``[c, r]`` matrix, so turbo's row-major result
``R = op(a) @ op(b)`` is written as ``R.T = op(b).T @ op(a).T``: BLAS ``m, n = N, M``, A = ``b`` and
B = ``a``; a row-major ``b`` ``[K, N]`` already reads as ``b.T``, so BLAS A is transposed exactly when
``trans_b`` (and B exactly when ``trans_a``; see ``layout.py``'s docstring).
"""

from __future__ import annotations

import logging

import pytest
import torch
from fake_ext import FakeExt, simulate

import turbo_core.tuning as tuning
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.testing.numerics import assert_close_to_reference
from turbo_core.tuning import ConfigChoice, Entry, Key, TuningDB, get_space
from turbo_hipblaslt import _ext, _jit, algos, api, gemm, gemm_fp8, probe

BF16, E4M3 = torch.bfloat16, torch.float8_e4m3fn


@pytest.fixture
def sim(monkeypatch, tmp_path):
    """The simulated library, and a tuning database of this test only (none until ``use_db``)."""
    fake = simulate(monkeypatch)
    monkeypatch.setenv(tuning.ENV_DB, str(tmp_path / "none.json"))
    monkeypatch.delenv(tuning.ENV_SWITCH, raising=False)
    tuning.reset()
    algos.reset()
    yield fake
    tuning.reset()
    algos.reset()


@pytest.fixture
def use_db(monkeypatch, tmp_path):
    """``use_db({(primitive, key): config, ...})``: write them as HIPBLASLT kernel configs to a database
    file and make it the user's (``TURBO_TUNING_DB``), loaded from JSON as dispatch would."""

    def write(configs: dict, match: str = "exact") -> None:
        entries = [Entry(prim, Key(*key), configs={"HIPBLASLT": ConfigChoice(Key(*key), cfg, match=match)})
                   for (prim, key), cfg in configs.items()]
        path = tmp_path / "db.json"
        TuningDB(entries).save(path)
        monkeypatch.setenv(tuning.ENV_DB, str(path))
        tuning.reset()

    return write


def gemm_args(m, n, k, layout="NN", dtype=BF16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ta, tb = layout[0] == "T", layout[1] == "T"
    a = torch.randn(*((k, m) if ta else (m, k)), generator=g).to(dtype)
    b = torch.randn(*((n, k) if tb else (k, n)), generator=g).to(dtype)
    return GemmArgs(a, b, ta, tb)


def want(args: GemmArgs) -> torch.Tensor:
    a, b = args.a.double(), args.b.double()
    return (a.t() if args.trans_a else a) @ (b.t() if args.trans_b else b)


def bf16_key(m, n, k, layout):
    """The key of turbo's row-major ``layout`` GEMM (``"NN"``: a [M, K], b [K, N]) in bf16: swapped."""
    ta, tb = layout[0] == "T", layout[1] == "T"
    blas_ops = ("T" if tb else "N") + ("T" if ta else "N")  # A = b, B = a
    return ("sm90", (n, m, k), ("bf16", "bf16", "bf16"), blas_ops)


# -- launches ------------------------------------------------------------------------------------------------

def test_without_a_database_every_launch_asks_for_rank_0(sim):
    for layout in ("NN", "NT", "TN"):
        args = gemm_args(5, 7, 9, layout)
        assert gemm.can_handle(args) is None
        assert_close_to_reference(gemm.gemm(args), want(args), dtype=BF16)
    assert [c.algo for c in sim.attempts] == [0, 0, 0]


def test_a_stored_rank_is_used_for_its_key_only(sim, use_db):
    use_db({("gemm", bf16_key(5, 7, 9, "NN")): {"algo": 2}})
    args = gemm_args(5, 7, 9, "NN")
    assert_close_to_reference(gemm.gemm(args), want(args), dtype=BF16)
    assert sim.calls[-1].algo == 2
    assert algos.key_of(sim.calls[-1]) == bf16_key(5, 7, 9, "NN")
    # another shape of the same power-of-two bucket, another bucket, layout, dtype: the heuristic's
    # first choice (the campaign stores ranks with match="exact": a rank means another algorithm there)
    for other in (gemm_args(6, 8, 12, "NN"), gemm_args(5, 7, 33, "NN"), gemm_args(5, 7, 9, "NT"),
                  gemm_args(5, 7, 9, "NN", torch.float16)):
        assert_close_to_reference(gemm.gemm(other), want(other), dtype=other.a.dtype)
        assert sim.calls[-1].algo == 0
    assert [c.algo for c in sim.attempts] == [2, 0, 0, 0, 0]  # nothing retried


def test_a_rank_stored_for_its_bucket_serves_the_bucket(sim, use_db):
    """A hand-written entry may say match "bucket": then the bucket's other shapes take its rank too."""
    use_db({("gemm", bf16_key(5, 7, 9, "NN")): {"algo": 2}}, match="bucket")
    gemm.gemm(gemm_args(6, 8, 12, "NN"))
    assert sim.calls[-1].algo == 2


def test_a_rank_the_heuristic_does_not_offer_falls_back_to_rank_0(sim, use_db, caplog):
    sim.offers = 3
    use_db({("gemm", bf16_key(5, 7, 9, "NN")): {"algo": 5}})
    args = gemm_args(5, 7, 9, "NN")
    with caplog.at_level(logging.WARNING, logger="turbo"):
        for _ in range(3):
            assert_close_to_reference(gemm.gemm(args), want(args), dtype=BF16)
    assert [c.algo for c in sim.attempts] == [5, 0, 0, 0]  # refused once, then straight to rank 0
    assert [c.algo for c in sim.calls] == [0, 0, 0]
    warned = [r.getMessage() for r in caplog.records if "rank 5" in r.getMessage()]
    assert len(warned) == 1 and "offers only 3 algorithm(s)" in warned[0]


def test_other_library_errors_are_not_swallowed(sim, use_db):
    use_db({("gemm", bf16_key(5, 7, 9, "NN")): {"algo": 1}})

    def broken(*args):
        sim.attempts.append(args)
        raise type(sim).BlasLtError("cuBLASLt matmul failed", "CUBLAS_STATUS_EXECUTION_FAILED", "matmul")

    sim.matmul = broken
    with pytest.raises(FakeExt.BlasLtError, match="matmul failed"):
        gemm.gemm(gemm_args(5, 7, 9, "NN"))
    assert len(sim.attempts) == 1  # not retried with rank 0


@pytest.mark.parametrize("config,why", [
    ({"algo": "2"}, "config.algo: expected an integer rank in 0..15"),
    ({"algo": True}, "config.algo: expected an integer rank"),
    ({"algo": -1}, "config.algo: expected an integer rank"),
    ({"algo": 16}, "config.algo: expected an integer rank in 0..15, got 16"),
    ({}, "config: missing field algo"),
    ({"algo": 1, "block_m": 128}, "config: unknown field(s) block_m"),
])
def test_a_malformed_config_is_ignored_with_one_warning(sim, use_db, caplog, config, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        algos.algo_from_config(config)
    use_db({("gemm", bf16_key(5, 7, 9, "NN")): config})
    args = gemm_args(5, 7, 9, "NN")
    with caplog.at_level(logging.WARNING, logger="turbo"):
        gemm.gemm(args)
        gemm.gemm(args)
    assert [c.algo for c in sim.attempts] == [0, 0]
    assert sum("ignoring a tuned HIPBLASLT gemm config" in r.getMessage() for r in caplog.records) == 1


def test_forcing_a_config_is_how_turbo_tune_times_a_rank(sim):
    args = gemm_args(5, 7, 9, "TN")
    with tuning.forcing("HIPBLASLT", "gemm", {"algo": 3}):
        gemm.gemm(args)
    with tuning.forcing("HIPBLASLT", "gemm_fp8", {"algo": 3}):  # another primitive's: not this one's
        gemm.gemm(args)
    with tuning.disabled():
        gemm.gemm(args)
    assert [c.algo for c in sim.calls] == [3, 0, 0]


def test_fp8_and_epilogue_calls_look_up_their_own_keys(sim, use_db):
    g = torch.Generator().manual_seed(1)
    m, n, k = 4, 6, 32
    a, b = torch.randn(m, k, generator=g).to(E4M3), torch.randn(n, k, generator=g).to(E4M3)  # NT: both K-major
    sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(n, 1, generator=g) + 0.5
    x, w, bias = torch.randn(m, k, generator=g).to(BF16), torch.randn(n, k, generator=g).to(BF16), \
        torch.randn(n, generator=g).to(BF16)
    fp8_key = ("sm90", (n, m, k), ("float8_e4m3fn", "float8_e4m3fn", "bf16"), "TN:outer_vec,outer_vec")
    bias_key = ("sm90", (n, m, k), ("bf16", "bf16", "bf16"), "TN+bias")
    use_db({("gemm_fp8", fp8_key): {"algo": 1}, ("gemm", bias_key): {"algo": 3},
            ("gemm", bf16_key(m, n, k, "NT")): {"algo": 2}})
    gemm_fp8.gemm_fp8(GemmFp8Args(a, sa, b, sb, False, True, BF16, "ROWWISE"))
    api.linear(x, w, bias)
    api.linear(x, w)  # no epilogue: the plain gemm's key
    assert [c.algo for c in sim.calls] == [1, 3, 2]
    assert [algos.key_of(c) for c in sim.calls] == [fp8_key, bias_key, bf16_key(m, n, k, "NT")]


# -- turbo tune's search spaces -----------------------------------------------------------------------------

def test_gemm_space_offers_ranks_1_to_count_minus_1_at_the_launch_key(sim):
    space = get_space("HIPBLASLT", "gemm")
    assert space is not None and space.backend == "HIPBLASLT" and space.match == "exact"
    args = gemm_args(5, 7, 9, "NN")
    sim.offers = 4
    assert space.candidates(args) == [{"algo": 1}, {"algo": 2}, {"algo": 3}]
    assert space.key(args) == Key(*bf16_key(5, 7, 9, "NN"))
    assert algos.key_of(sim.counted[-1]) == bf16_key(5, 7, 9, "NN")  # counted for the call's configuration
    gemm.gemm(args)
    assert algos.key_of(sim.calls[-1]) == tuple(space.key(args))  # what the launcher looks up
    sim.offers = 1
    assert space.candidates(args) == []  # the heuristic's own choice only: nothing to tune
    sim.offers = 40
    assert len(space.candidates(args)) == 15  # ranks 1..15: the extension asks for 16 at most


@pytest.mark.parametrize("gran,a2d,b2d,layout", [
    ("TENSORWISE", False, False, "TN:scalar,scalar"),
    ("ROWWISE", False, False, "TN:outer_vec,outer_vec"),
    # BLAS A is turbo's b (the swapped call): b's 128x128 tiles are A's scale mode
    ("BLOCKWISE", False, True, "TN:blk128x128,vec128"),
    ("BLOCKWISE", True, False, "TN:vec128,blk128x128"),
])
def test_gemm_fp8_space_keys_name_both_scale_modes(sim, gran, a2d, b2d, layout):
    space = get_space("HIPBLASLT", "gemm_fp8")
    m, n, k = 128, 256, 384
    a, b = torch.zeros(m, k, dtype=E4M3), torch.zeros(n, k, dtype=torch.float8_e5m2)  # NT, a HYBRID pair
    if gran == "TENSORWISE":
        sa, sb = torch.ones(()), torch.ones(())
    elif gran == "ROWWISE":
        sa, sb = torch.ones(m, 1), torch.ones(n, 1)
    else:
        sa = torch.ones(m // 128, k // 128) if a2d else torch.ones(m, k // 128)
        sb = torch.ones(n // 128, k // 128) if b2d else torch.ones(n, k // 128)
    args = GemmFp8Args(a, sa, b, sb, False, True, BF16, gran, 128 if gran == "BLOCKWISE" else None)
    want_key = Key("sm90", (n, m, k), ("float8_e5m2", "float8_e4m3fn", "bf16"), layout)
    assert space.key(args) == want_key
    sim.offers = 2
    assert space.candidates(args) == [{"algo": 1}]
    gemm_fp8.gemm_fp8(args)
    assert algos.key_of(sim.calls[-1]) == tuple(want_key)


def test_space_of_a_declined_call(sim):
    space = get_space("HIPBLASLT", "gemm_fp8")
    a = b = torch.zeros(16, 32, dtype=torch.float8_e5m2)  # E5M2 x E5M2: no cuBLASLt kernel
    args = GemmFp8Args(a, torch.ones(()), b, torch.ones(()), False, True, BF16)
    assert space.candidates(args) == []
    with pytest.raises(ValueError, match="args: HIPBLASLT gemm_fp8: cuBLASLt has no E5M2 x E5M2 kernel"):
        space.key(args)


@pytest.mark.parametrize("hip,cuda,libs", [(None, "13.0", ("cublaslt",)), ("6.4", None, ("hipblaslt",)),
                                           (None, None, ())])
def test_space_libraries_follow_torch_platform(monkeypatch, hip, cuda, libs):
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert algos.libraries() == libs


# -- library versions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("number,platform,text", [(120903, "cuda", "12.9.3"), (130100, "cuda", "13.1.0"),
                                                  (100100, "rocm", "1.1.0"), (1000, "rocm", "0.10.0"),
                                                  (-1, "cuda", None)])
def test_version_numbers_read_as_major_minor_patch(number, platform, text):
    assert probe.format_version(number, platform) == text


@pytest.fixture
def loaded(monkeypatch):
    """A loaded (simulated) cuBLASLt extension under a CUDA build of torch."""
    fake = FakeExt()
    monkeypatch.setattr(_ext.EXTENSION, "loaded", lambda: fake)
    monkeypatch.setattr(_ext, "torch_platform", lambda: "cuda")
    return fake


def test_version_probes_of_a_loaded_extension(loaded, monkeypatch):
    import turbo_hipblaslt.plugin  # noqa: F401  (registers the probes)
    from turbo_core.tuning import versions

    assert probe.cublaslt_version() == "12.9.3"
    assert probe.hipblaslt_version() is None  # the other platform's library
    assert versions.current({}, ("cublaslt", "hipblaslt"))["cublaslt"] == "12.9.3"
    assert "hipblaslt" not in versions.current({}, ("cublaslt", "hipblaslt"))
    monkeypatch.setattr(loaded, "PLATFORM", "rocm")  # an extension built for the other platform
    assert probe.cublaslt_version() is None


def test_version_probe_needs_a_handle_only_where_the_library_does(loaded, monkeypatch):
    monkeypatch.setattr(_ext, "torch_platform", lambda: "rocm")
    monkeypatch.setattr(loaded, "PLATFORM", "rocm")
    monkeypatch.setattr(loaded, "library_version", lambda: -1)  # hipBLASLt without a handle yet
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(loaded, "capabilities", lambda device: pytest.fail("created a handle"))
    assert probe.hipblaslt_version() is None  # would need a GPU context: unknown
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(loaded, "capabilities", lambda device: {"library_version": 100100})
    assert probe.hipblaslt_version() == "1.1.0"


def test_version_probe_never_builds_the_extension(monkeypatch, tmp_path):
    monkeypatch.setattr(_ext.EXTENSION, "loaded", lambda: None)
    monkeypatch.setattr(_ext, "torch_platform", lambda: "cuda")
    monkeypatch.setattr(_ext.EXTENSION, "installed", lambda: False)
    monkeypatch.setattr(_ext.EXTENSION, "load", lambda: pytest.fail("loaded or built the extension"))
    monkeypatch.delenv("TURBO_HIPBLASLT_JIT", raising=False)
    assert probe.cublaslt_version() is None  # no extension and no JIT
    monkeypatch.setenv("TURBO_HIPBLASLT_JIT", "1")
    monkeypatch.setattr(_ext, "jit_toolchain", lambda: ("a toolchain", ""))
    monkeypatch.setattr(_jit, "cached_library", lambda tc: None)
    assert probe.cublaslt_version() is None  # the JIT has not built it yet
