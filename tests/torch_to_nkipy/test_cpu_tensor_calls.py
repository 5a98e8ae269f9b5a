"""Compiled kernels called with CPU tensors: the kernel reads the inputs where
they lie and writes fresh CPU outputs (no device copies), and a weight changed
in host memory between calls -- in place, through .data, through a NumPy view --
is seen by the next call (nothing cached from host memory goes stale)."""
from __future__ import annotations

import pytest
import torch


def _linear(n_in=80, n_out=96):
    torch.manual_seed(0)
    return torch.nn.Linear(n_in, n_out)


def test_cpu_weights_changed_between_calls_are_seen(backend):
    lin = _linear()
    x = torch.randn(64, 80)
    compiled = torch.compile(lin, backend="nkipy")
    for _ in range(4):     # enough calls for a device weight to be packed for the GEMM
        torch.testing.assert_close(compiled(x), lin(x), rtol=1e-4, atol=1e-4)
    changes = [lambda: lin.weight.data.mul_(-0.5),
               lambda: lin.weight.detach().numpy().__setitem__((slice(None), 0), 3.0),
               lambda: lin.bias.data.add_(1.0)]
    for change in changes:
        with torch.no_grad():
            change()
        for _ in range(3):
            torch.testing.assert_close(compiled(x), lin(x), rtol=1e-4, atol=1e-4)


def test_cpu_tensor_calls_use_no_device_memory(backend):
    import spike

    lin = _linear()
    x = torch.randn(64, 80)
    compiled = torch.compile(lin, backend="nkipy")
    compiled(x)            # compile and load
    rt = spike.get_spike_singleton()
    before = rt.memory_stats(0)["total_allocations"]
    for _ in range(3):
        out = compiled(x)
        assert out.device.type == "cpu"
    assert rt.memory_stats(0)["total_allocations"] == before


def test_host_addressable_runtime():
    from spike_torch._C import kernel_calls

    pytest.importorskip("torch_to_nkipy")
    assert kernel_calls.host_addressable() is True   # the CPU driver
