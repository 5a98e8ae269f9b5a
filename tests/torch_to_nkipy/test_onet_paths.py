"""The paths MTCNN's ONet takes, compiled with torch.compile(backend="nkipy")
against eager PyTorch.

max_pool2d compiled with its indices dead (nn.MaxPool2d, F.max_pool2d): the
lowering folds the window's taps with np.maximum into one loop over a padded
input (padded only where a window leaves the input: padding, ceil_mode). Each
case against eager PyTorch, exactly (a max selects one of its inputs), with NaN
and infinities placed in the input; the MTCNN ONet's three pools among them.
Convolutions with few input channels (runtime/src/conv_direct.c: c * kh * kw
<= 32) with bias, padding, dilation and the activations fused into them,
within float32's tolerance (rtol = atol = 1e-5)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

CASES = [
    # (shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 4, 46, 46), 3, 2, 0, 1, True),     # ONet pool1: 46 -> 23, the last window 2 wide
    ((2, 4, 21, 21), 3, 2, 0, 1, True),     # ONet pool2: 21 -> 10
    ((2, 4, 8, 8), 2, 2, 0, 1, True),       # ONet pool3: no extra needed
    ((1, 3, 7, 9), 2, 2, 0, 1, True),       # odd sizes: a 1-wide last window each way
    ((1, 3, 7, 7), 3, 2, 1, 1, True),       # padding and ceil together
    ((1, 2, 10, 11), 3, (2, 3), 0, 1, True),  # a ceil window that would start past the end
    ((1, 2, 9, 9), 3, 2, 0, 2, True),       # dilation with ceil
    ((1, 2, 9, 8), (3, 2), (2, 1), (1, 0), 1, False),
]


def _input(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    idx = torch.randperm(flat.numel(), generator=g)[:6]
    flat[idx] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0,
                              float("nan")])
    return x


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_max_pool_values_equal_eager(case, backend):
    shape, k, s, p, d, ceil = case

    def f(x):
        return F.max_pool2d(x * 1.5, k, s, p, d, ceil_mode=ceil)

    x = _input(shape, len(shape) + sum(shape))
    ref = f(x)
    out = torch.compile(f, backend="nkipy", dynamic=False)(x)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)


def test_max_pool_with_prelu_before_it(backend):
    """conv -> PReLU -> ceil-mode pool (an ONet stage) on the nkipy device, against
    eager within the convolution's float32 tolerance."""
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.PReLU(8),
                            torch.nn.MaxPool2d(3, 2, ceil_mode=True)).eval()
    x = torch.randn(2, 3, 24, 24)
    with torch.no_grad():
        ref = m(x)
        out = torch.compile(m.to("nkipy"), backend="nkipy", dynamic=False)(x.to("nkipy"))
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


CONVS = [
    # (in, out, kernel, stride, padding, dilation, bias, activation after it)
    (3, 32, 3, 1, 0, 1, True, None),                 # ONet conv1
    (3, 13, 3, 1, 1, 1, True, torch.nn.ReLU()),       # ReLU fused (NKRT_ACT_RELU)
    (2, 9, (3, 5), (2, 1), (2, 1), (1, 2), False, torch.nn.ReLU6()),  # clamp fused
    (1, 5, 4, 1, 3, 1, True, torch.nn.PReLU(5)),      # PReLU after it (its own loop)
    (8, 17, 2, 1, 0, 1, True, torch.nn.Hardtanh(-0.25, 0.5)),
]


@pytest.mark.parametrize("conv", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_few_channel_convolution_equals_eager(conv, backend):
    cin, cout, k, s, p, d, bias, act = conv
    torch.manual_seed(cin * 31 + cout)
    layers = [torch.nn.Conv2d(cin, cout, k, s, p, d, bias=bias)] + ([act] if act else [])
    m = torch.nn.Sequential(*layers).eval()
    x = torch.randn(3, cin, 21, 37)
    with torch.no_grad():
        ref = m(x)
        out = torch.compile(m.to("nkipy"), backend="nkipy", dynamic=False)(x.to("nkipy"))
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
