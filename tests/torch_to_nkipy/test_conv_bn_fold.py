"""The inference-only fold of an eval-mode batch norm into the convolution before
it (torch_to_nkipy.conv_bn_fold): results equal eager, and graphs that must keep
their batch norm (autograd, training mode, a convolution output used elsewhere,
float64) are left alone."""
from __future__ import annotations

import copy
from typing import List

import pytest
import torch
import torch.nn as nn

import torch_to_nkipy.backend as backend_mod
from torch_to_nkipy import conv_bn_fold

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture
def folds(backend, monkeypatch) -> List[str]:
    """The graphs (as text, after the fold) of every pair folded, one entry per
    inference graph that had a fold; counts with ``len``/``sum``."""
    seen: List[str] = []
    real = conv_bn_fold.fold_conv_batch_norm

    def spy(gm):
        n = real(gm)
        seen.extend([str(gm.graph)] * n)
        return n
    monkeypatch.setattr(backend_mod, "fold_conv_batch_norm", spy)
    return seen


def _randomise_bn(bn: nn.Module) -> None:
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.2, 2.0)
        if bn.affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)


def _model(*mods: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(*mods)
    for mod in m:
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            _randomise_bn(mod)
    return m.eval()


def _check(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    c = torch.compile(m, backend="nkipy", fullgraph=True, dynamic=False)
    with torch.no_grad():
        got, want = c(x), m(x)
    torch.testing.assert_close(got, want, **TOL)
    return c


@pytest.mark.parametrize("bias", [True, False])
def test_conv_bn(folds, bias):
    _check(_model(nn.Conv2d(3, 8, 3, padding=1, bias=bias), nn.BatchNorm2d(8)),
           torch.randn(2, 3, 16, 16))
    assert len(folds) == 1


def test_conv_bn_relu_reads_conv(folds):
    """The ReLU then reads the convolution directly (so its epilogue fuses it)."""
    _check(_model(nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8),
                  nn.ReLU()), torch.randn(1, 4, 20, 20))
    assert len(folds) == 1
    assert "_native_batch_norm" not in folds[0]
    assert "relu.default](args = (%convolution" in folds[0]


@pytest.mark.parametrize("groups", [2, 8])
def test_grouped_and_depthwise(folds, groups):
    _check(_model(nn.Conv2d(8, 8, 3, padding=1, groups=groups, bias=False),
                  nn.BatchNorm2d(8), nn.ReLU6()), torch.randn(2, 8, 12, 12))
    assert len(folds) == 1


def test_conv1d_and_bn_without_affine(folds):
    _check(_model(nn.Conv1d(3, 6, 5, padding=2), nn.BatchNorm1d(6, affine=False), nn.ReLU()),
           torch.randn(2, 3, 40))
    assert len(folds) == 1


def test_chain_of_pairs(folds):
    _check(_model(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                  nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU()),
           torch.randn(1, 3, 16, 16))
    assert len(folds) == 2


class _ConvUsedTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(self.bn(y)) + y


class _BnUsedTwice(_ConvUsedTwice):
    def forward(self, x):
        z = self.bn(self.conv(x))
        return torch.relu(z) * z


def test_conv_output_with_two_users_not_folded(folds):
    torch.manual_seed(0)
    m = _ConvUsedTwice()
    _randomise_bn(m.bn)
    _check(m.eval(), torch.randn(2, 3, 16, 16))
    assert folds == []


def test_bn_output_with_two_users(folds):
    """Both users of the batch norm's output read the folded convolution."""
    torch.manual_seed(0)
    m = _BnUsedTwice()
    _randomise_bn(m.bn)
    _check(m.eval(), torch.randn(2, 3, 16, 16))
    assert len(folds) == 1


def test_training_mode_not_folded(folds):
    """Training mode: batch statistics and running-stat updates, as eager."""
    m = _model(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).train()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy", fullgraph=True, dynamic=False)
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        got, want = c(x), ref(x)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(m[1].running_var, ref[1].running_var, **TOL)
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean, **TOL)
    assert folds == []


def test_graph_with_gradients_not_folded(folds):
    """Eval mode with gradients needed: the forward autograd differentiates keeps
    its batch norm, and the gradients equal eager."""
    m = _model(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    c = torch.compile(m, backend="nkipy", fullgraph=True, dynamic=False)
    x = torch.randn(2, 3, 16, 16)
    got = c(x)
    got.sum().backward()
    g_got = m[0].weight.grad.clone()
    m.zero_grad()
    want = m(x)
    want.sum().backward()
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(g_got, m[0].weight.grad, **TOL)
    assert folds == []


def test_changed_parameters_seen_next_call(folds):
    m = _model(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    c = _check(m, torch.randn(2, 3, 16, 16))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        m[1].running_var.mul_(4.0)
        m[1].running_mean.add_(0.25)
        torch.testing.assert_close(c(x), m(x), **TOL)
        m[1].weight.mul_(-1.0)
        m[0].weight.add_(0.1)
        torch.testing.assert_close(c(x), m(x), **TOL)
    assert len(folds) == 1   # one graph, compiled once


def _fold_eagerly(m: nn.Module, x: torch.Tensor) -> int:
    """Folds the ATen inference graph of ``m(x)`` and runs it eagerly, checking
    the result against ``m(x)``; returns how many pairs were folded."""
    from torch._functorch.aot_autograd import aot_module_simplified

    count = []

    def fold_and_run(gm, ex):
        def inner(g, e):
            count.append(conv_bn_fold.fold_conv_batch_norm(g))
            return g
        return aot_module_simplified(gm, ex, fw_compiler=inner,
                                     decompositions=backend_mod.decompositions(),
                                     keep_inference_input_mutations=True)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(m, backend=fold_and_run, fullgraph=True, dynamic=False)(x)
        torch.testing.assert_close(got, m(x), **TOL)
    torch._dynamo.reset()
    return sum(count)


def test_float64_not_folded():
    """Only float32 pairs are folded (checked on the graph run eagerly: the C code
    generator has no float64 convolution)."""
    m = _model(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    x = torch.randn(2, 3, 16, 16)
    assert _fold_eagerly(m.double(), x.double()) == 0
    assert _fold_eagerly(m.float(), x) == 1


def test_weight_heavy_pair_not_folded_with_limit(folds, monkeypatch):
    """With MAX_WEIGHT_PER_OUTPUT set, a pair whose weight outnumbers its output
    (here a 1x1 output from a 3x3x64x64 weight) keeps its batch norm."""
    monkeypatch.setattr(conv_bn_fold, "MAX_WEIGHT_PER_OUTPUT", 2.0)
    _check(_model(nn.Conv2d(64, 64, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU()),
           torch.randn(1, 64, 3, 3))
    assert folds == []


def test_weight_heavy_pair_folded_by_default(folds):
    assert conv_bn_fold.MAX_WEIGHT_PER_OUTPUT is None
    _check(_model(nn.Conv2d(64, 64, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU()),
           torch.randn(1, 64, 3, 3))
    assert len(folds) == 1


def test_dynamic_batch(folds):
    """A symbolic batch size: the pair is folded (the weights' shapes are static)
    and every batch size equals eager."""
    m = _model(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
    c = torch.compile(m, backend="nkipy", dynamic=True)
    with torch.no_grad():
        for n in (2, 3, 5):
            x = torch.randn(n, 3, 10, 10)
            torch.testing.assert_close(c(x), m(x), **TOL)
    assert len(folds) >= 1
