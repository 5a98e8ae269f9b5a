"""Custom nkipy kernels as torch custom ops, and mark_subgraph_identity splitting."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from torch_to_nkipy import NKIOpRegistry, NKIPyCustomKernelError, mark_subgraph_identity
from torch_to_nkipy.kernel import STATS


@NKIOpRegistry.register("t2n_test::scaled_add")
def scaled_add_kernel(a, b):
    return a + 2 * b


@torch.library.custom_op("t2n_test::scaled_add", mutates_args=())
def scaled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return scaled_add_kernel(a, b)


@scaled_add.register_fake
def _(a, b):
    return torch.empty_like(a)


@NKIOpRegistry.register("t2n_test::broken")
def broken_kernel(a):
    return np.sort(a)          # not supported in nkipy kernels


@torch.library.custom_op("t2n_test::broken", mutates_args=())
def broken(a: torch.Tensor) -> torch.Tensor:
    return broken_kernel(a)


@broken.register_fake
def _(a):
    return torch.empty_like(a)


def test_registry_names():
    assert NKIOpRegistry.canonicalize_custom_op_name("lib::op") == "torch.ops.lib.op.default"
    assert NKIOpRegistry.is_registered("t2n_test::scaled_add", canonicalize=True)
    assert NKIOpRegistry.is_registered("torch.ops.t2n_test.scaled_add.default")
    assert NKIOpRegistry.get_nki_kernel("t2n_test::scaled_add", canonicalize=True).func.__name__ \
        == "scaled_add_kernel"
    with pytest.raises(AssertionError, match="already"):
        NKIOpRegistry.register("t2n_test::scaled_add")(lambda a, b: a)
    with pytest.raises(KeyError):
        NKIOpRegistry.get_nki_kernel("t2n_test::nope", canonicalize=True)


def test_kernel_callable_three_ways(backend):
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    np.testing.assert_array_equal(scaled_add_kernel(a, b), a + 2 * b)       # host NumPy
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(scaled_add(x, y), x + 2 * y)                  # eager, on device
    torch.testing.assert_close(scaled_add_kernel[(1,)](x, y), x + 2 * y)     # grid syntax


def test_custom_op_in_compiled_graph(backend):
    f = torch.compile(lambda a, b: torch.relu(scaled_add(a, b)) * 3, backend="nkipy",
                      fullgraph=True)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(f(x, y), torch.relu(x + 2 * y) * 3)


def test_broken_custom_kernel_error(backend):
    with pytest.raises(NKIPyCustomKernelError, match="broken_kernel.*t2n_test.broken"):
        broken(torch.randn(4))
    torch._dynamo.reset()
    f = torch.compile(lambda a: broken(a) + 1, backend="nkipy")
    with pytest.raises(Exception, match="broken_kernel"):
        f(torch.randn(4))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return mark_subgraph_identity(torch.tanh(self.lin(x)) + x)


class Stack(nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(n)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_mark_subgraph_identity_shares_kernels(backend):
    torch.manual_seed(0)
    m = Stack()
    c = torch.compile(m, backend="nkipy", fullgraph=True)
    x = torch.randn(3, 8)
    before = dict(STATS)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    assert STATS["kernels"] - before["kernels"] == 2          # one layer kernel + the head
    assert STATS["shared"] - before["shared"] == 3            # layers 2-4 reuse layer 1's


def test_mark_subgraph_identity_training(backend):
    torch.manual_seed(0)
    m = Stack(3)
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy")
    x = torch.randn(5, 8)
    c(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mark_subgraph_identity(x), x)
