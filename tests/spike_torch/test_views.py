"""View ops share storage and read/write through to the original."""
from __future__ import annotations

import torch


def base():
    x = torch.arange(24.).reshape(2, 3, 4)
    return x, x.nkipy()


def test_view_and_reshape_share_storage():
    x, d = base()
    v = d.view(6, 4)
    r = d.reshape(4, 6)
    f = d.flatten()
    for t in (v, r, f):
        assert t.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    assert torch.equal(v.cpu(), x.view(6, 4))
    assert torch.equal(r.cpu(), x.reshape(4, 6))
    v[0, 0] = 100.0
    assert d[0, 0, 0].item() == 100.0


def test_transpose_permute_t():
    x, d = base()
    assert torch.equal(d.transpose(0, 2).cpu(), x.transpose(0, 2))
    assert torch.equal(d.permute(1, 0, 2).cpu(), x.permute(1, 0, 2))
    m = d[0]
    assert torch.equal(m.t().cpu(), x[0].t())
    assert not d.transpose(0, 1).is_contiguous()
    assert d.transpose(0, 1).data_ptr() == d.data_ptr()


def test_reshape_of_non_contiguous_copies():
    x, d = base()
    r = d.transpose(0, 2).reshape(-1)
    assert torch.equal(r.cpu(), x.transpose(0, 2).reshape(-1))


def test_slicing():
    x, d = base()
    s = d[1, 1:, ::2]
    assert torch.equal(s.cpu(), x[1, 1:, ::2])
    assert s.storage_offset() == x[1, 1:, ::2].storage_offset()
    assert torch.equal(d[..., 2].cpu(), x[..., 2])
    assert torch.equal(d[:].cpu(), x)
    s.fill_(-1)
    x[1, 1:, ::2] = -1
    assert torch.equal(d.cpu(), x)


def test_squeeze_unsqueeze_as_strided():
    x = torch.arange(6.).reshape(1, 6, 1)
    d = x.nkipy()
    assert d.squeeze().shape == (6,)
    assert d.squeeze(0).shape == (6, 1)
    assert d.unsqueeze(0).shape == (1, 1, 6, 1)
    a = d.as_strided((2, 2), (1, 2), 1)
    assert torch.equal(a.cpu(), x.as_strided((2, 2), (1, 2), 1))
    assert a.data_ptr() == d.data_ptr() + 4


def test_expand_narrow_select_unfold_split():
    x = torch.arange(10.)
    d = x.nkipy()
    e = d[:3].unsqueeze(0).expand(4, 3)
    assert e.data_ptr() == d.data_ptr()
    assert torch.equal(e.cpu(), x[:3].expand(4, 3))
    assert torch.equal(d.narrow(0, 2, 5).cpu(), x.narrow(0, 2, 5))
    assert torch.equal(d.unfold(0, 3, 2).cpu(), x.unfold(0, 3, 2))
    assert d.unfold(0, 3, 2).data_ptr() == d.data_ptr()
    parts = d.split(4)
    assert [p.data_ptr() - d.data_ptr() for p in parts] == [0, 16, 32]
    assert torch.equal(torch.stack([p.sum() for p in d.chunk(2)]).cpu(), torch.tensor([10., 35.]))


def test_properties():
    d = torch.empty(3, 4, 5, device="nkipy")
    assert d.shape == (3, 4, 5) and d.stride() == (20, 5, 1)
    assert d.numel() == 60 and d.dim() == 3 and d.is_contiguous()
    assert d.element_size() == 4 and d.nbytes == 240
    assert d.storage_offset() == 0
    assert d[1].storage_offset() == 20


def test_view_dtype_and_detach_alias():
    x = torch.arange(4, dtype=torch.int32)
    d = x.nkipy()
    v = d.view(torch.float32)
    assert torch.equal(v.cpu(), x.view(torch.float32))
    a = d.detach()
    assert a.data_ptr() == d.data_ptr()
