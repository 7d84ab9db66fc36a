"""The plugin host: entry points and TURBO_PLUGINS, each failure recorded once and skipped."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from turbo_core import BackendError, use_backend
from turbo_core.dispatch import call, select
from turbo_core.plugins import BackendInfo, Kernel, Registrar
from turbo_core.plugins.host import PluginHost, get_host, reset_host


def _record(host: PluginHost, name: str):
    found = [r for r in host.records if r.name == name]
    assert len(found) == 1, f"expected one record for {name}, got {host.records}"
    return found[0]


def _gemm_works(make_args) -> None:
    args = make_args(5, 3, 7)
    got = call("gemm", args)
    torch.testing.assert_close(got, (args.a.double() @ args.b.double()).float(), rtol=1e-4, atol=1e-4)


# -- the baseline --------------------------------------------------------------------------------

def test_reference_backend_loads_through_its_entry_point():
    host = get_host()
    rec = _record(host, "torch")
    assert rec.status == "loaded" and rec.stage is None and rec.error is None
    assert rec.source.startswith("entry point torch = turbo_core.reference.plugin")
    assert "turbo-core" in rec.source
    assert rec.backends == ["TORCH"] and rec.kernels >= 1
    assert host.registry.kernel("gemm", "TORCH") is not None
    assert host.failures() == []


def test_get_host_is_a_singleton_until_reset():
    h1 = get_host()
    assert get_host() is h1
    reset_host()
    h2 = get_host()
    assert h2 is not h1
    assert [r.name for r in h2.records] == [r.name for r in h1.records]


def test_turbo_plugins_loads_modules_by_name(use_plugins, make_args):
    use_plugins("fake_a", " fake_b ")  # whitespace around names is ignored
    host = get_host()
    for mod, backend in (("fake_a", "FAKEA"), ("fake_b", "FAKEB")):
        rec = _record(host, mod)
        assert (rec.status, rec.source, rec.module, rec.backends, rec.kernels) == (
            "loaded", "TURBO_PLUGINS", mod, [backend], 1)
    assert host.registry.backend_names() == ["TORCH", "FAKEA", "FAKEB"]
    with use_backend("FAKEB"):
        _gemm_works(make_args)


def test_same_module_as_entry_point_and_in_turbo_plugins_loads_once(fake_entry_point, entry_points, use_plugins):
    entry_points(fake_entry_point("fake-a-ep", "fake_a"))
    use_plugins("fake_a")
    host = get_host()
    assert host.failures() == []
    assert [r.name for r in host.records if "FAKEA" in r.backends] == ["fake-a-ep"]
    assert host.registry.backend("FAKEA").plugin == "fake-a-ep"


def test_entry_point_record_names_its_distribution(fake_entry_point, entry_points):
    entry_points(fake_entry_point("fake-a-ep", "fake_a", dist="turbo-fakea"))
    rec = _record(get_host(), "fake-a-ep")
    assert rec.status == "loaded"
    assert rec.source == "entry point fake-a-ep = fake_a (turbo-fakea)"


# -- failures ------------------------------------------------------------------------------------

def test_import_error_is_recorded_and_skipped(fake_entry_point, entry_points, make_args):
    entry_points(fake_entry_point("broken", "fake_import_error"), fake_entry_point("fake-a-ep", "fake_a"))
    host = get_host()
    rec = _record(host, "broken")
    assert (rec.status, rec.stage) == ("failed", "import")
    assert rec.error == "ImportError: fake_import_error: simulated missing dependency libfoo.so"
    assert host.failures() == [rec]
    # the plugin after it and the reference backend still work
    assert _record(host, "fake-a-ep").status == "loaded"
    _gemm_works(make_args)
    with use_backend("FAKEA"):
        _gemm_works(make_args)


def test_describe_hook_raising_is_recorded_and_skipped(use_plugins, make_args):
    use_plugins("fake_describe_raises", "fake_a")
    host = get_host()
    rec = _record(host, "fake_describe_raises")
    assert (rec.status, rec.stage) == ("failed", "describe")
    assert rec.error == "RuntimeError: describe exploded"
    assert host.pm.get_plugin("fake_describe_raises") is None  # unregistered from pluggy
    assert host.registry.backend_names() == ["TORCH", "FAKEA"]
    with use_backend("FAKEA"):
        _gemm_works(make_args)


def test_register_hook_raising_discards_all_its_registrations(use_plugins, make_args):
    use_plugins("fake_register_raises", "fake_a")
    host = get_host()
    rec = _record(host, "fake_register_raises")
    assert (rec.status, rec.stage) == ("failed", "register")
    assert rec.error == "RuntimeError: register exploded halfway"
    assert rec.kernels == 0
    # the kernel it registered before raising, and its backend, are gone
    assert host.registry.backend("FAKEREG") is None
    assert host.registry.kernel("gemm", "FAKEREG") is None
    assert "FAKEREG" not in {k.backend for k in host.kernels()}
    assert host.pm.get_plugin("fake_register_raises") is None
    # the others are kept
    assert {k.backend for k in host.registry.kernels_for("gemm")} == {"TORCH", "FAKEA"}
    _gemm_works(make_args)
    with pytest.raises(ValueError, match="unknown backend 'FAKEREG'"):
        with use_backend("FAKEREG"):
            pass


@pytest.mark.parametrize(("mode", "stage", "message"), [
    ("not_a_kernel", "register", "TypeError: register(): expected a turbo_core.plugins.Kernel, got str"),
    ("unknown_primitive", "register", "kernel for unknown primitive 'no_such_primitive'"),
    ("undescribed_backend", "register", "names backend 'NOBODY', which no plugin describes"),
    ("duplicate_backend", "register", "backend 'TORCH' is already described by plugin 'torch'"),
    ("duplicate_backend_in_plugin", "register", "backend 'FAKEBAD' is already described"),
    ("duplicate_kernel", "register", "a kernel for 'gemm' on FAKEBAD is already registered"),
    ("kernel_on_other_backend", "register", "a kernel for 'gemm' on TORCH is already registered"),
    ("not_backend_info", "describe", "turbo_backend_info returned dict, expected BackendInfo"),
    ("bad_platform", "describe", "BackendInfo.platforms"),
])
def test_bad_registration_is_rejected_whole(use_plugins, make_args, mode, stage, message):
    import fake_bad_registrations

    fake_bad_registrations.MODE = mode
    use_plugins("fake_bad_registrations", "fake_b")
    host = get_host()
    rec = _record(host, "fake_bad_registrations")
    assert (rec.status, rec.stage) == ("failed", stage)
    assert message in rec.error
    assert rec.backends == [] and rec.kernels == 0
    assert host.registry.backend("FAKEBAD") is None
    assert host.registry.kernel("gemm", "FAKEBAD") is None
    # TORCH keeps its own description and kernel (no impostor replaced it)
    assert host.registry.backend("TORCH").info.package == "turbo-core"
    impl = host.registry.kernel("gemm", "TORCH").impl
    origin = impl.split(":")[0] if isinstance(impl, str) else impl.__module__
    assert origin.startswith("turbo_core."), origin
    assert host.registry.backend("TORCH").plugin == "torch"
    assert host.registry.backend_names() == ["TORCH", "FAKEB"]
    _gemm_works(make_args)


def test_hookimpl_with_misspelled_argument_fails_validation(use_plugins):
    use_plugins("fake_misspelled_arg", "fake_a")
    host = get_host()
    rec = _record(host, "fake_misspelled_arg")
    assert (rec.status, rec.stage) == ("failed", "validate")
    assert rec.error.startswith("PluginValidationError")
    assert "registr" in rec.error
    assert host.pm.get_plugin("fake_misspelled_arg") is None
    assert host.registry.backend("FAKESPELL") is None
    assert host.registry.backend("FAKEA") is not None


def test_hookimpl_with_misspelled_hook_name_fails_validation(use_plugins):
    # turbo_register_kernel (no "s") matches no hookspec: pluggy only reports that through
    # check_pending(); the host must not load a plugin whose kernels silently go nowhere.
    use_plugins("fake_misspelled_hook", "fake_a")
    host = get_host()
    rec = _record(host, "fake_misspelled_hook")
    assert (rec.status, rec.stage) == ("failed", "validate")
    assert "turbo_register_kernel" in rec.error
    assert host.registry.backend("FAKEHOOK") is None
    assert host.pm.get_plugin("fake_misspelled_hook") is None
    assert host.registry.backend("FAKEA") is not None


def test_missing_module_in_turbo_plugins_is_recorded(use_plugins, make_args):
    use_plugins("no_such_turbo_plugin_xyz", "fake_a")
    host = get_host()
    rec = _record(host, "no_such_turbo_plugin_xyz")
    assert (rec.status, rec.stage, rec.source) == ("failed", "import", "TURBO_PLUGINS")
    assert rec.error == "ModuleNotFoundError: No module named 'no_such_turbo_plugin_xyz'"
    assert rec.as_dict()["error"] == rec.error and rec.as_dict()["stage"] == "import"
    assert _record(host, "fake_a").status == "loaded"
    _gemm_works(make_args)


def test_failure_is_logged_exactly_once_with_its_stage(use_plugins, caplog, make_args):
    caplog.set_level(logging.DEBUG, logger="turbo")
    use_plugins("fake_register_raises", "no_such_turbo_plugin_xyz", "fake_a")
    host = get_host()
    get_host()
    host.failures()
    host.kernels()
    _gemm_works(make_args)
    _gemm_works(make_args)
    warnings = [r for r in caplog.records if r.name == "turbo" and r.levelno >= logging.WARNING]
    reg = [r for r in warnings if "fake_register_raises" in r.getMessage()]
    missing = [r for r in warnings if "no_such_turbo_plugin_xyz" in r.getMessage()]
    assert len(reg) == 1 and len(missing) == 1, [r.getMessage() for r in warnings]
    assert "failed at register" in reg[0].getMessage()
    assert "register exploded halfway" in reg[0].getMessage()
    assert "failed at import" in missing[0].getMessage()
    assert len(warnings) == 2
    assert [(r.name, r.stage) for r in host.failures()] == [
        ("fake_register_raises", "register"), ("no_such_turbo_plugin_xyz", "import")]


def test_good_plugins_keep_working_after_a_bad_one(fake_entry_point, entry_points, use_plugins, make_args):
    entry_points(fake_entry_point("broken", "fake_import_error"),
                 fake_entry_point("describe-boom", "fake_describe_raises"))
    use_plugins("fake_register_raises", "fake_a", "fake_b")
    host = get_host()
    assert {r.name for r in host.failures()} == {"broken", "describe-boom", "fake_register_raises"}
    assert host.registry.backend_names() == ["TORCH", "FAKEA", "FAKEB"]
    for backend in ("FAKEA", "FAKEB", "TORCH"):
        with use_backend(backend):
            assert select("gemm", make_args()).backend == backend
            _gemm_works(make_args)


# -- disabling -----------------------------------------------------------------------------------

def test_disabled_by_entry_point_name_is_not_even_imported(fake_entry_point, entry_points, monkeypatch):
    ep = fake_entry_point("fake-a-ep", "fake_a")
    entry_points(ep)
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "other, FAKE-A-EP")  # case-insensitive
    host = get_host()
    rec = _record(host, "fake-a-ep")
    assert rec.status == "disabled"
    assert "TURBO_DISABLE_PLUGINS" in rec.error
    assert ep.loads == 0 and "fake_a" not in sys.modules
    assert host.registry.backend("FAKEA") is None
    assert host.failures() == []


def test_disabled_by_backend_name(fake_entry_point, entry_points, use_plugins, monkeypatch):
    entry_points(fake_entry_point("fake-a-ep", "fake_a"))
    use_plugins("fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "fakea,FAKEB")
    host = get_host()
    for name, backend in (("fake-a-ep", "FAKEA"), ("fake_b", "FAKEB")):
        rec = _record(host, name)
        assert rec.status == "disabled"
        assert rec.error == f"backend {backend} disabled by TURBO_DISABLE_PLUGINS"
        assert rec.kernels == 0
        assert host.registry.backend(backend) is None
        assert host.registry.kernel("gemm", backend) is None
        assert host.pm.get_plugin(name) is None
    assert host.registry.backend_names() == ["TORCH"]


def test_disabling_the_reference_backend_leaves_nothing_for_gemm(monkeypatch, make_args):
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    host = get_host()
    assert _record(host, "torch").status == "disabled"
    assert host.registry.backend_names() == []
    with pytest.raises(BackendError, match="no backend can run this call"):
        call("gemm", make_args())


# -- cheap, lazy discovery -----------------------------------------------------------------------

def test_discovery_never_calls_the_probe(use_plugins, fakekit, make_args):
    use_plugins("fake_a")
    host = get_host()
    assert host.registry.backend("FAKEA") is not None
    assert fakekit.cfg("FAKEA")["probes"] == 0
    assert fakekit.cfg("FAKEA")["checks"] == 0
    with use_backend("FAKEA"):
        call("gemm", make_args())
        call("gemm", make_args())
    assert fakekit.cfg("FAKEA")["probes"] == 1  # probed once on first use, then cached
    assert fakekit.cfg("FAKEA")["calls"] == 2


def test_lazy_kernel_module_is_imported_on_first_use(use_plugins, make_args):
    use_plugins("fake_lazy")
    host = get_host()
    assert host.registry.backend("FAKELAZY").info.version == "2.0"
    assert "fake_lazy" in sys.modules
    assert "fake_lazy_kernels" not in sys.modules
    args = make_args(4, 5, 6)
    with use_backend("FAKELAZY"):
        got = call("gemm", args)
    assert "fake_lazy_kernels" in sys.modules
    assert sys.modules["fake_lazy_kernels"].PROBES == 1
    torch.testing.assert_close(got, args.a @ args.b, rtol=1e-4, atol=1e-4)


def test_discovery_in_a_fresh_process_imports_no_triton_and_probes_nothing(tmp_path, fake_dir):
    # A stub "triton" that imports fine (so an import of it would stay in sys.modules): discovery,
    # of the fakes and of whatever backend packages this environment has installed, must not
    # import it.
    stub = tmp_path / "stubs" / "triton"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("__version__ = '0.0.0-stub'\n")
    script = (
        "import json, sys\n"
        "import turbo_core\n"
        "from turbo_core.plugins.host import get_host\n"
        "host = get_host()\n"
        "import fakekit, torch\n"
        "print(json.dumps({\n"
        "  'triton': 'triton' in sys.modules,\n"
        "  'lazy_kernels': 'fake_lazy_kernels' in sys.modules,\n"
        "  'probes': fakekit.cfg('FAKEA')['probes'],\n"
        "  'cuda_initialized': torch.cuda.is_initialized(),\n"
        "  'backends': host.registry.backend_names(),\n"
        "  'failures': [r.name for r in host.failures()],\n"
        "}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURBO_", "PRIMUS_TURBO_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "stubs"), str(fake_dir)])
    env["TURBO_PLUGINS"] = "fake_a,fake_lazy"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["triton"] is False
    assert report["lazy_kernels"] is False
    assert report["probes"] == 0
    assert report["cuda_initialized"] is False
    backends = report["backends"]
    assert "TORCH" in backends  # turbo-core's own entry point
    assert backends.index("FAKEA") < backends.index("FAKELAZY")  # TURBO_PLUGINS order, after entry points
    assert backends[-2:] == ["FAKEA", "FAKELAZY"]
    assert not [f for f in report["failures"] if f.startswith("fake")]


# -- the typed objects -----------------------------------------------------------------------------

def test_registrar_rejects_non_kernels_and_keeps_order():
    reg = Registrar("p")
    k1 = Kernel("gemm", "x", lambda a: a)
    assert reg(k1) is k1
    with pytest.raises(TypeError, match="expected a turbo_core.plugins.Kernel, got dict"):
        reg({"primitive": "gemm"})
    assert reg.kernels == [k1]
    assert k1.backend == "X"  # names are upper-cased


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(name=""), ValueError, "BackendInfo.name"),
    (dict(name="BAD NAME"), ValueError, "BackendInfo.name"),
    (dict(package=""), TypeError, "BackendInfo.package"),
    (dict(version=None), TypeError, "BackendInfo.version"),
    (dict(platforms=()), ValueError, "BackendInfo.platforms"),
    (dict(probe="not-a-ref"), TypeError, "BackendInfo.probe"),
])
def test_backend_info_validation(kwargs, error, message):
    base = dict(name="X", package="pkg", version="1")
    with pytest.raises(error, match=message):
        BackendInfo(**{**base, **kwargs})


def test_broken_probe_makes_the_backend_unavailable_not_turbo(use_plugins, fakekit, make_args):
    fakekit.cfg("FAKEA")["unavailable"] = 42  # not a string: a broken probe
    use_plugins("fake_a")
    record = get_host().registry.backend("FAKEA")
    assert record.unavailable_reason() == "availability probe returned 42 (expected None or a reason string)"
    with use_backend("FAKEA"):
        with pytest.raises(BackendError, match="availability probe returned 42"):
            select("gemm", make_args())
