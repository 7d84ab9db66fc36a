"""The shared conformance suite (every family's cases, forward and backward against float64 math)
run against the reference backend TORCH, exactly as a backend package runs it against itself —
and the suite's device plumbing, checked here without a GPU.

The device check runs cases on a simulated second device: ``FakeDevice`` gives the cases
``torch.device("meta")`` as their device, but every tensor a case moves or creates "on meta" is a
real CPU tensor, and every tensor the case builds on the host (factories without a device,
``.cpu()``, anything computed from those) is tagged as host memory. Then each torch call is
checked the way a GPU would check it: a case mixing host and device tensors in one call (a
reference computed from device tensors, a result compared without ``.cpu()``, a device op fed a
host tensor) and any host tensor reaching turbo code (the op, its autograd, the backend) is a
violation. The ops themselves run on the CPU, so a case also has to pass: the same results as the
plain CPU run.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

import turbo_core.testing as _testing
from turbo_core.dispatch.manager import use_backend
from turbo_core.testing.conformance import DEVICE_ENV, all_cases, conformance_device, conformance_suite

TestConformanceTorch = conformance_suite("TORCH")

# -- the suite's device argument ---------------------------------------------------------------------


def test_default_device_is_the_cpu_and_the_env_var_overrides_it(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert conformance_device() == torch.device("cpu")
    assert conformance_suite("TORCH").device == torch.device("cpu")
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")
    assert conformance_device() == torch.device("cuda", 1)
    assert conformance_suite("TORCH").device == torch.device("cuda", 1)
    assert conformance_suite("TORCH", device="cpu").device == torch.device("cpu")  # the argument wins
    monkeypatch.setenv(DEVICE_ENV, "")
    assert conformance_device() == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu0", "meta"])
def test_bad_device_names_the_argument(monkeypatch, bad):
    with pytest.raises(ValueError, match="^device: "):
        conformance_device(bad)
    monkeypatch.setenv(DEVICE_ENV, bad)
    with pytest.raises(ValueError, match=rf"^device \(\${DEVICE_ENV}\): "):
        conformance_suite("TORCH")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without CUDA")
def test_cuda_suite_skips_without_cuda():
    from _pytest.outcomes import Skipped

    suite = conformance_suite("TORCH", device="cuda")
    with pytest.raises(Skipped, match="no cuda device here"):
        suite().test_case(all_cases()[0])


def _param_ids(suite) -> list[str]:
    (mark,) = [m for m in suite.test_case.pytestmark if m.name == "parametrize"]
    return list(mark.kwargs["ids"])


def test_case_ids_and_count_do_not_depend_on_the_device():
    ids = _param_ids(TestConformanceTorch)
    assert ids == [c.id for c in all_cases()] and len(ids) == len(set(ids))
    assert _param_ids(conformance_suite("TORCH", device="cuda")) == ids


# -- the simulated device ------------------------------------------------------------------------------

FAKE = torch.device("meta")
_TORCH_DIR = os.path.dirname(torch.__file__)
_TESTING_DIR = os.path.dirname(_testing.__file__)


class _Host(torch.Tensor):
    """Marks a CPU tensor the case holds as host memory (a plain tensor is device memory)."""

    __torch_function__ = torch._C._disabled_torch_function_impl


def _is_host(t: object) -> bool:
    return isinstance(t, _Host)


def _tag(t: torch.Tensor) -> torch.Tensor:
    if isinstance(t, torch.Tensor) and not _is_host(t):
        t.__class__ = _Host
    return t


def _untag(t: torch.Tensor) -> torch.Tensor:
    if _is_host(t):
        t.__class__ = torch.Tensor
    return t


_HARNESS = {"__torch_function__", "_in_case_code", "_move", "_check_mix", "_flag", "_tag", "_untag", "_device_arg",
            "_backward"}
_REFERENCE_DIR = os.path.join(os.path.dirname(_TESTING_DIR), "reference")


def _is_case(code) -> bool:
    return code.co_filename.startswith(_TESTING_DIR) or (code.co_filename == __file__ and code.co_name not in _HARNESS)


def _in_case_code() -> bool:
    """Whether the torch call being handled is case code: made by the conformance cases, numerics or
    a case written in this file, or by a ``turbo_core.reference`` function the case called itself
    (the oracle's dequantization); not by the turbo op the case called (the op, its autograd
    Function, the backend). The frames outside torch and this harness decide."""
    frame, entry = sys._getframe(1), None
    while frame is not None:
        code = frame.f_code
        if _is_case(code):
            return entry is None or entry.co_filename.startswith(_REFERENCE_DIR)
        if not (code.co_filename.startswith(_TORCH_DIR) or code.co_filename == __file__):
            entry = code
        frame = frame.f_back
    return False


def _device_arg(func, args, kwargs) -> torch.device | None:
    if func is torch.Tensor.to:
        return torch._C._nn._parse_to(*args[1:], **kwargs)[0]
    if func is torch.Tensor.cpu:
        return torch.device("cpu")
    dev = kwargs.get("device")
    return torch.device(dev) if dev is not None else None


class FakeDevice(TorchFunctionMode):
    """See the module docstring. ``violations`` lists every misplaced tensor seen."""

    def __init__(self):
        super().__init__()
        self.violations: list[str] = []

    def _flag(self, func, what: str) -> None:
        self.violations.append(f"{getattr(func, '__qualname__', func)}: {what}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if not _in_case_code():
            if any(_is_host(t) and t.dim() > 0 for t in tensors):
                self._flag(func, "a host tensor reached turbo code")
            return func(*args, **kwargs)
        if func == torch.Tensor.device.__get__:
            return torch.device("cpu") if _is_host(args[0]) else FAKE
        if func == torch.Tensor.grad.__get__:
            grad = func(*args, **kwargs)
            return _tag(grad) if grad is not None and _is_host(args[0]) else grad
        target = _device_arg(func, args, kwargs)
        if target is not None and target.type == "meta":
            if kwargs.get("generator") is not None:
                self._flag(func, "a CPU generator used for a device tensor")
                kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
            return self._move(func, args, kwargs, to_host=False)
        if target is not None and target.type == "cpu" and func in (torch.Tensor.to, torch.Tensor.cpu):
            return self._move(func, args, kwargs, to_host=True)
        hosts = [t for t in tensors if _is_host(t)]
        devs = [t for t in tensors if not _is_host(t)]
        if hosts and devs:
            self._check_mix(func, args, kwargs)
        if func in (torch.Tensor.backward, torch.autograd.backward) and devs:
            return self._backward(func, args, kwargs)
        out = func(*args, **kwargs)
        if (hosts and not devs) or not tensors:  # host math, or a factory without a device
            out = tree_map(_tag, out)
        return out

    def _move(self, func, args, kwargs, *, to_host: bool):
        """``.to(device)`` / ``.cpu()`` / a factory on the device: a copy when it changes sides
        (as on a real GPU), the tensor itself when it is already there."""
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        kwargs = {k: ("cpu" if k == "device" else v) for k, v in kwargs.items()}
        if func is torch.Tensor.to:
            args = tuple("cpu" if isinstance(a, (str, torch.device)) else a for a in args)
        out = func(*args, **kwargs)
        if src is not None and out is src:
            if _is_host(src) == to_host:
                return out
            out = out.clone()
        return tree_map(_tag if to_host else _untag, out)

    def _backward(self, func, args, kwargs) -> None:
        """Run a backward pass over device tensors with this mode active, so that the torch calls
        of turbo's autograd Functions are checked too (``Tensor.backward`` itself would re-enter
        this handler: the engine is called directly)."""
        from torch.autograd.variable import Variable

        if func is torch.Tensor.backward:
            outs, grads = (args[0],), (args[1] if len(args) > 1 else kwargs.get("gradient"),)
        else:
            outs, grads = args[0], args[1] if len(args) > 1 else kwargs.get("grad_tensors")
            outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
            grads = (grads,) if isinstance(grads, torch.Tensor) or grads is None else tuple(grads)
        grads = tuple(torch.ones_like(o) if g is None else g for o, g in zip(outs, grads, strict=True))
        with self:
            Variable._execution_engine.run_backward(outs, grads, False, False, (), allow_unreachable=True,
                                                    accumulate_grad=True)

    def _check_mix(self, func, args, kwargs) -> None:
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            # A device tensor may be indexed by host indices; host tensors by host indices only;
            # a value stored into a device tensor must be on the device (or a host scalar).
            base, index = args[0], args[1]
            idx = [t for t in tree_flatten(index)[0] if isinstance(t, torch.Tensor)]
            value = args[2] if len(args) > 2 else None
            if _is_host(base) and any(not _is_host(t) for t in idx):
                self._flag(func, "a host tensor indexed by a device tensor")
            if isinstance(value, torch.Tensor) and _is_host(value) != _is_host(base) and value.dim() > 0:
                self._flag(func, "a value stored across host and device")
            return
        # Only a 0-dim host tensor (a scalar) may join device tensors in a call, as on a GPU.
        flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(_is_host(t) and t.dim() > 0 for t in flat):
            self._flag(func, "host and device tensors in one call: "
                             + ", ".join(f"{'host' if _is_host(t) else 'device'} {tuple(t.shape)}" for t in flat))


def _sample(cases):
    """The first and the last case of every variant: an id's first word (the op) and its words
    without digits (granularity, format, layout, mask, mode...)."""
    by_kind: dict[str, list] = {}
    for c in cases:
        words = c.id.split("-")
        by_kind.setdefault("-".join([words[0], *(w for w in words[1:] if not re.search(r"\d", w))]), []).append(c)
    return list({c.id: c for group in by_kind.values() for c in (group[0], group[-1])}.values())


SAMPLE = _sample(all_cases())


@pytest.mark.parametrize("case", SAMPLE, ids=[c.id for c in SAMPLE])
def test_case_runs_on_a_simulated_device(case):
    # Every family's cases put each op input on the device they are given, compute their
    # reference on the host and compare on the host; and they still pass there.
    mode = FakeDevice()
    with use_backend("TORCH"), mode:
        case.run(device=FAKE)
    assert not mode.violations, "\n".join(dict.fromkeys(mode.violations))


def _misplaced(kind: str) -> None:
    """A case with one device mistake of ``kind`` (rmsnorm, or the fused-wgrad gemm for main_grad)."""
    from turbo_core.ops import gemm, rmsnorm
    from turbo_core.testing.numerics import assert_close_to_reference

    x = torch.randn(5, 33)
    ref = x.double() / x.double().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()
    xd = x if kind == "input_on_host" else x.to(FAKE)
    if kind == "main_grad_on_host":
        w = torch.randn(33, 4).to(FAKE).requires_grad_()
        w.main_grad = torch.zeros(33, 4)
        gemm(xd, w, False, False, fuse_bgrad_accum_pattern="megatron").backward(torch.ones(5, 4).to(FAKE))
        return
    y = rmsnorm(xd.requires_grad_(), None, 1e-5, False)
    if kind == "compared_on_device":
        assert_close_to_reference(y, ref, what="y")
    elif kind == "reference_from_device":
        assert_close_to_reference(y.cpu(), xd.double() / xd.double().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt())
    elif kind == "grad_on_host":
        y.backward(torch.ones(5, 33))
    else:
        assert_close_to_reference(y.cpu(), ref, what="y")


@pytest.mark.parametrize("kind, caught", [
    ("input_on_host", "a host tensor reached turbo code"),
    ("main_grad_on_host", "a host tensor reached turbo code"),
    ("compared_on_device", "device"),
    ("reference_from_device", "device"),
    ("grad_on_host", "host and device tensors in one call"),
    ("correct", None),
])
def test_the_simulated_device_catches_misplaced_tensors(kind, caught):
    # The check must be able to fail: each mistake a GPU would reject is a violation or, where
    # torch compares devices itself (assert_close), an AssertionError naming the device.
    mode = FakeDevice()
    try:
        with use_backend("TORCH"), mode:
            _misplaced(kind)
    except AssertionError as exc:
        mode.violations.append(str(exc))
    if caught is None:
        assert mode.violations == []
    else:
        assert any(caught in v for v in mode.violations), mode.violations
