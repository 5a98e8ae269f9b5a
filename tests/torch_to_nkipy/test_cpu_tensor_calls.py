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


def test_cpu_backward_with_none_gradients_takes_the_host_path(backend, monkeypatch):
    """A backward graph returns None for inputs without gradients (a Python value
    beside its tensors): such kernels still run on the CPU tensors where they lie
    (the fast path), and the gradients are eager's."""
    from torch_to_nkipy import kernel as kernel_mod
    from torch_to_nkipy.executor import Executor

    fast, general = [], []
    orig_fast, orig_run = Executor._run_fast, Executor.run

    def counting_fast(self, args, plan):
        fast.append(self.k.hash)
        return orig_fast(self, args, plan)

    def counting_run(self, args, pad, opts, profile):
        general.append(self.k.hash)
        return orig_run(self, args, pad, opts, profile)

    monkeypatch.setattr(Executor, "_run_fast", counting_fast)
    monkeypatch.setattr(Executor, "run", counting_run)
    lin = _linear(16, 8)
    x = torch.randn(4, 16)                     # no gradient: a None in the backward graph

    def step(m, x):
        m.zero_grad(set_to_none=True)
        loss = torch.nn.functional.gelu(m(x)).square().mean()
        loss.backward()
        return loss.detach(), m.weight.grad.clone(), m.bias.grad.clone()

    ref = step(lin, x)
    compiled = torch.compile(step, backend="nkipy")
    for _ in range(2):
        out = compiled(lin, x)
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    with_values = [k for k in kernel_mod._BY_HASH.values() if k.static_outputs]
    assert with_values, "expected a backward kernel returning a Python value"
    for k in with_values:
        assert k.executor._plan is not None
        assert fast.count(k.hash) == general.count(k.hash) > 0
