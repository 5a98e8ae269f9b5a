"""Factories on the nkipy device."""
from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.uint8, torch.bool, torch.float64])
def test_factories_dtypes(dtype):
    assert torch.empty(3, 4, dtype=dtype, device="nkipy").dtype == dtype
    assert torch.equal(torch.zeros(3, 4, dtype=dtype, device="nkipy").cpu(),
                       torch.zeros(3, 4, dtype=dtype))
    assert torch.equal(torch.ones(2, dtype=dtype, device="nkipy").cpu(), torch.ones(2, dtype=dtype))


def test_full_and_tensor():
    assert torch.equal(torch.full((2, 3), 7, device="nkipy").cpu(), torch.full((2, 3), 7))
    t = torch.tensor([[1.5, 2.5], [3.0, 4.0]], device="nkipy")
    assert t.device.type == "nkipy"
    assert torch.equal(t.cpu(), torch.tensor([[1.5, 2.5], [3.0, 4.0]]))
    assert torch.tensor(3, device="nkipy").item() == 3
    assert torch.tensor((), device="nkipy").numel() == 0


def test_random_factories():
    r = torch.randn(100, device="nkipy")
    assert r.device.type == "nkipy" and r.cpu().std() > 0.5
    u = torch.rand(100, device="nkipy").cpu()
    assert 0 <= u.min() and u.max() < 1
    i = torch.randint(0, 5, (50,), device="nkipy").cpu()
    assert 0 <= i.min() and i.max() < 5
    b = torch.empty(100, device="nkipy").bernoulli_(0.5).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    n = torch.empty(10, device="nkipy").normal_(5.0, 0.001).cpu()
    assert torch.allclose(n, torch.full((10,), 5.0), atol=0.01)


def test_empty_strided_and_fortran():
    e = torch.empty_strided((3, 4), (1, 3), device="nkipy")
    assert e.stride() == (1, 3) and not e.is_contiguous()
    x = torch.arange(12.).reshape(4, 3).t()
    e.copy_(x)
    assert torch.equal(e.cpu(), x)
    cl = torch.empty(2, 3, 4, 5, device="nkipy", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)


def test_zero_size():
    for shape in [(0,), (3, 0), (0, 2, 2)]:
        t = torch.empty(shape, device="nkipy")
        assert t.shape == shape and t.numel() == 0
        assert t.cpu().shape == shape


def test_like_and_new_factories():
    d = torch.ones(2, 3, device="nkipy:1")
    for t in (torch.empty_like(d), torch.zeros_like(d), torch.ones_like(d),
              torch.full_like(d, 2), d.new_empty(4), d.new_zeros(4), d.new_ones(1),
              torch.randn_like(d)):
        assert t.device == torch.device("nkipy:1")
    assert torch.equal(torch.full_like(d, 2).cpu(), torch.full((2, 3), 2.0))


def test_arange_linspace_eye_fallback():
    assert torch.equal(torch.arange(5, device="nkipy").cpu(), torch.arange(5))
    assert torch.allclose(torch.linspace(0, 1, 5, device="nkipy").cpu(), torch.linspace(0, 1, 5))
    assert torch.equal(torch.eye(3, device="nkipy").cpu(), torch.eye(3))


def test_fill_zero_item():
    d = torch.empty(3, 4, device="nkipy")
    d.fill_(1.25)
    assert torch.equal(d.cpu(), torch.full((3, 4), 1.25))
    d.t()[0].fill_(-2.0)
    assert torch.equal(d[:, 0].cpu(), torch.full((3,), -2.0))
    d.zero_()
    assert d.cpu().abs().sum().item() == 0
    d.fill_(-0.0)
    assert torch.signbit(d.cpu()).all()
    d.fill_(torch.tensor(4.0, device="nkipy"))
    assert d[2, 3].item() == 4.0
    i = torch.empty(5, dtype=torch.int32, device="nkipy").fill_(9)
    assert i[4].item() == 9 and isinstance(i[4].item(), int)
    assert torch.tensor([True], device="nkipy").item() is True
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        d.item()
