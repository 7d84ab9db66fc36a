"""The CUDNN plugin: discovered through its entry point, honest about availability, cheap to import,
and first for dense attention on NVIDIA GPUs."""

import subprocess
import sys

import pytest
import torch

import turbo_cudnn
from turbo_core.dispatch.defaults import default_order
from turbo_core.platform import Platform
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("CUDNN")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-cudnn"
    assert row["version"] == turbo_cudnn.__version__
    assert row["plugin"] == "cudnn"


def test_registers_attention(row):
    assert set(row["primitives"]) == {"attention_fwd", "attention_bwd"}


def test_discovery_imports_no_kernel_module():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_cudnn" in mods and "triton" not in mods
    code = ("import sys; from turbo_core.plugins import get_host; get_host(); "
            "print('turbo_cudnn.plugin' in sys.modules, 'turbo_cudnn.attention' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["True", "False"]


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build: the CPU-build reason does not apply")
def test_unavailable_on_a_cpu_build(row):
    assert row["available"] is False
    assert row["reason"].startswith("needs a CUDA build of PyTorch (NVIDIA GPUs); this torch is a ")


def test_probe_reasons(monkeypatch):
    from turbo_cudnn import probe

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    assert probe.probe() == "this CUDA build of PyTorch has no cuDNN"
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr("turbo_core.platform.gpu_count", lambda: 0)
    assert probe.probe() == "no GPU"
    monkeypatch.setattr("turbo_core.platform.gpu_count", lambda: 1)
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)
    assert "switched off" in probe.probe()
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: True)
    assert probe.probe() is None


@pytest.mark.parametrize("primitive", ["attention_fwd", "attention_bwd"])
def test_first_for_attention_on_nvidia_then_triton(primitive):
    order = default_order(primitive, Platform(kind="cuda", arch="sm90"))
    assert order[:2] == ("CUDNN", "TRITON")
    assert "CUDNN" not in default_order(primitive, Platform(kind="rocm", arch="gfx942"))


def test_the_operators_of_this_pytorch_take_what_the_adapters_pass():
    from turbo_cudnn.attention import schema_reason

    assert schema_reason() is None


def test_a_pytorch_whose_operators_changed_makes_the_backend_unavailable(monkeypatch):
    from turbo_cudnn import attention, probe

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    # an operator whose arguments moved: the backward of a PyTorch without attn_bias, say
    flash_bwd = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
    monkeypatch.setattr(attention, "backward_op", lambda: flash_bwd)
    assert probe.probe() == (
        "this PyTorch's cuDNN attention backward operator takes (grad_out, query, key, value, out, logsumexp, "
        "cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale); turbo-cudnn "
        "passes (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, "
        "cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale)")

    def missing():
        raise RuntimeError("No such operator aten::_scaled_dot_product_cudnn_attention")

    monkeypatch.setattr(attention, "forward_op", missing)
    assert probe.probe() == ("this PyTorch has no cuDNN attention forward operator (RuntimeError: No such operator "
                             "aten::_scaled_dot_product_cudnn_attention)")
