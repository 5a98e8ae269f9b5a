"""Affine index maps and buffers: how a value is indexed from a loop's
iteration space (views fold into these maps, never copy), and the
materialised buffers and strided accesses the emitted C reads and writes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nkipy.core.ir import Node


VIEW_OPS = frozenset({"reshape", "transpose", "slice", "broadcast_to"})


# ---- affine index maps ------------------------------------------------------

@dataclass(frozen=True)
class Dim:
    """One dimension of a value indexed from an iteration space: the value's
    index along it is ``start + step * i[src]`` (``src`` None: just start)."""

    src: int | None
    start: int = 0
    step: int = 1


def identity_map(ndim: int) -> tuple[Dim, ...]:
    return tuple(Dim(d) for d in range(ndim))


def broadcast_map(value_shape: tuple[int, ...], iter_ndim: int) -> tuple[Dim, ...]:
    """Map for an operand of shape value_shape read in an iteration space of
    rank iter_ndim with NumPy broadcasting (aligned right; size-1 dims fixed)."""
    lead = iter_ndim - len(value_shape)
    return tuple(Dim(None) if s == 1 else Dim(lead + d) for d, s in enumerate(value_shape))


def compose(inner: tuple[Dim, ...], outer: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """inner maps the view's dims onto the base; outer maps the iteration space
    onto the view. Returns the map from the iteration space onto the base."""
    result = []
    for d in inner:
        if d.src is None:
            result.append(Dim(None, d.start, 1))
            continue
        o = outer[d.src]
        if o.src is None:
            result.append(Dim(None, d.start + d.step * o.start, 1))
        else:
            result.append(Dim(o.src, d.start + d.step * o.start, d.step * o.step))
    return tuple(result)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def reshape_strides(old_shape: tuple[int, ...], old_strides: tuple[int, ...],
                    new_shape: tuple[int, ...]) -> list[int] | None:
    """Strides of a reshape of a strided array without copying, or None when it
    needs a copy (NumPy's _attempt_nocopy_reshape, C order)."""
    if 0 in old_shape or 0 in new_shape:
        return None
    old = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
    new = list(new_shape)
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                if nj >= len(new):
                    return None
                np_ *= new[nj]
                nj += 1
            else:
                if oj >= len(old):
                    return None
                op *= old[oj][0]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for nk in range(nj - 1, ni, -1):
            out[nk - 1] = out[nk] * new[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    if oi < len(old) or any(s != 1 for s in new[ni:]):
        return None
    return out


def view_map(node: Node) -> tuple[Dim, ...] | None:
    """Map from the view's index space onto its operand, or None when the
    view is not affine per dimension (a general reshape)."""
    src, out = node.inputs[0], node.output
    if node.op == "transpose":
        perm = node.attrs["perm"]
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return tuple(Dim(inv[d]) for d in range(src.ndim))
    if node.op == "slice":
        return tuple(Dim(d, int(st), int(sp)) for d, (st, sp) in
                     enumerate(zip(node.attrs["starts"], node.attrs["steps"])))
    if node.op == "broadcast_to":
        return broadcast_map(src.shape, out.ndim)
    if node.op == "reshape":
        a = [s for s in src.shape if s != 1]
        b = [s for s in out.shape if s != 1]
        if a != b:
            return None
        dims, j = [], 0
        out_non1 = [d for d, s in enumerate(out.shape) if s != 1]
        for s in src.shape:
            if s == 1:
                dims.append(Dim(None))
            else:
                dims.append(Dim(out_non1[j]))
                j += 1
        return tuple(dims)
    raise AssertionError(node.op)


# ---- buffers and accesses ---------------------------------------------------

@dataclass(eq=False)
class Buffer:
    """Materialised storage: contiguous, row-major, of a value's shape."""

    name: str          # C identifier of the typed pointer
    dtype: np.dtype
    shape: tuple[int, ...]
    kind: str          # "in", "out", "scratch", "const"
    index: int = 0     # in/out position
    offset: int = 0    # scratch byte offset
    nbytes: int = 0
    data: np.ndarray | None = None
    stride_override: tuple[int, ...] | None = None
    base: int = 0      # element offset of index 0 (a strided view of another buffer)

    @property
    def strides(self) -> tuple[int, ...]:
        if self.stride_override is not None:
            return self.stride_override
        return contiguous_strides(self.shape)


@dataclass
class Access:
    """A read of a buffer from an iteration space: element offset + strides."""

    buffer: Buffer
    offset: int
    strides: tuple[int, ...]


def access_of(buffer: Buffer, dmap: tuple[Dim, ...], iter_ndim: int) -> Access:
    strides = [0] * iter_ndim
    offset = buffer.base
    for bstride, d in zip(buffer.strides, dmap):
        offset += bstride * d.start
        if d.src is not None:
            strides[d.src] += bstride * d.step
    return Access(buffer, offset, tuple(strides))
