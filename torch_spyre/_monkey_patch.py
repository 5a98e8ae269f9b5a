"""What torch-spyre adds to torch's own API: ``Tensor.device_tensor_layout()``,
``Tensor.to(..., device_layout=)`` and ``torch.empty(..., device_layout=)``;
and how spyre tensors are copied and pickled (``copy.deepcopy``, ``pickle``,
``torch.save``): as tensors, through their CPU copy, never as tiled bytes."""
from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from . import _C
from .constants import DEVICE_NAME


def _device_tensor_layout(self: torch.Tensor) -> Optional[_C.SpyreTensorLayout]:
    """The layout of the device memory behind a spyre tensor; None for other devices."""
    if self.device.type != DEVICE_NAME:
        return None
    return _C.get_spyre_tensor_layout(self)


def _wrap_to(to: Any) -> Any:
    @functools.wraps(to)
    def wrapped(self: torch.Tensor, *args: Any, device_layout: Any = None, **kwargs: Any) -> Any:
        if device_layout is None:
            return to(self, *args, **kwargs)
        moved = to(self, *args, **kwargs)      # dtype, device as asked
        if moved.device.type != DEVICE_NAME:
            raise ValueError(f"Tensor.to(device_layout=...) needs a {DEVICE_NAME} destination, "
                             f"got {moved.device}")
        if _C.get_spyre_tensor_layout(moved) == device_layout and moved is not self:
            return moved
        return _C.to_with_layout(moved, device_layout)

    wrapped.__spyre_wrapped__ = True
    return wrapped


def _wrap_empty(empty: Any) -> Any:
    @functools.wraps(empty)
    def wrapped(*size: Any, device_layout: Any = None, **kwargs: Any) -> Any:
        if device_layout is None:
            return empty(*size, **kwargs)
        if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
            size = tuple(size[0])
        if "size" in kwargs:
            size = tuple(kwargs.pop("size"))
        device = torch.device(kwargs.pop("device", DEVICE_NAME))
        if device.type != DEVICE_NAME:
            raise ValueError(f"torch.empty(device_layout=...) needs device='{DEVICE_NAME}', "
                             f"got {device}")
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"torch.empty(device_layout=...) does not take "
                            f"{', '.join(sorted(kwargs))}")
        return _C.empty_with_layout(list(size), device_layout, dtype, device)

    wrapped.__spyre_wrapped__ = True
    return wrapped


def _rebuild_from_host(host: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """Unpickling a spyre tensor: its CPU copy back on the device."""
    t = host.to(DEVICE_NAME)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _wrap_reduce_ex(reduce_ex: Any) -> Any:
    @functools.wraps(reduce_ex)
    def wrapped(self: torch.Tensor, proto: Any) -> Any:
        # tiled device bytes mean nothing elsewhere: a spyre tensor pickles (and
        # torch.save saves it) as its CPU copy, put back on the device on load
        if type(self) is torch.Tensor and self.device.type == DEVICE_NAME:
            return (_rebuild_from_host, (self.detach().cpu(), self.requires_grad))
        return reduce_ex(self, proto)

    wrapped.__spyre_wrapped__ = True
    return wrapped


def _wrap_deepcopy(deepcopy: Any) -> Any:
    @functools.wraps(deepcopy)
    def wrapped(self: torch.Tensor, memo: Any) -> Any:
        if type(self) is not torch.Tensor or self.device.type != DEVICE_NAME:
            return deepcopy(self, memo)
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
        new.requires_grad_(self.requires_grad)
        if self.grad is not None:
            new.grad = self.grad.clone()
        memo[id(self)] = new
        return new

    wrapped.__spyre_wrapped__ = True
    return wrapped


def install() -> None:
    """Adds the methods and keywords (once)."""
    torch.Tensor.device_tensor_layout = _device_tensor_layout
    if not getattr(torch.Tensor.__reduce_ex__, "__spyre_wrapped__", False):
        torch.Tensor.__reduce_ex__ = _wrap_reduce_ex(torch.Tensor.__reduce_ex__)
    if not getattr(torch.Tensor.__deepcopy__, "__spyre_wrapped__", False):
        torch.Tensor.__deepcopy__ = _wrap_deepcopy(torch.Tensor.__deepcopy__)
    if not getattr(torch.Tensor.to, "__spyre_wrapped__", False):
        torch.Tensor.to = _wrap_to(torch.Tensor.to)
    if not getattr(torch.empty, "__spyre_wrapped__", False):
        torch.empty = _wrap_empty(torch.empty)
