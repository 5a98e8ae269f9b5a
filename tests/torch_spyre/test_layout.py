"""The stick-tiled layout: the default tiling table, the layout type, and
device memory that really holds the tiled bytes."""
from __future__ import annotations

import ctypes
import math

import pytest
import torch

from torch_spyre import _C, _layout
from torch_spyre._C import DataFormats, SpyreTensorLayout

from spike_torch import _C as lib


@pytest.mark.parametrize("size,dtype,order,device_size,dim_map", [
    ([512, 256], torch.float16, None, [4, 512, 64], [1, 0, 1]),
    ([128], torch.float16, None, [2, 64], [0, 0]),
    ([512, 8, 256], torch.float16, None, [8, 4, 512, 64], [1, 2, 0, 2]),
    ([512, 256], torch.float16, [1, 0], [8, 256, 64], [0, 1, 0]),
    ([512, 256], torch.float32, None, [8, 512, 32], [1, 0, 1]),
    ([3, 1, 5], torch.float16, None, [1, 3, 64], [2, 0, 2]),     # size-1 dims dropped
    ([], torch.float16, None, [64], [-1]),
    ([2], torch.int64, None, [1, 32], [0, 0]),                    # held as int32
    ([2], torch.bool, None, [1, 64], [0, 0]),                     # held as float16
])
def test_default_tiling(size, dtype, order, device_size, dim_map):
    stl = SpyreTensorLayout(size, dtype, order) if order else SpyreTensorLayout(size, dtype)
    assert stl.device_size == device_size
    assert stl.dim_map == dim_map
    assert stl.elems_per_stick() == 128 // _layout.device_dtype(dtype).itemsize


def test_layout_type():
    stl = SpyreTensorLayout([512, 256], torch.float16)
    assert str(stl) == ("SpyreTensorLayout(device_size=[4, 512, 64], dim_map=[1, 0, 1], "
                        "device_dtype=DataFormats.SEN169_FP16)")
    assert stl == SpyreTensorLayout([4, 512, 64], [1, 0, 1], DataFormats.SEN169_FP16)
    assert stl != SpyreTensorLayout([512, 256], torch.float32)
    assert stl.host_stick_dim() == 1
    assert _C.get_device_dtype(torch.int64) == DataFormats.IEEE_INT32
    assert _C.get_device_dtype(torch.bool) == DataFormats.SEN169_FP16
    assert _C.get_elem_in_stick(torch.float32) == 32


def test_layout_errors():
    with pytest.raises(TypeError, match="the spyre device holds no torch.float64 tensors: it "
                                        "holds float16"):
        SpyreTensorLayout([4], torch.float64)
    with pytest.raises(ValueError, match="not a permutation"):
        SpyreTensorLayout([4, 4], torch.float16, [0, 0])
    with pytest.raises(ValueError, match="one stick of 64 elements"):
        SpyreTensorLayout([4, 32], [0, 0], DataFormats.SEN169_FP16)
    with pytest.raises(TypeError, match="device_dtype must be a DataFormats"):
        SpyreTensorLayout([4, 64], [0, 0], torch.float16)
    with pytest.raises(ValueError, match="at most 6 dimensions"):
        SpyreTensorLayout([2] * 7, torch.float16)


def test_storage_is_padded_to_sticks(spyre):
    x = torch.tensor([1, 2], dtype=torch.float16, device=spyre)
    assert x.untyped_storage().nbytes() == 128
    assert torch.empty(3, 100, dtype=torch.float32, device=spyre).untyped_storage().nbytes() == \
        3 * 4 * 128


def _raw_bytes(t):
    nbytes = t.device_tensor_layout().nbytes()
    buf = (ctypes.c_char * nbytes)()
    lib.checked(lib.lib.spike_torch_storage_rw, t.untyped_storage()._cdata, 0, 0,
                ctypes.addressof(buf), nbytes)
    return bytes(buf)


def test_device_memory_holds_tiles(spyre):
    """Element (i, j) of a float16 [3, 70] tensor lies at stick j // 64 of row i."""
    host = torch.arange(3 * 70, dtype=torch.float16).reshape(3, 70)
    dev = host.to(spyre)
    raw = torch.frombuffer(bytearray(_raw_bytes(dev)), dtype=torch.float16).reshape(2, 3, 64)
    assert torch.equal(raw[0, :, :], host[:, :64])
    assert torch.equal(raw[1, :, :6], host[:, 64:])
    assert torch.count_nonzero(raw[1, :, 6:]) == 0        # padding


@pytest.mark.parametrize("shape", [[5], [70], [3, 64], [3, 65], [2, 3, 130], [2, 1, 3, 4, 5],
                                   [2, 2, 2, 2, 2, 33], [1], []])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16, torch.int8,
                                   torch.int16, torch.int32, torch.int64, torch.bool])
def test_round_trip(spyre, shape, dtype):
    g = torch.Generator().manual_seed(math.prod(shape) + len(shape))
    host = (torch.randn(shape, generator=g) * 50).to(dtype)
    dev = host.to(spyre)
    assert dev.dtype == dtype and list(dev.shape) == shape
    assert torch.equal(dev.cpu(), host)
    # what tile() writes is what untile() reads, for the layout the device chose
    stl = dev.device_tensor_layout()
    raw = _layout.tile(_layout.to_device_dtype(host), stl)
    assert torch.equal(_layout.from_device_dtype(_layout.untile(raw, shape, stl), dtype), host)


def test_dim_order_layout(spyre):
    host = torch.randn(5, 70, dtype=torch.float16)
    stl = SpyreTensorLayout([5, 70], torch.float16, [1, 0])
    dev = host.to(spyre, device_layout=stl)
    assert dev.device_tensor_layout() == stl
    assert torch.equal(dev.cpu(), host)
    assert torch.equal((dev + 1).cpu(), host + 1)   # kernels read the layout they are given
    e = torch.empty(5, 70, dtype=torch.float16, device=spyre, device_layout=stl)
    assert e.device_tensor_layout() == stl and e.shape == (5, 70)
    e.copy_(host)
    assert torch.equal(e.cpu(), host)


def test_device_layout_errors(spyre):
    stl = SpyreTensorLayout([5, 70], torch.float16)
    with pytest.raises(ValueError, match="a torch.float32 tensor is held as DataFormats.IEEE_FP32"):
        torch.empty(5, 70, device=spyre, device_layout=stl)
    with pytest.raises(ValueError, match="cannot hold a tensor of size"):
        torch.empty(6, 70, dtype=torch.float16, device=spyre, device_layout=stl)
    with pytest.raises(ValueError, match="needs device='spyre'"):
        torch.empty(5, 70, dtype=torch.float16, device="cpu", device_layout=stl)
    assert torch.ones(2).device_tensor_layout() is None
