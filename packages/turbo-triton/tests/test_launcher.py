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
