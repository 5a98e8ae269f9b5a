"""Padding along one dimension, done by the device, and its metadata.

A tensor of actual size ``n`` along dimension ``dim`` runs in a kernel compiled
for a bucket ``B >= n``. Seen as ``(outer, n * inner)`` bytes it becomes
``(outer, B * inner)``: one pitched (2-D) copy moves the real rows and one
pitched memset zeroes the tail of every row, whatever the position of ``dim``.
Unpadding is the reverse pitched copy. All of it runs in the runtime (C): no
padded copy is ever built on the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

_ATTR = "_spiky_padding"


@dataclass(frozen=True)
class PaddingMetadata:
    """How a padded tensor relates to its real data: ``original_size`` of the
    ``padded_size`` entries along ``pad_dim`` are real (the rest is padding);
    ``arg_indices`` names the graph inputs or outputs it belongs to."""

    original_size: int
    padded_size: int
    pad_dim: int
    arg_indices: Tuple[int, ...] = ()


def attach_metadata(tensor: Any, meta: PaddingMetadata) -> Any:
    """Marks ``tensor`` as padded (returns it). ``input_layout="padded"`` reads this."""
    if not isinstance(meta, PaddingMetadata):
        raise TypeError(f"expected PaddingMetadata, got {type(meta).__name__}")
    setattr(tensor, _ATTR, meta)
    return tensor


def get_metadata(tensor: Any) -> Optional[PaddingMetadata]:
    """The padding metadata of a tensor, or None for an unpadded one."""
    return getattr(tensor, _ATTR, None)


@dataclass(frozen=True)
class PadGeometry:
    """Byte geometry of padding ``shape`` from ``actual`` to ``padded`` entries along
    ``dim`` (``shape[dim] == actual``)."""

    rows: int          # product of the dimensions before dim
    real_bytes: int    # bytes of real data per row
    padded_bytes: int  # bytes per padded row

    @staticmethod
    def of(shape: Sequence[int], dim: int, padded: int, itemsize: int) -> "PadGeometry":
        inner = math.prod(shape[dim + 1:]) * itemsize
        return PadGeometry(math.prod(shape[:dim]), shape[dim] * inner, padded * inner)


def write_padded(rt: Any, dst: Any, dst_offset: int, src: Any, geo: PadGeometry) -> None:
    """Host buffer ``src`` (real data, C-contiguous) into device tensor ``dst``
    laid out padded, tail of each row zeroed."""
    if geo.rows == 0:
        return
    if geo.real_bytes:
        rt.tensor_write_2d(dst, src, dst_offset, geo.padded_bytes, geo.real_bytes, geo.rows)
    tail = geo.padded_bytes - geo.real_bytes
    if tail:
        rt.tensor_memset_2d(dst, 0, dst_offset + geo.real_bytes, geo.padded_bytes, tail, geo.rows)


def copy_padded(rt: Any, src: Any, src_offset: int, dst: Any, dst_offset: int,
                geo: PadGeometry) -> None:
    """Device tensor ``src`` (real data, contiguous) into ``dst`` laid out padded."""
    if geo.rows == 0:
        return
    if geo.real_bytes:
        rt.tensor_copy_2d(src, src_offset, geo.real_bytes, dst, dst_offset, geo.padded_bytes,
                          geo.real_bytes, geo.rows)
    tail = geo.padded_bytes - geo.real_bytes
    if tail:
        rt.tensor_memset_2d(dst, 0, dst_offset + geo.real_bytes, geo.padded_bytes, tail, geo.rows)


def pad_on_host(arr: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``arr`` zero-padded at the end of each dimension to ``shape``, on the host
    (the ``pad_on_device=False`` path)."""
    out = np.zeros(shape, arr.dtype)
    out[tuple(slice(0, n) for n in arr.shape)] = arr
    return out


def read_unpadded(rt: Any, src: Any, src_offset: int, dst: Any, geo: PadGeometry) -> None:
    """The real rows of padded device tensor ``src`` into host buffer ``dst``."""
    if geo.rows and geo.real_bytes:
        rt.tensor_read_2d(src, dst, src_offset, geo.padded_bytes, geo.real_bytes, geo.rows)


def copy_unpadded(rt: Any, src: Any, src_offset: int, dst: Any, dst_offset: int,
                  geo: PadGeometry) -> None:
    """The real rows of padded device tensor ``src`` into device tensor ``dst``."""
    if geo.rows and geo.real_bytes:
        rt.tensor_copy_2d(src, src_offset, geo.padded_bytes, dst, dst_offset, geo.real_bytes,
                          geo.real_bytes, geo.rows)
