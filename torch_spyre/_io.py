"""Moving the spyre device's tiled bytes: the kernels that copy between host
and device (``_copy_from``), fill, read one element (``_local_scalar_dense``)
and resize, registered for the device by :func:`install`.

A copy to the device tiles the host tensor into sticks on the host and writes
the storage's bytes; a copy back reads them and untiles. A device tensor that
is a view covers part of its storage's host tensor: writing it reads, updates
and rewrites that whole host tensor.
"""
from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence

import torch

from spike_torch import _C

from . import _layout
from ._debug import log
from .constants import DEVICE_NAME


def _rw(t: torch.Tensor, write: bool, host: torch.Tensor) -> None:
    _C.checked(_C.lib.spike_torch_storage_rw, t.untyped_storage()._cdata, int(write), 0,
               ctypes.c_void_p(host.data_ptr()), host.numel() * host.element_size())


def layout_of(t: torch.Tensor):
    """``(host_size, layout)`` of ``t``'s storage; the default one of ``t`` for
    an empty storage. RuntimeError for a storage no layout was recorded for."""
    found = _layout.storage_layout(t)
    if found is not None:
        return found
    if t.untyped_storage().nbytes() != 0:
        raise RuntimeError(f"{DEVICE_NAME}: this tensor's storage was not made by the {DEVICE_NAME} "
                           "device's factories (no tiled layout is recorded for it)")
    return list(t.shape), _layout.SpyreTensorLayout(list(t.shape), t.dtype)


def covers_base(t: torch.Tensor, host_size: Sequence[int]) -> bool:
    """Whether ``t`` is its storage's whole host tensor, in order."""
    return t.storage_offset() == 0 and list(t.shape) == list(host_size) and t.is_contiguous()


def read_base(t: torch.Tensor) -> torch.Tensor:
    """The host tensor ``t``'s storage holds, on the CPU in ``t``'s dtype."""
    host_size, layout = layout_of(t)
    if layout.nbytes() == 0 or t.untyped_storage().nbytes() == 0:
        return torch.zeros(host_size, dtype=t.dtype)
    raw = torch.empty(layout.nbytes() // layout.torch_dtype().itemsize, dtype=layout.torch_dtype())
    _rw(t, False, raw)
    return _layout.from_device_dtype(_layout.untile(raw, host_size, layout), t.dtype)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """The values of device tensor ``t`` on the CPU."""
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    base = read_base(t)
    if covers_base(t, base.shape):
        return base
    return base.reshape(-1).as_strided(t.shape, t.stride(), t.storage_offset())


def write(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Writes CPU tensor ``src`` (broadcast to ``dst``'s shape) into device tensor ``dst``."""
    if dst.numel() == 0:
        return
    host_size, layout = layout_of(dst)
    if covers_base(dst, host_size):
        base = src.to(dst.dtype).expand(dst.shape)
    else:
        base = read_base(dst).contiguous()
        base.reshape(-1).as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(src)
    raw = _layout.tile(_layout.to_device_dtype(base.contiguous()), layout).contiguous()
    _rw(dst, True, raw)


def copy_storage(dst: torch.Tensor, src: torch.Tensor, nbytes: int) -> None:
    """Copies the first ``nbytes`` of ``src``'s storage into ``dst``'s, on the device."""
    _C.checked(_C.lib.spike_torch_storage_copy, dst.untyped_storage()._cdata,
               src.untyped_storage()._cdata, nbytes)


# ---- the kernels ---------------------------------------------------------------------

def _copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    src_dev, dst_dev = self.device.type == DEVICE_NAME, dst.device.type == DEVICE_NAME
    if not (src_dev or self.device.type == "cpu") or not (dst_dev or dst.device.type == "cpu"):
        raise RuntimeError(f"{DEVICE_NAME} copies are between {DEVICE_NAME} and cpu tensors, "
                           f"got {self.device} -> {dst.device}")
    if dst.numel() == 0:
        return dst
    if src_dev and not dst_dev:
        log("copy", f"device to host: {list(self.shape)} {self.dtype}")
        dst.copy_(to_host(self))
        return dst
    if not src_dev:
        log("copy", f"host to device: {list(dst.shape)} {dst.dtype}")
        write(dst, self)
        return dst
    # device to device: whole storages of one layout copy as bytes
    if self.dtype == dst.dtype and self.shape == dst.shape:
        s_host, s_layout = layout_of(self)
        d_host, d_layout = layout_of(dst)
        if covers_base(self, s_host) and covers_base(dst, d_host) and s_layout == d_layout:
            log("copy", f"device to device: {s_layout.nbytes()} bytes")
            copy_storage(dst, self, s_layout.nbytes())
            return dst
    log("copy", f"device to device through the host: {list(dst.shape)} {dst.dtype}")
    write(dst, to_host(self))
    return dst


def _copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    dst.resize_(self.shape)
    return _copy_from(self, dst)


def _fill(self: torch.Tensor, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.dim()} dimensions.")
        value = value.item()
    log("fill", f"{list(self.shape)} {self.dtype} with {value}")
    write(self, torch.full((), value, dtype=self.dtype))
    return self


def _zero(self: torch.Tensor) -> torch.Tensor:
    return _fill(self, 0)


def _local_scalar_dense(self: torch.Tensor) -> Any:
    if self.numel() != 1:
        raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    return to_host(self).item()


def _resize(self: torch.Tensor, size: Sequence[int],
            memory_format: Optional[torch.memory_format] = None) -> torch.Tensor:
    """As PyTorch's resize_: the tensor becomes contiguous of ``size`` over its
    storage's elements from its offset on, in storage order. Tiled storage
    changes its layout with the size, so the tensor moves to new storage of
    the new size holding those elements (views of the old storage keep it)."""
    size = [int(s) for s in size]
    if any(s < 0 for s in size):
        raise RuntimeError(f"resize_: negative size in {size}")
    if list(self.shape) == size and self.is_contiguous():
        return self
    new = torch.empty(size, dtype=self.dtype, device=self.device)
    if new.numel() and self.untyped_storage().nbytes():
        flat = read_base(self).reshape(-1)[self.storage_offset():]
        keep = min(flat.numel(), new.numel())
        if keep:
            host = torch.zeros(new.numel(), dtype=self.dtype)
            host[:keep] = flat[:keep]
            write(new, host.reshape(size))
    self.set_(new.untyped_storage(), 0, new.shape, new.stride())
    return self


def _view_dtype(self: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``Tensor.view(dtype)``: the same dtype is an alias; another would read
    the bytes of sticks laid out for this dtype as elements of that one."""
    if dtype == self.dtype:
        return torch.ops.aten.alias(self)
    raise RuntimeError(
        f"{DEVICE_NAME}: Tensor.view({dtype}) of a {self.dtype} tensor would reinterpret bytes "
        f"the device holds in sticks laid out for {self.dtype}; convert with .to({dtype}) "
        "instead (or view the tensor's CPU copy)")


def _index(self: torch.Tensor, indices: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """``x[mask]``: a bool (or uint8) index becomes the long indices of its
    nonzero elements (a device op), the rest is an index by long tensors."""
    from spike_torch import _generic

    expanded: List[Optional[torch.Tensor]] = []
    for i in indices:
        if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
            expanded.extend(i.nonzero().unbind(1))
        else:
            expanded.append(i)
    return _generic.call(torch.ops.aten.index.Tensor, (self, expanded), {})


def install(lib: Any) -> None:
    """Registers the kernels on ``lib`` (an ``aten`` IMPL library)."""
    for name, fn in (("_copy_from", _copy_from), ("_copy_from_and_resize", _copy_from_and_resize),
                     ("fill_.Scalar", _fill), ("fill_.Tensor", _fill), ("zero_", _zero),
                     ("_local_scalar_dense", _local_scalar_dense), ("resize_", _resize),
                     ("view.dtype", _view_dtype), ("index.Tensor", _index)):
        lib.impl(name, fn, "PrivateUse1")
