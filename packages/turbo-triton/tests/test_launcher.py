"""turbo_triton.launcher: the launch key and the layout of the arguments after the positional ones
(CPU); under the interpreter every launch takes Triton's own path."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from turbo_triton import launcher


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr, SQUARE: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    if SQUARE:
        x = x * x
    tl.store(y_ptr + offs, x * alpha, mask=ok)


def test_arg_key_is_as_fine_as_tritons_specialization():
    key = launcher.arg_key
    a = torch.zeros(64, dtype=torch.float32)
    assert key(a) == (torch.float32, True)
    assert key(a[1:]) == (torch.float32, False)  # 4 bytes past an aligned base: not 16-byte aligned
    assert key(a.to(torch.bfloat16)) != key(a)
    assert key(1) != key(2) != key(16)  # equal to 1; neither; divisible by 16
    assert key(17) == key(3)
    assert key(2**31 - 1) != key(2**31) != key(2**63)  # i32, i64, u64
    assert key(0.5) is key(2.0) is float
    assert key(True) is True and key(None) is None
    with pytest.raises(launcher._Unkeyed):
        key("a string")


def test_args_key_is_arg_key_of_each_argument_memo_or_not(monkeypatch):
    a = torch.zeros(64, dtype=torch.float32)
    args = (a, a[1:], a.to(torch.bfloat16), 1, 2, 16, 17, 2**31 - 1, 2**31, 2**63, 0.5, True, None, -3, 0)
    want = tuple(map(launcher.arg_key, args))
    monkeypatch.setattr(launcher, "_int_keys", {})
    assert launcher._args_key(args) == want  # memo empty
    assert launcher._args_key(args) == want  # from the memo
    monkeypatch.setattr(launcher, "_int_keys", {})
    monkeypatch.setattr(launcher, "_INT_KEYS_MAX", 2)  # a full memo is cleared, never wrong
    assert launcher._args_key(args) == want and len(launcher._int_keys) <= 2
    with pytest.raises(launcher._Unkeyed):
        launcher._args_key((1, "a string"))


def test_the_tail_lays_out_constexprs_and_defaults_in_signature_order():
    k = launcher.FastKernel(_scale_kernel)
    assert k._tail(4, {"BLOCK": 32}) == (32, False)  # SQUARE from its default
    assert k._tail(4, {"SQUARE": True, "BLOCK": 8, "num_warps": 4}) == (8, True)  # options are not parameters
    assert k._tail(3, {"BLOCK": 32}) is None  # alpha given by nobody


def test_interpreted_launches_take_tritons_path_and_compute_the_same(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    launcher.clear()
    x = torch.arange(40, dtype=torch.float32)
    y, want = torch.empty_like(x), torch.empty_like(x)
    _scale_kernel[(3,)](x, want, 40, 0.5, BLOCK=16, SQUARE=True)
    launcher.fast_kernel(_scale_kernel)[(3,)](x, y, 40, 0.5, BLOCK=16, SQUARE=True)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    torch.testing.assert_close(y, x * x * 0.5, rtol=0, atol=0)
    assert launcher.stats() == {"fast": 0, "slow": 1, "entries": 0}
    assert launcher.fast_kernel(_scale_kernel) is launcher.fast_kernel(_scale_kernel)


def test_launch_hooks_are_seen_whether_a_chain_or_a_callable(monkeypatch):
    from triton import knobs

    rt = knobs.runtime
    monkeypatch.setattr(rt, "launch_enter_hook", type(rt.launch_enter_hook)() if hasattr(rt.launch_enter_hook, "calls")
                        else None)
    monkeypatch.setattr(rt, "launch_exit_hook", None)
    assert not launcher._hooks()  # an empty chain (recent Triton's default) or None: no hook
    if hasattr(rt.launch_enter_hook, "calls"):
        rt.launch_enter_hook.add(print)
        assert launcher._hooks()
    monkeypatch.setattr(rt, "launch_enter_hook", lambda meta: None)  # a plain callable (older API)
    assert launcher._hooks()


class _FakeCompiled:
    """What ``kernel[grid](...)`` returns on a GPU, reduced to what the fast path calls."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, runs: list) -> None:
        self.runs = runs

    def run(self, *launch) -> None:
        self.runs.append(launch)


class _FakeJit:
    """A ``@triton.jit`` stand-in: ``[grid](*args, **kwargs)`` records Triton's path and returns a
    compiled kernel whose ``run`` records the fast path."""

    def __init__(self) -> None:
        self.slow: list = []
        self.fast: list = []

        def fn(x_ptr, n, BLOCK, SCALE=None):
            pass

        self.fn = fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.slow.append((grid, args, kwargs))
            return _FakeCompiled(self.fast)

        return launch


@pytest.fixture
def gpu_path(monkeypatch):
    """The launcher's GPU path on the CPU: no interpreter, no hooks, device 0, stream 0."""
    monkeypatch.setattr(launcher._runtime, "interpreting", lambda: False)
    monkeypatch.setattr(launcher, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(launcher, "_hooks", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    launcher.clear()


def test_the_table_keeps_no_tensor(gpu_path):
    """Positional tensors are keyed by dtype and alignment only; a launch with a tensor passed by
    keyword is never stored (its key and tail would keep the tensor alive past the call)."""
    jit = _FakeJit()
    k = launcher.FastKernel(jit)
    x = torch.zeros(8)
    for _ in range(2):
        k[(1,)](x, 8, BLOCK=4)
    assert len(jit.slow) == 1 and len(jit.fast) == 1  # stored after the first launch, then the fast path
    assert jit.fast[0][-4:] == (x.data_ptr(), 8, 4, None)  # this call's tensor's address, the tail from the defaults
    scale = torch.ones(1)
    for _ in range(2):
        k[(1,)](x, 8, BLOCK=4, SCALE=scale)
    assert len(jit.slow) == 3 and len(jit.fast) == 1  # Triton's path both times: never stored
    held = [v for key, entry in k._entries.items() for v in (*key[1], *key[2], *(entry.tail if entry else ()))]
    assert not any(isinstance(v, torch.Tensor) or (isinstance(v, tuple) and any(
        isinstance(u, torch.Tensor) for u in v)) for v in held)
    assert launcher.stats() == {"fast": 1, "slow": 3, "entries": 1}


def test_fast_launches_pass_each_plain_tensor_as_its_address(gpu_path):
    """The compiled launcher gets a plain tensor's ``data_ptr()`` (Triton's launcher then reads no
    ``data_ptr`` and asks the driver nothing); the key is ``_args_key``'s; other arguments, a tensor
    subclass included, pass as given."""

    class Sub(torch.Tensor):
        pass

    x = torch.zeros(8)
    sub = torch.zeros(8).as_subclass(Sub)
    args = (x, x[2:], sub, 7, 0.5, None, True)
    key, passed = launcher._key_and_launch_args(args)
    assert key == launcher._args_key(args) == tuple(map(launcher.arg_key, args))
    assert passed == [x.data_ptr(), x[2:].data_ptr(), sub, 7, 0.5, None, True]
    assert passed[2] is sub

    jit = _FakeJit()
    k = launcher.FastKernel(jit)
    k[(2, 3)](x, 8, BLOCK=4)
    y = torch.ones(8)
    k[(2, 3)](y, 8, BLOCK=4)
    assert jit.slow[0][1] == (x, 8)  # Triton's own path: the tensor itself
    (launch,) = jit.fast
    assert launch[:3] == (2, 3, 1) and launch[-4:] == (y.data_ptr(), 8, 4, None)
