"""The one boundary between torch tensors and device tensors.

Everything that moves data between PyTorch and the nkipy device goes through
here, so tensors already on the ``nkipy`` PyTorch device (spike_torch) can be
handed to kernels without copies once that device exists: ``to_device`` is
the single place to add that path.

Every dtype is stored and computed as it is, 64-bit types included: compiled
kernels compute int64 as int64_t and float64 as double (nothing is narrowed to
32 bits, so no value or intermediate can silently differ from eager).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from nkipy.runtime import DeviceTensor
# the one dtype table and the torch <-> NumPy conversions (spike_torch.dtypes),
# re-exported: the backend's modules and custom kernels take them from here
from spike_torch.dtypes import (numpy_dtype, numpy_to_torch, torch_dtype,  # noqa: F401
                                torch_to_numpy)


def device_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a torch dtype has on the device: itself (64-bit types too)."""
    return dtype


DEVICE_TYPE = "nkipy"


def is_nkipy(x: Any) -> bool:
    """Whether a tensor (or device) is on the nkipy PyTorch device (spike_torch)."""
    dev = x.device if isinstance(x, torch.Tensor) else x
    return isinstance(dev, torch.device) and dev.type == DEVICE_TYPE


def _wrap_nkipy(t: torch.Tensor, name: Optional[str] = None) -> DeviceTensor:
    """A device tensor over a contiguous nkipy torch tensor's own memory (no copy)."""
    import spike

    from spike_torch._C import check_live

    check_live([t], "compiled kernel input")
    if t.numel() == 0:
        # an empty tensor may own no memory (its data pointer is NULL): a device
        # tensor of its shape holds nothing to read either
        return DeviceTensor.from_numpy(np.empty(tuple(t.shape), numpy_dtype(t.dtype, strict=False)),
                                       core_id=t.device.index or 0)
    rt = spike.get_spike_singleton()
    ref = rt.slice_from_address(t.data_ptr(), t.numel() * t.element_size())
    d = DeviceTensor._unchecked(ref, tuple(t.shape), numpy_dtype(t.dtype, strict=False),
                                name if name is not None else ref.name, rt)
    d._torch_backing = t  # type: ignore[attr-defined]  (keeps the memory alive)
    return d


def to_device(t: torch.Tensor, core_id: int = 0) -> DeviceTensor:
    """A device tensor holding ``t``'s values: for a tensor on the nkipy device,
    its own memory (a device-side copy only when it is non-contiguous or on
    another core); for a CPU tensor, a host-to-device copy.

    The wrapper of an nkipy tensor's own memory is kept on the tensor and reused
    while the tensor still has the same memory, shape, strides and dtype (weights
    and caches passed to every call are wrapped once)."""
    if t.is_cpu:
        return DeviceTensor.from_numpy(torch_to_numpy(t), core_id=core_id)
    key = (t.data_ptr(), t.shape, t.stride(), t.dtype, core_id)
    cached = t.__dict__.get("_nkipy_wrapper")
    if cached is not None and cached[0] == key:
        return cached[1]
    if t.device.index in (None, core_id) and t.is_contiguous():
        d = _wrap_nkipy(t.detach())
        t.__dict__["_nkipy_wrapper"] = (key, d)
        return d
    src = t.detach()
    if src.device.index not in (None, core_id):
        src = src.to(torch.device(DEVICE_TYPE, core_id))
    return _wrap_nkipy(src.contiguous())


def empty_for_output(shape: Any, np_dtype: Any, like: torch.device) -> Optional[DeviceTensor]:
    """An output buffer on the nkipy device when the call's tensors live there
    (the kernel writes the result in place: no copy), else None (the runtime
    allocates)."""
    if not is_nkipy(like):
        return None
    t = torch.empty(tuple(shape), dtype=torch_dtype(np_dtype), device=like)
    return _wrap_nkipy(t)


def from_device(d: DeviceTensor, like_dtype: Optional[torch.dtype],
                device: torch.device) -> torch.Tensor:
    """The device tensor's values as a torch tensor of ``like_dtype`` (default: its
    own) on ``device``."""
    backing = getattr(d, "_torch_backing", None)
    if backing is not None:
        return backing if like_dtype is None or backing.dtype == like_dtype \
            else backing.to(like_dtype)
    t = numpy_to_torch(d.numpy(), like_dtype)
    return t if device.type == "cpu" else t.to(device)


def write_back(dst: torch.Tensor, d: DeviceTensor) -> None:
    """Copies a device tensor's values into ``dst`` (an input mutated in place);
    nothing to do when the kernel wrote into ``dst``'s own memory."""
    backing = getattr(d, "_torch_backing", None)
    if backing is not None:
        if backing.data_ptr() == dst.data_ptr() and backing.dtype == dst.dtype \
                and backing.shape == dst.shape and dst.is_contiguous():
            return
        with torch.no_grad():
            dst.copy_(backing.reshape(dst.shape))
        return
    with torch.no_grad():
        dst.copy_(numpy_to_torch(d.numpy(), dst.dtype).reshape(dst.shape))
