"""resize_, resize_as_, set_ and storage resizing keep the data."""
from __future__ import annotations

import torch


def test_grow_preserves_data():
    d = torch.arange(6.).nkipy()
    d.resize_(100)
    assert d.shape == (100,)
    assert torch.equal(d[:6].cpu(), torch.arange(6.))
    assert d.untyped_storage().nbytes() >= 400


def test_shrink_and_reshape():
    d = torch.arange(12.).nkipy()
    ptr = d.data_ptr()
    d.resize_(2, 3)
    assert d.data_ptr() == ptr and d.shape == (2, 3)
    assert torch.equal(d.cpu(), torch.arange(6.).reshape(2, 3))
    d.resize_(0)
    assert d.numel() == 0
    d.resize_(3, 4)
    assert torch.equal(d.cpu().flatten()[:6], torch.arange(6.))


def test_resize_as_and_memory_format():
    d = torch.zeros(2, device="nkipy")
    d.resize_as_(torch.empty(2, 3, 4, 5))
    assert d.shape == (2, 3, 4, 5) and d.is_contiguous()
    d.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert d.is_contiguous(memory_format=torch.channels_last)


def test_resize_empty_tensor_allocates():
    d = torch.empty(0, device="nkipy")
    d.resize_(10).fill_(3)
    assert torch.equal(d.cpu(), torch.full((10,), 3.0))


def test_storage_resize():
    d = torch.arange(4.).nkipy()
    s = d.untyped_storage()
    s.resize_(64)
    assert s.nbytes() == 64
    t = torch.empty(0, device="nkipy").set_(s, 0, (4,), (1,))
    assert torch.equal(t.cpu(), torch.arange(4.))


def test_set_shares_storage():
    a = torch.arange(8.).nkipy()
    b = torch.empty(0, device="nkipy")
    b.set_(a)
    assert b.data_ptr() == a.data_ptr() and torch.equal(b.cpu(), a.cpu())
    c = torch.empty(0, device="nkipy").set_(a.untyped_storage(), 2, (2, 2), (2, 1))
    assert torch.equal(c.cpu(), torch.arange(2., 6.).reshape(2, 2))
    b.set_()
    assert b.numel() == 0


def test_out_variant_resizes():
    out = torch.empty(0, device="nkipy")
    torch.add(torch.ones(3, device="nkipy"), 1, out=out)
    assert out.shape == (3,) and torch.equal(out.cpu(), torch.full((3,), 2.0))
