"""The spyre device's memory layout: tensors in 128-byte sticks.

Device memory holds a tensor as a row-major array of ``device_size`` elements
whose last dimension is one stick (64 float16 or 32 float32 values); device
dimension k walks host dimension ``dim_map[k]``, and the stick dimension of the
host tensor appears twice, as its tiles and, last, as the elements in a stick
(padded with zeros to whole sticks). The default tiling
(:meth:`SpyreTensorLayout.__init__` from a host size, computed by the device
library, ``spike_torch/csrc/stick_layout.cpp``) drops size-1 dimensions and puts
the last dimension in sticks: float16 ``[512, 256]`` is ``device_size
[4, 512, 64]``, ``dim_map [1, 0, 1]``.

:func:`untile` and :func:`tile` convert between the device array and the host
tensor with torch view, permute and pad ops: on CPU tensors for copies between
host and device, and traced into every eager kernel, which so reads and writes
the tiled bytes itself.
"""
from __future__ import annotations

import ctypes
import enum
import math
from typing import Any, List, Optional, Sequence, Tuple

import torch

from spike_torch import _C

STICK_BYTES = 128

#: c10::ScalarType numbers of the dtypes the device library takes
_SCALAR_TYPE = {torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
                torch.float16: 5, torch.float32: 6, torch.bool: 11, torch.bfloat16: 15}
_DTYPE_OF = {v: k for k, v in _SCALAR_TYPE.items()}


class DataFormats(enum.Enum):
    """The device's element formats (``str`` reads ``DataFormats.SEN169_FP16``)."""
    SEN169_FP16 = 0
    IEEE_FP32 = 1
    IEEE_INT32 = 2
    SENINT8 = 3
    SENINT16 = 4
    BFLOAT16 = 5
    SEN143_FP8 = 6
    SEN152_FP8 = 7
    INVALID = 8


#: the torch dtype of the elements of each format the device holds here
_FORMAT_DTYPE = {DataFormats.SEN169_FP16: torch.float16, DataFormats.IEEE_FP32: torch.float32,
                 DataFormats.IEEE_INT32: torch.int32, DataFormats.SENINT8: torch.int8,
                 DataFormats.SENINT16: torch.int16, DataFormats.BFLOAT16: torch.bfloat16}
_DTYPE_FORMAT = {v: k for k, v in _FORMAT_DTYPE.items()}


def device_dtype(dtype: torch.dtype) -> torch.dtype:
    """The torch dtype the device stores ``dtype`` as (int64 as int32, bool as
    float16, the others as themselves); TypeError for dtypes it does not hold."""
    code = _SCALAR_TYPE.get(dtype)
    if code is None:
        raise TypeError(f"the spyre device holds no {dtype} tensors: it holds float16, float32, "
                        "bfloat16, int8, int16, int32, int64 (as int32) and bool (as float16)")
    return _DTYPE_OF[_C.checked(_C.lib.spike_torch_stick_device_dtype, code)]


def get_device_dtype(dtype: torch.dtype) -> DataFormats:
    """The :class:`DataFormats` the device holds a host ``dtype`` in."""
    return _DTYPE_FORMAT[device_dtype(dtype)]


def get_elem_in_stick(dtype: torch.dtype) -> int:
    """Elements of host ``dtype`` in one 128-byte stick of device memory."""
    return STICK_BYTES // device_dtype(dtype).itemsize


def _ints(values: Any, what: str) -> List[int]:
    try:
        out = [int(v) for v in values]
    except TypeError:
        raise TypeError(f"SpyreTensorLayout: {what} must be a sequence of ints, got "
                        f"{type(values).__name__}") from None
    if any(isinstance(v, bool) for v in values):
        raise TypeError(f"SpyreTensorLayout: {what} must be ints, got {list(values)}")
    return out


class SpyreTensorLayout:
    """How a tensor lies in device memory: ``device_size``, ``dim_map`` and
    ``device_dtype`` (a :class:`DataFormats`).

    ``SpyreTensorLayout(host_size, dtype)`` is the default tiling of a host
    tensor (``dim_order``, a permutation of its dimensions, picks their order
    on the device and, last, the stick dimension);
    ``SpyreTensorLayout(device_size, dim_map, device_dtype)`` states one.
    """

    __slots__ = ("device_size", "dim_map", "device_dtype")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) + len(kwargs) >= 2 and isinstance(
                kwargs.get("dtype", args[1] if len(args) > 1 else None), torch.dtype):
            self._from_host(*args, **kwargs)
        else:
            self._from_device(*args, **kwargs)

    def _from_host(self, host_size: Sequence[int], dtype: torch.dtype,
                   dim_order: Optional[Sequence[int]] = None) -> None:
        size = _ints(host_size, "host_size")
        order = _ints(dim_order, "dim_order") if dim_order is not None else []
        device_size, dim_map, ddt = default_layout(size, dtype, order)
        self.device_size, self.dim_map = device_size, dim_map
        self.device_dtype = _DTYPE_FORMAT[ddt]

    def _from_device(self, device_size: Sequence[int], dim_map: Sequence[int],
                     device_dtype: DataFormats) -> None:
        if not isinstance(device_dtype, DataFormats) or device_dtype not in _FORMAT_DTYPE:
            raise TypeError(f"SpyreTensorLayout: device_dtype must be a DataFormats the device "
                            f"holds ({', '.join(str(f) for f in _FORMAT_DTYPE)}), got "
                            f"{device_dtype!r}")
        self.device_size = _ints(device_size, "device_size")
        self.dim_map = _ints(dim_map, "dim_map")
        self.device_dtype = device_dtype
        if len(self.device_size) != len(self.dim_map) or not self.device_size:
            raise ValueError(f"SpyreTensorLayout: device_size {self.device_size} and dim_map "
                             f"{self.dim_map} must be non-empty and of one length")
        if self.device_size[-1] != self.elems_per_stick():
            raise ValueError(f"SpyreTensorLayout: the last device dimension is one stick of "
                             f"{self.elems_per_stick()} elements, got {self.device_size}")
        if any(s < 0 for s in self.device_size):
            raise ValueError(f"SpyreTensorLayout: negative device_size {self.device_size}")

    def host_stick_dim(self) -> int:
        """The host dimension held in sticks (-1 for one element in one stick)."""
        return self.dim_map[-1]

    def elems_per_stick(self) -> int:
        """Elements of ``device_dtype`` in one stick."""
        return STICK_BYTES // _FORMAT_DTYPE[self.device_dtype].itemsize

    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of the device elements."""
        return _FORMAT_DTYPE[self.device_dtype]

    def nbytes(self) -> int:
        """Bytes of device memory the layout covers (128 per stick)."""
        return STICK_BYTES * math.prod(self.device_size[:-1])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpyreTensorLayout) and \
            (self.device_size, self.dim_map, self.device_dtype) == \
            (other.device_size, other.dim_map, other.device_dtype)

    def __hash__(self) -> int:
        return hash((tuple(self.device_size), tuple(self.dim_map), self.device_dtype))

    def __repr__(self) -> str:
        return (f"SpyreTensorLayout(device_size={self.device_size}, dim_map={self.dim_map}, "
                f"device_dtype={self.device_dtype})")

    __str__ = __repr__


def default_layout(host_size: Sequence[int], dtype: torch.dtype,
                   dim_order: Sequence[int] = ()) -> Tuple[List[int], List[int], torch.dtype]:
    """``(device_size, dim_map, device dtype)`` of the default tiling (the device
    library computes it: one rule for the allocator and for Python)."""
    device_dtype(dtype)   # TypeError for dtypes the device does not hold
    n = len(host_size)
    sizes = (ctypes.c_int64 * max(n, 1))(*host_size)
    order = (ctypes.c_int64 * max(len(dim_order), 1))(*dim_order)
    out = (ctypes.c_int64 * 32)()
    try:
        count = _C.checked(_C.lib.spike_torch_stick_default, sizes, n, _SCALAR_TYPE[dtype],
                           order, len(dim_order), out, 32)
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    return _decode_device(list(out[:count]))


def _decode_device(v: List[int]) -> Tuple[List[int], List[int], torch.dtype]:
    nh = v[0]
    nd = v[1 + nh]
    start = 2 + nh
    return v[start:start + nd], v[start + nd:start + 2 * nd], _DTYPE_OF[v[-1]]


def _encode(host_size: Sequence[int], layout: SpyreTensorLayout) -> List[int]:
    return [len(host_size), *host_size, len(layout.device_size), *layout.device_size,
            *layout.dim_map, _SCALAR_TYPE[layout.torch_dtype()]]


# ---- the layout a storage holds ----------------------------------------------------

def storage_layout(t: torch.Tensor) -> Optional[Tuple[List[int], SpyreTensorLayout]]:
    """``(host_size, layout)`` of the tensor ``t``'s storage holds (its base,
    for a view), or None when none is recorded (an empty storage)."""
    out = (ctypes.c_int64 * 40)()
    n = _C.lib.spike_torch_storage_layout(t.untyped_storage()._cdata, out, 40)
    if n <= 0:
        return None
    v = list(out[:n])
    host = v[1:1 + v[0]]
    device_size, dim_map, ddt = _decode_device(v)
    return host, SpyreTensorLayout(device_size, dim_map, _DTYPE_FORMAT[ddt])


def set_storage_layout(t: torch.Tensor, host_size: Sequence[int],
                       layout: SpyreTensorLayout) -> None:
    """Records that ``t``'s storage holds a host tensor of ``host_size`` in ``layout``."""
    check_fits(host_size, layout)
    v = _encode(host_size, layout)
    _C.checked(_C.lib.spike_torch_set_storage_layout, t.untyped_storage()._cdata,
               (ctypes.c_int64 * len(v))(*v), len(v))


def check_fits(host_size: Sequence[int], layout: SpyreTensorLayout) -> None:
    """ValueError unless ``layout`` can hold a host tensor of ``host_size``."""
    dm, ds = layout.dim_map, layout.device_size
    where = f"{layout} cannot hold a tensor of size {list(host_size)}"
    if dm == [-1]:
        if math.prod(host_size) != 1:
            raise ValueError(f"{where}: it holds one element")
        return
    stick = dm[-1]
    if not 0 <= stick < len(host_size) or dm.count(stick) != 2 or dm.index(stick) == len(dm) - 1:
        raise ValueError(f"{where}: its stick dimension appears as tiles and, last, elements")
    for d, size in enumerate(host_size):
        k = [i for i, m in enumerate(dm) if m == d]
        if d == stick:
            if ds[k[0]] * ds[-1] < size:
                raise ValueError(f"{where}: {ds[k[0]]} sticks hold fewer than {size} elements")
        elif not k:
            if size != 1:
                raise ValueError(f"{where}: dimension {d} of size {size} has no device dimension")
        elif len(k) != 1 or ds[k[0]] != size:
            raise ValueError(f"{where}: dimension {d}")
    if any(not -1 < m < len(host_size) for m in dm):
        raise ValueError(f"{where}: dim_map names dimensions the tensor lacks")


# ---- converting between host and device arrays (torch ops) ------------------------

def _plan(host_size: Sequence[int], layout: SpyreTensorLayout) -> Tuple[List[int], List[int], int]:
    """``(perm, shape, stick)``: the device array permuted by ``perm`` and
    reshaped to ``shape`` is the host tensor (size-1 dimensions dropped) with its
    stick dimension, at position ``stick``, padded to whole sticks."""
    dm, ds = layout.dim_map, layout.device_size
    s = dm[-1]
    perm: List[int] = []
    shape: List[int] = []
    pos = -1
    for d in range(len(host_size)):
        if d == s:
            first = dm.index(d)
            perm += [first, len(dm) - 1]
            pos = len(shape)
            shape.append(ds[first] * ds[-1])
        elif d in dm:
            perm.append(dm.index(d))
            shape.append(ds[dm.index(d)])
    return perm, shape, pos


def untile(raw: torch.Tensor, host_size: Sequence[int], layout: SpyreTensorLayout) -> torch.Tensor:
    """The host tensor (in the device dtype) a 1-D array of device elements holds."""
    n = math.prod(layout.device_size)
    dev = raw[:n].view(layout.device_size) if raw.numel() != n else raw.view(layout.device_size)
    if layout.dim_map == [-1]:
        return dev[:1].reshape(host_size)
    perm, shape, stick = _plan(host_size, layout)
    host = dev.permute(perm).reshape(shape)
    host = host.narrow(stick, 0, host_size[layout.dim_map[-1]])
    return host.reshape(host_size)


def tile(host: torch.Tensor, layout: SpyreTensorLayout) -> torch.Tensor:
    """The 1-D array of device elements holding ``host`` (already in the device
    dtype) in ``layout``, sticks padded with zeros."""
    n = math.prod(layout.device_size)
    if layout.dim_map == [-1]:
        flat = host.reshape(1)
        return torch.nn.functional.pad(flat, (0, n - 1)) if n > 1 else flat
    perm, shape, stick = _plan(list(host.shape), layout)
    x = host.reshape([shape[i] if i != stick else host.shape[layout.dim_map[-1]]
                      for i in range(len(shape))])
    pad = shape[stick] - x.shape[stick]
    if pad:
        spec = [0, 0] * (len(shape) - 1 - stick) + [0, pad]
        x = torch.nn.functional.pad(x, spec)
    # split the stick dimension into (tiles, elements), then order as the device
    elems = layout.device_size[-1]
    split = list(x.shape[:stick]) + [shape[stick] // elems, elems] + list(x.shape[stick + 1:])
    x = x.reshape(split)
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return x.permute(inverse).reshape(n)


def to_device_dtype(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the dtype the device stores it as (int64 wraps to int32)."""
    ddt = device_dtype(x.dtype)
    return x if ddt == x.dtype else x.to(ddt)


def from_device_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Device elements back in the host ``dtype``."""
    if x.dtype == dtype:
        return x
    if dtype == torch.bool:
        return x != 0
    return x.to(dtype)
