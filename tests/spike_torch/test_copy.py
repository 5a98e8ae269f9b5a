"""Copies CPU<->nkipy and nkipy<->nkipy: dtypes, non-contiguous, broadcasting, cores."""
from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]


def sample(shape, dtype):
    x = torch.arange(int(torch.tensor(shape).prod()) if shape else 1).reshape(shape)
    if dtype == torch.bool:
        return x % 3 == 0
    if dtype.is_complex:
        return (x + 1j * x).to(dtype)
    return (x % 100).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_dtypes(dtype):
    x = sample((3, 5), dtype)
    d = x.to("nkipy")
    assert d.device.type == "nkipy" and d.dtype == dtype
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("shape", [(), (1,), (0,), (2, 0, 3), (7,), (2, 3, 4), (1, 1, 1, 5)])
def test_round_trip_shapes(shape):
    x = torch.randn(shape)
    assert torch.equal(x.to("nkipy").cpu(), x)


def test_large_round_trip():
    x = torch.randn(1 << 20)
    assert torch.equal(x.nkipy().cpu(), x)


def test_non_contiguous_device_to_host():
    x = torch.arange(60.).reshape(3, 4, 5)
    d = x.nkipy()
    for view in (lambda t: t.t() if t.dim() == 2 else t.transpose(0, 2),
                 lambda t: t.permute(1, 2, 0), lambda t: t[:, ::2, 1:],
                 lambda t: t[1], lambda t: t[..., 3], lambda t: t.unsqueeze(1).expand(3, 2, 4, 5)):
        assert torch.equal(view(d).cpu(), view(x))


def test_non_contiguous_host_to_device():
    x = torch.arange(60.).reshape(3, 4, 5)
    assert torch.equal(x.permute(2, 0, 1).to("nkipy").cpu(), x.permute(2, 0, 1))
    assert torch.equal(x[:, ::2].to("nkipy").cpu(), x[:, ::2])


def test_copy_into_strided_device_view():
    d = torch.zeros(4, 6, device="nkipy")
    d[:, ::2] = torch.ones(4, 3)
    d.t()[1].copy_(torch.full((4,), 5.0))
    expected = torch.zeros(4, 6)
    expected[:, ::2] = 1
    expected.t()[1] = 5
    assert torch.equal(d.cpu(), expected)


def test_copy_broadcasts():
    d = torch.zeros(3, 4, device="nkipy")
    d.copy_(torch.arange(4.))
    assert torch.equal(d.cpu(), torch.arange(4.).expand(3, 4))
    d.copy_(torch.tensor(2.0))
    assert torch.equal(d.cpu(), torch.full((3, 4), 2.0))


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.float16), (torch.float32, torch.int64),
                                     (torch.int32, torch.float64),
                                     (torch.float32, torch.bfloat16), (torch.int64, torch.bool)])
def test_dtype_change_on_copy(src, dst):
    x = sample((4, 3), src)
    expected = x.to(dst)
    # host to device
    d = torch.empty(4, 3, dtype=dst, device="nkipy")
    d.copy_(x)
    assert torch.equal(d.cpu(), expected)
    # device to host
    h = torch.empty(4, 3, dtype=dst)
    h.copy_(x.nkipy())
    assert torch.equal(h, expected)
    # device to device (and .to(dtype) on the device)
    assert torch.equal(x.nkipy().to(dst).cpu(), expected)
    assert torch.equal(x.to("nkipy", dtype=dst).cpu(), expected)


def test_device_to_device_same_core():
    x = torch.randn(5, 6)
    a = x.nkipy()
    b = torch.empty(5, 6, device="nkipy")
    b.copy_(a)
    assert b.data_ptr() != a.data_ptr()
    assert torch.equal(b.cpu(), x)
    c = a.clone()
    assert torch.equal(c.cpu(), x) and c.data_ptr() != a.data_ptr()
    assert torch.equal(a.t().contiguous().cpu(), x.t())


def test_device_to_device_across_cores():
    x = torch.randn(5, 6)
    a = x.to("nkipy:0")
    b = a.to("nkipy:1")
    assert b.device == torch.device("nkipy:1")
    assert torch.equal(b.cpu(), x)
    c = torch.empty(6, 5, device="nkipy:1")
    c.copy_(a.t())
    assert torch.equal(c.cpu(), x.t())
    assert torch.equal(b.to("nkipy:0", torch.float64).cpu(), x.double())


def test_overlapping_self_copy_is_refused_as_on_the_cpu():
    """A copy from a transposed view of the destination would read elements it
    already wrote: the CPU refuses it, and so does the device (nothing
    written); a copy from the destination itself, or a disjoint part of its
    storage, runs."""
    x = torch.arange(16.).reshape(4, 4)
    d = x.nkipy()
    msg = "some elements of the input tensor and the written-to tensor refer to a single"
    c = x.clone()
    with pytest.raises(RuntimeError, match=msg):
        c.copy_(c.t())
    with pytest.raises(RuntimeError, match=msg):
        d.copy_(d.t())
    assert torch.equal(d.cpu(), x)
    d.copy_(d)
    d[2:].copy_(d[:2])
    assert torch.equal(d.cpu(), torch.cat([x[:2], x[:2]]))


def test_non_blocking_copy():
    x = torch.randn(10)
    d = x.to("nkipy", non_blocking=True)
    torch.nkipy.synchronize()
    assert torch.equal(d.to("cpu", non_blocking=True), x)


def test_copy_empty():
    d = torch.empty(0, 3, device="nkipy")
    d.copy_(torch.empty(0, 3))
    assert d.cpu().shape == (0, 3)


def test_to_same_device_is_noop():
    d = torch.ones(3, device="nkipy")
    assert d.to("nkipy") is d
    assert d.to("nkipy:0").data_ptr() == d.data_ptr()


def test_dense_permuted_layouts_keep_strides():
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    d = x.to("nkipy")
    assert d.stride() == x.stride()
    assert torch.equal(d.cpu(), x)
    p = torch.randn(3, 4).t()
    dp = p.to("nkipy")
    assert dp.stride() == p.stride() and torch.equal(dp.cpu(), p)
    dp.copy_(torch.ones(4, 3))
    assert torch.equal(dp.cpu(), torch.ones(4, 3))
