"""``torch_spyre._C``: the device's layout types and switches, by the names
torch-spyre's C++ module gives them (here they are Python over the device
library; see :mod:`torch_spyre._layout`)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from spike_torch import _C as _lib

from . import _io
from ._layout import (DataFormats, SpyreTensorLayout, get_device_dtype,  # noqa: F401
                      get_elem_in_stick)
from .constants import DEVICE_NAME

__all__ = ["DataFormats", "SpyreTensorLayout", "get_device_dtype", "get_elem_in_stick",
           "get_spyre_tensor_layout", "empty_with_layout", "to_with_layout",
           "get_downcast_warning", "set_downcast_warning", "start_runtime"]


def get_downcast_warning() -> bool:
    """Whether creating an int64 tensor on the device warns that it is held as int32."""
    return bool(_lib.lib.spike_torch_downcast_warning(-1))


def set_downcast_warning(enabled: bool) -> None:
    """Turns the int64 downcast warning on or off (``TORCH_SPYRE_DOWNCAST_WARN``
    sets it at import)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_downcast_warning: expected a bool, got {type(enabled).__name__}")
    _lib.lib.spike_torch_downcast_warning(int(enabled))


def start_runtime() -> None:
    """Starts the device's runtime (``import torch_spyre`` already did)."""
    import spike

    spike.get_spike_singleton()


def _check_device_tensor(t: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor) or t.device.type != DEVICE_NAME:
        where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{what}: expected a tensor on the {DEVICE_NAME} device, got {where}")


def get_spyre_tensor_layout(t: torch.Tensor) -> SpyreTensorLayout:
    """The layout of the device memory behind ``t`` (its storage's, for a view)."""
    _check_device_tensor(t, "get_spyre_tensor_layout")
    return _io.layout_of(t)[1]


def empty_with_layout(size: Sequence[int], layout: SpyreTensorLayout,
                      dtype: Optional[torch.dtype] = None,
                      device: Optional[torch.device] = None) -> torch.Tensor:
    """An uninitialised device tensor of ``size`` held in ``layout``."""
    from . import _layout

    dtype = dtype or torch.get_default_dtype()
    size = [int(s) for s in size]
    if not isinstance(layout, SpyreTensorLayout):
        raise TypeError(f"device_layout must be a SpyreTensorLayout, got {type(layout).__name__}")
    if _layout.device_dtype(dtype) != layout.torch_dtype():
        raise ValueError(f"a {dtype} tensor is held as {_layout.get_device_dtype(dtype)}, not "
                         f"{layout.device_dtype}")
    _layout.check_fits(size, layout)
    device = torch.device(device or DEVICE_NAME)
    nbytes = max(layout.nbytes(), math.prod(size) * dtype.itemsize)
    t = torch.empty(0, dtype=dtype, device=device)
    if math.prod(size) == 0:
        return t.resize_(size)
    storage = torch.UntypedStorage(nbytes, device=device)
    stride = torch.empty(size, dtype=dtype, device="meta").stride()
    t.set_(storage, 0, size, stride)
    _layout.set_storage_layout(t, size, layout)
    return t


def to_with_layout(t: torch.Tensor, layout: SpyreTensorLayout) -> torch.Tensor:
    """A device copy of ``t`` (any device) held in ``layout``."""
    out = empty_with_layout(list(t.shape), layout, t.dtype)
    out.copy_(t)
    return out
