"""SpikeTensor: a device tensor with a shape and a dtype, and NumPy I/O."""
from __future__ import annotations

import logging
import math
import operator
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ._dtypes import dtype_name, to_numpy_dtype
from ._spike import NrtTensor, ensure_usable
from .spike_singleton import get_spike_singleton

__all__ = ["SpikeTensor"]

logger = logging.getLogger(__name__)


def _contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` itself if C-contiguous, else a C-contiguous copy (shape kept, 0-d too)."""
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _as_shape(shape: Sequence[int]) -> Tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints; a non-integer extent (4.5, "4")
    or a negative one is refused, never truncated."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a sequence of integers, got {shape!r}") from None
    out = []
    for d in dims:
        try:
            out.append(operator.index(d))
        except TypeError:
            raise TypeError(f"shape entries must be integers, got {d!r} in {dims}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"shape must not have negative extents, got {tuple(out)}")
    return tuple(out)


def _as_bytes_view(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (exports any dtype as bytes)."""
    return array.reshape(-1).view(np.uint8)


class SpikeTensor:
    """A typed, shaped view of one device tensor (an :class:`NrtTensor`).

    Attributes:
        tensor_ref: the underlying NrtTensor.
        shape: tuple of extents.
        dtype: NumPy dtype of the elements.
        name: tensor name.

    The device memory is freed when the last reference to ``tensor_ref`` goes.
    """

    def __init__(
        self,
        tensor_ref: NrtTensor,
        shape: Sequence[int],
        dtype: Any,
        name: Optional[str] = None,
    ) -> None:
        """Wraps ``tensor_ref``; its byte size must equal prod(shape) * itemsize."""
        if not isinstance(tensor_ref, NrtTensor):
            raise TypeError(f"tensor_ref must be an NrtTensor, got {type(tensor_ref).__name__}")
        shape = _as_shape(shape)
        dtype = to_numpy_dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes != tensor_ref.size:
            raise ValueError(
                f"shape {shape} of {dtype_name(dtype)} needs {nbytes} bytes but tensor "
                f"'{tensor_ref.name}' has {tensor_ref.size} bytes"
            )
        self.tensor_ref = tensor_ref
        # The runtime this tensor belongs to: after spike.reset() it is closed
        # and every use raises SpikeError (no new runtime is brought up).
        self._spike = get_spike_singleton()
        self.shape: Tuple[int, ...] = shape
        self.dtype: np.dtype = dtype
        self.name: str = name if name is not None else tensor_ref.name

    @classmethod
    def _unchecked(cls, tensor_ref: NrtTensor, shape: Tuple[int, ...], dtype: np.dtype,
                   name: str, spike: Any) -> "SpikeTensor":
        """Wraps ``tensor_ref`` without the constructor's checks, for callers that
        derived shape, dtype and size from the same tensor (hot paths)."""
        self = cls.__new__(cls)
        self.tensor_ref = tensor_ref
        self._spike = spike
        self.shape = shape
        self.dtype = dtype
        self.name = name
        return self

    @classmethod
    def from_numpy(
        cls, array: np.ndarray, name: Optional[str] = None, core_id: int = 0
    ) -> "SpikeTensor":
        """Allocates a device tensor on ``core_id`` and copies ``array`` into it.

        Non-contiguous arrays are made contiguous first; the dtype is kept.
        """
        array = np.asarray(array)
        dtype_name(array.dtype)  # refuses unsupported dtypes with a clear message
        array = _contiguous(array)
        spike = get_spike_singleton()
        ref = spike.allocate_tensor(array.nbytes, core_id=core_id, name=name)
        spike.tensor_write_from_pybuffer(ref, _as_bytes_view(array))
        logger.debug("from_numpy: %s %s -> %r", array.shape, array.dtype, ref)
        return cls(ref, array.shape, array.dtype, name)

    @classmethod
    def empty(
        cls, shape: Sequence[int], dtype: Any, name: Optional[str] = None, core_id: int = 0
    ) -> "SpikeTensor":
        """Allocates an uninitialised device tensor of ``shape`` and ``dtype``."""
        shape = _as_shape(shape)
        dtype = to_numpy_dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes >= 1 << 63:
            raise ValueError(f"SpikeTensor.empty: a {dtype.name} tensor of shape {shape} needs "
                             f"{nbytes} bytes, more than any device can address (2**63 - 1)")
        ref = get_spike_singleton().allocate_tensor(nbytes, core_id=core_id, name=name)
        return cls(ref, shape, dtype, name)

    def numpy(self) -> np.ndarray:
        """Copies the device contents into a new NumPy array."""
        ensure_usable(self.tensor_ref)
        out = np.empty(self.shape, dtype=self.dtype)
        self._spike.tensor_read_to_pybuffer(self.tensor_ref, _as_bytes_view(out))
        return out

    def write_from_numpy(self, array: np.ndarray, only_changes: bool = False) -> None:
        """Overwrites the device contents with ``array`` (same dtype and size; no realloc).

        ``only_changes=True`` compares first and writes only the 16 KiB blocks
        that differ: for inputs written again on every call that seldom change
        (weights), which then keep their packed GEMM copies (docs/gemm.md)."""
        ensure_usable(self.tensor_ref)
        array = np.asarray(array)
        if array.dtype != self.dtype:
            raise ValueError(
                f"dtype mismatch writing to tensor '{self.name}': expected "
                f"{self.dtype.name}, got {array.dtype.name}"
            )
        if array.size != self.size:
            raise ValueError(
                f"size mismatch writing to tensor '{self.name}': expected {self.size} "
                f"elements (shape {self.shape}), got {array.size} (shape {array.shape})"
            )
        array = _contiguous(array)
        self._spike.tensor_write_from_pybuffer(self.tensor_ref, _as_bytes_view(array),
                                               only_changes=only_changes)

    def free(self) -> None:
        """Frees the device memory now; later use raises SpikeError."""
        ensure_usable(self.tensor_ref)
        self._spike.free_tensor(self.tensor_ref)

    @property
    def core_id(self) -> int:
        """Logical core holding the tensor."""
        return self.tensor_ref.core_id

    @property
    def size(self) -> int:
        """Number of elements (as NumPy's ``ndarray.size``)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.tensor_ref.size

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __repr__(self) -> str:
        return (
            f"SpikeTensor(name={self.name!r}, shape={self.shape}, "
            f"dtype={dtype_name(self.dtype)}, core_id={self.core_id})"
        )
