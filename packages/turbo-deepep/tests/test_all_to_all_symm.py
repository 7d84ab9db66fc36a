"""The symmetric-memory transport's host side (turbo_deepep.all_to_all.symm): the switch, the
verdict on a CPU, the header size and how buffers grow. The transport itself runs in
test_all_to_all_distributed.py (test_gloo_fused_symmetric; test_nccl on GPUs)."""

from __future__ import annotations

import pytest
import torch

from turbo_deepep.all_to_all import symm


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(symm.ENV, raising=False)
    symm.set_provider(None)
    yield
    symm.set_provider(None)


class _Group:
    group_name = "test-group"


def test_a_bad_setting_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(symm.ENV, "fast")
    with pytest.raises(ValueError, match=r"TURBO_DEEPEP_TRANSPORT='fast'.*collective.*symm"):
        symm.reason(_Group(), torch.device("cpu"))


def test_the_verdicts_without_a_gpu(monkeypatch):
    cpu = torch.device("cpu")
    assert "not on a GPU" in symm.reason(_Group(), cpu)
    monkeypatch.setenv(symm.ENV, "collective")
    assert "all_to_all_single" in symm.reason(_Group(), cpu)
    monkeypatch.setenv(symm.ENV, "symm")
    assert "not on a GPU" in symm.reason(_Group(), cpu)  # a CPU tensor is never an error: the path is the GPU's
    symm.set_provider(lambda group, device, nbytes: None)  # a provider (the tests' shared buffers) serves anywhere
    assert symm.reason(_Group(), cpu) is None


def test_header_holds_the_count_matrix_aligned():
    for world in (1, 2, 3, 8, 64):
        size = symm.header_bytes(world)
        assert size >= world * world * 8 and size % 256 == 0


def test_buffers_are_reused_then_grow_by_half_in_2mib_steps():
    made = []

    class _Buf:
        def __init__(self, nbytes):
            self.capacity, self.local, self.peers = nbytes, None, None

        def barrier(self):
            pass

    def factory(group, device, nbytes):
        made.append(_Buf(nbytes))
        return made[-1]

    symm.set_provider(factory)
    cpu, grain = torch.device("cpu"), 2 << 20
    first = symm.buffers(_Group(), cpu, 1000)
    assert first.capacity == grain and symm.buffers(_Group(), cpu, grain) is first  # enough: the same buffer
    bigger = symm.buffers(_Group(), cpu, grain + 1)
    assert bigger is not first and bigger.capacity == 2 * grain  # max(need, 1.5x), rounded up to the grain
    huge = symm.buffers(_Group(), cpu, 10 * grain + 5)
    assert huge.capacity == 11 * grain and len(made) == 3
