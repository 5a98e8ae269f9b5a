"""Registry entries that select elements by value or position: adaptive max
pooling (values and the flat indices of the maxima), ``mode``,
``nonzero_static`` and grid sampling (``grid_sampler_2d/3d``).

Written like :mod:`aten_math` (NumPy code that is also nkipy kernel code).
Ties and NaNs follow PyTorch's CPU kernels: a pooling window's index is its
first maximum in row-major order, or its last NaN; ``mode`` emulates the
kernel's sort (dims of up to 16 elements).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkipy.core import ops

from .aten_math import _arg, _val
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register

_I64 = np.dtype(np.int64)


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


# ---- adaptive max pooling ----------------------------------------------------------------
#
# Separable: along the last spatial axis first, each window keeps its maximum and
# the flat index (within the spatial dims already reduced) of where it was; the
# next axis picks among those. Row-major first maximum (or last NaN) of the whole
# window is the first such row's first maximum (or the last NaN row's last NaN).

def _window_pick(v, idx, axis: int, start: int, stop: int):
    """The value and flat index chosen in v[start:stop] along ``axis``."""
    sl = [slice(None)] * len(_shape(v))
    sl[axis] = slice(start, stop)
    w = v[tuple(sl)]
    k = stop - start
    pos = np.reshape(ops.arange(0, k, 1, dtype=np.int64),
                     (k,) + (1,) * (len(_shape(v)) - axis - 1 if axis >= 0 else -axis - 1))
    nan = np.isnan(w)
    first_max = np.argmax(np.where(nan, -math.inf, w), axis=axis)
    last_nan = np.argmax(np.where(nan, pos, -1), axis=axis)
    anynan = np.any(nan, axis=axis)
    a = np.where(anynan, last_nan, first_max).astype(np.int64)
    ae = np.expand_dims(a, axis)
    val = np.take_along_axis(w, ae, axis=axis)
    where = None
    if idx is not None:
        where = np.take_along_axis(idx[tuple(sl)], ae, axis=axis)
    return val, ae + start, where


def _adaptive_max(x, output_size, nsp: int):
    shp = _shape(x)
    nd = len(shp)
    sizes = shp[nd - nsp:]
    strides = [int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(nsp)]
    v, idx = x, None
    for i in range(nsp - 1, -1, -1):
        axis = nd - nsp + i
        n, o = sizes[i], int(output_size[i])
        vals, idxs = [], []
        for j in range(o):
            s, e = (j * n) // o, -((-(j + 1) * n) // o)
            val, a, prev = _window_pick(v, idx, axis, s, e)
            flat = a * strides[i] + (prev if prev is not None else 0)
            vals.append(val)
            idxs.append(flat)
        v = np.concatenate(vals, axis=axis)
        idx = np.concatenate(idxs, axis=axis)
    return v, idx.astype(_I64)


def _adaptive_ok(nsp: int):
    def ok(node: Any) -> bool:
        v = _val(node.args[0])
        return v is not None and v.is_floating_point() and v.numel() > 0 and \
            v.dim() in (nsp + 1, nsp + 2)
    return ok


@reg("aten.adaptive_max_pool2d.default", supports=_adaptive_ok(2))
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max(x, output_size, 2)


@reg("aten.adaptive_max_pool3d.default", supports=_adaptive_ok(3))
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max(x, output_size, 3)


# ---- mode ------------------------------------------------------------------------------
#
# PyTorch's CPU kernel sorts (value, index) pairs by value with std::sort and takes
# the first longest run of equal values, reporting the index of the run's last pair.
# For up to 16 elements std::sort is an insertion sort, emulated here step by step
# (so ties and NaNs, which compare false both ways, land where they land there);
# longer dims stay on the CPU (introsort's order of equal values is not stable).

_MODE_MAX = 16


def _mode_ok(node: Any) -> bool:
    v = _val(node.args[0])
    if v is None or v.numel() == 0:
        return False
    d = _arg(node, 1, "dim", -1)
    n = v.shape[d] if v.dim() else 1
    return n <= _MODE_MAX


def _insertion_sort(a, idx):
    """libstdc++'s __insertion_sort of the pairs (a, idx) along the last axis by a's '<'."""
    n = _shape(a)[-1]
    k = ops.arange(0, n, 1, dtype=np.int64)
    for i in range(1, n):
        v, vi = a[..., i:i + 1], idx[..., i:i + 1]
        front = v < a[..., 0:1]
        # the unguarded linear insert stops below the last element v is not less than
        stop = np.max(np.where(v < a[..., :i], -1, k[:i]), axis=-1, keepdims=True)
        pos = np.where(front, 0, stop + 1)
        sa = np.concatenate([a[..., :1], a[..., :-1]], axis=-1)
        si = np.concatenate([idx[..., :1], idx[..., :-1]], axis=-1)
        mid = (k > pos) & (k <= i)
        a = np.where(k == pos, v, np.where(mid, sa, a))
        idx = np.where(k == pos, vi, np.where(mid, si, idx))
    return a, idx


@reg("aten.mode.default", supports=_mode_ok)
def mode(x, dim=-1, keepdim=False):
    nd = len(_shape(x))
    if nd == 0:
        return np.copy(x), ops.zeros((), _I64)
    ax = dim % nd
    xm = np.moveaxis(x, ax, -1)                                      # (..., n)
    n = _shape(xm)[-1]
    idx = np.broadcast_to(ops.arange(0, n, 1, dtype=np.int64), _shape(xm))
    a, ia = _insertion_sort(xm, idx)
    best = ops.zeros(_shape(xm)[:-1] + (1,), _I64)
    freq = best
    val, where = a[..., :1], ia[..., :1]
    for i in range(n):
        freq = freq + 1
        end = (a[..., i:i + 1] != a[..., i + 1:i + 2]) if i < n - 1 else None
        take = freq > best if end is None else end & (freq > best)
        val = np.where(take, a[..., i:i + 1], val)
        where = np.where(take, ia[..., i:i + 1], where)
        best = np.where(take, freq, best)
        if end is not None:
            freq = np.where(end, 0, freq)
    val = val.astype(x.dtype)
    if not keepdim:
        return val[..., 0], where[..., 0]
    return np.moveaxis(val, -1, ax), np.moveaxis(where, -1, ax)


# ---- nonzero_static --------------------------------------------------------------------

_NONZERO_MAX = 1 << 22


def _nonzero_static_ok(node: Any) -> bool:
    v = _val(node.args[0])
    size = _arg(node, 1, "size", None)
    return v is not None and isinstance(size, int) and size * max(v.numel(), 1) <= _NONZERO_MAX


@reg("aten.nonzero_static.default", supports=_nonzero_static_ok)
def nonzero_static(x, size, fill_value=-1):
    shp = _shape(x)
    nd = len(shp)
    total = int(np.prod(shp, dtype=np.int64))
    if size == 0 or total == 0:
        return ops.full((size, nd), fill_value, _I64)
    m = np.reshape(x != 0, (1, total)).astype(np.int64)
    rank = np.cumsum(m, axis=-1) - 1                                 # (1, total)
    slots = np.reshape(ops.arange(0, size, 1, dtype=np.int64), (size, 1))
    hit = (m == 1) & (rank == slots)                                 # (size, total)
    flat = np.sum(np.where(hit, ops.arange(0, total, 1, dtype=np.int64), 0), axis=-1)
    found = np.any(hit, axis=-1)
    cols = []
    for d in range(nd):
        stride = int(np.prod(shp[d + 1:], dtype=np.int64))
        cols.append(np.expand_dims((flat // stride) % shp[d], -1))
    out = np.concatenate(cols, axis=-1) if cols else ops.zeros((size, 0), _I64)
    return np.where(np.expand_dims(found, -1), out, fill_value).astype(_I64)


# ---- grid sampling -----------------------------------------------------------------------
#
# grid_sampler_2d/3d with bilinear (trilinear) or nearest interpolation and zeros or
# border padding, as PyTorch's CPU kernel: coordinates unnormalised in the input's
# dtype, corner weights as products of distances, out-of-range corners contributing
# nothing (zeros) or coordinates clipped first (border). Bicubic interpolation,
# reflection padding and half-precision tensors stay on the CPU.

def _grid_ok(nsp: int):
    def ok(node: Any) -> bool:
        x, g = _val(node.args[0]), _val(node.args[1])
        if x is None or g is None or not x.is_floating_point() or x.dim() != nsp + 2:
            return False
        # float32 / float64 only: PyTorch's half-precision kernel rounds differently
        return x.numel() > 0 and g.numel() > 0 and node.args[2] in (0, 1) and \
            node.args[3] in (0, 1) and x.dtype == g.dtype and x.element_size() >= 4
    return ok


def _grid_sample(x, grid, mode: int, padding: int, align_corners: bool):
    shp = _shape(x)
    nb, ch, sizes = shp[0], shp[1], shp[2:]
    nsp = len(sizes)
    out_sp = _shape(grid)[1:-1]
    q = int(np.prod(out_sp, dtype=np.int64))
    p = int(np.prod(sizes, dtype=np.int64))
    g = np.reshape(grid, (nb, q, nsp))
    coords = []                                    # per spatial dim (outermost first)
    for d in range(nsp):
        size = sizes[d]
        c = g[..., nsp - 1 - d]                    # grid's last dim is (x, y, z)
        if align_corners:
            c = (c + 1) / 2 * (size - 1)
        else:
            c = ((c + 1) * size - 1) / 2
        if padding == 1:
            c = np.clip(c, 0, size - 1)
        coords.append(c)
    flat_x = np.reshape(x, (nb, ch, p))

    def gather(idx_list):
        inb = None
        flat = None
        for d in range(nsp):
            i = idx_list[d]
            ok = (i >= 0) & (i <= sizes[d] - 1)
            inb = ok if inb is None else inb & ok
            ic = np.clip(i, 0, sizes[d] - 1).astype(np.int64)
            stride = int(np.prod(sizes[d + 1:], dtype=np.int64))
            flat = ic * stride if flat is None else flat + ic * stride
        idx = np.broadcast_to(np.expand_dims(flat, 1), (nb, ch, q))
        v = np.take_along_axis(flat_x, idx, axis=2)
        return np.where(np.expand_dims(inb, 1), v, 0)

    if mode == 1:                                  # nearest (round half to even)
        out = gather([np.round(c) for c in coords])
    else:
        lo = [np.floor(c) for c in coords]
        out = None
        for corner in range(1 << nsp):
            idx, w = [], None
            for d in range(nsp):
                hi = (corner >> (nsp - 1 - d)) & 1
                i = lo[d] + hi
                wd = (coords[d] - lo[d]) if hi else (lo[d] + 1 - coords[d])
                idx.append(i)
                w = wd if w is None else w * wd
            term = gather(idx) * np.expand_dims(w, 1)
            out = term if out is None else out + term
    return np.reshape(out, (nb, ch) + tuple(out_sp)).astype(x.dtype)


@reg("aten.grid_sampler_2d.default", supports=_grid_ok(2))
def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@reg("aten.grid_sampler_3d.default", supports=_grid_ok(3))
def grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)
