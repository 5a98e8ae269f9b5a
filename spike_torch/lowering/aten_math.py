"""More registry entries: elementwise special functions, scans, sorting,
diagonals, strided views and distances.

Written like :mod:`aten_numpy` (NumPy code that is also nkipy kernel code;
generated sources reach these functions as ``aten.<name>`` through
:func:`aten_numpy.attr_of`). Half-precision operands are computed in float32
and rounded once by the cast the generator puts around every node; float64
and int64 stay exact. An entry that cannot handle some arguments of a node
says so in its ``supports`` predicate: the node then runs in a CPU partition
instead of failing to compile.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkipy.core import ops

from .aten_numpy import _half, _in_range, _index, _val, cast
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


def _fl(x: Any) -> Any:
    """``x`` in the dtype float math runs in: float64 stays, everything else
    (half precision, integers, bools) becomes float32."""
    if not hasattr(x, "dtype"):
        return x
    if np.dtype(x.dtype) in (np.dtype(np.float32), np.dtype(np.float64)):
        return x
    return x.astype(np.float32)


def _kind(x: Any) -> str:
    """NumPy's kind letter of ``x``'s dtype, "f" also for bfloat16 (ml_dtypes' "V")."""
    d = np.dtype(x.dtype)
    return "f" if d.kind == "V" and d.itemsize == 2 else d.kind


def _arg(node: Any, i: int, name: str, default: Any = None) -> Any:
    """Argument ``i`` (or keyword ``name``) of an FX node."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _dim_of(node: Any, i: int = 0) -> int:
    v = _val(node.args[i]) if len(node.args) > i else None
    return v.dim() if v is not None else -1


# ---- elementwise special functions ------------------------------------------------

@reg("aten.asinh.default")
def asinh(x):
    return np.arcsinh(_fl(x))


@reg("aten.acosh.default")
def acosh(x):
    return np.arccosh(_fl(x))


@reg("aten.atanh.default")
def atanh(x):
    return np.arctanh(_fl(x))


@reg("aten.erfc.default")
def erfc(x):
    return ops.erfc(_fl(x))


@reg("aten.lgamma.default")
def lgamma(x):
    return ops.lgamma(_fl(x))


@reg("aten.erfinv.default")
def erfinv(x):
    """Inverse error function: a rational first guess refined by two Newton
    steps on erf (float32-accurate); +-inf at +-1, NaN outside [-1, 1]."""
    x = _fl(x)
    w = -np.log((1.0 - x) * (1.0 + x))
    # Giles' single-precision approximation, central and tail branches
    wc = w - 2.5
    pc = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        pc = pc * wc + c
    wt = np.sqrt(np.maximum(w, 5.0)) - 3.0
    pt = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        pt = pt * wt + c
    y = np.where(w < 5.0, pc, pt) * x
    # the Newton steps in float64: near |x| = 1, erf(y) - x cancels in float32
    out_dtype = np.dtype(x.dtype) if hasattr(x, "dtype") else np.dtype(np.float32)
    f64 = np.dtype(np.float64)
    x64, y = cast(x, f64), cast(y, f64)
    for _ in range(2):
        err = ops.erf(y) - x64
        y = y - err / (1.1283791670955126 * np.exp(-y * y))
    a = np.abs(x64)
    y = np.where(a == 1.0, x64 * math.inf, y)
    return cast(np.where(a > 1.0, math.nan, y), out_dtype)


@reg("aten.digamma.default")
def digamma(x):
    """psi(x): reflection for x < 0.5, recurrence up to x >= 10, then the
    asymptotic series through x**-12 (truncation below 1e-15 there; stopping
    at x >= 6 and x**-10 left float64 off by 1.5e-12); -inf at +0, +inf at -0
    and NaN at the negative integers, as torch. Computed in float64 and rounded once: in
    float32 the reflection's pi / tan(pi x) loses ~1e-5 relative near the
    poles."""
    out_dtype = np.dtype(_fl(x).dtype) if hasattr(x, "dtype") else np.dtype(np.float32)
    x = cast(x, np.dtype(np.float64))
    refl = x < 0.5
    xr = np.where(refl, 1.0 - x, x)
    acc = np.zeros_like(xr)
    for _ in range(10):
        small = xr < 10.0
        acc = acc - np.where(small, 1.0 / xr, 0.0)
        xr = np.where(small, xr + 1.0, xr)
    inv = 1.0 / xr
    inv2 = inv * inv
    series = np.log(xr) - 0.5 * inv - inv2 * (1.0 / 12 - inv2 * (1.0 / 120 - inv2 * (
        1.0 / 252 - inv2 * (1.0 / 240 - inv2 * (1.0 / 132 - inv2 * (691.0 / 32760))))))
    r = acc + series
    # psi(1 - x) - psi(x) = pi / tan(pi x)
    r = np.where(refl, r - math.pi / np.tan(math.pi * x), r)
    pole = (x <= 0) & (x == np.floor(x))
    r = np.where(pole, math.nan, r)
    zero = np.where(np.signbit(x), math.inf, -math.inf)
    return cast(np.where(x == 0, zero, r), out_dtype)


def _not_f64(node: Any) -> bool:
    """Whether the node's (last) tensor argument is not float64: the Bessel
    entries' Abramowitz-Stegun polynomials (here and in aten_special: J/Y, Airy)
    are accurate to ~1e-7 relative, fine for float32 but not float64 (i0 of
    float64 was off by 9e-7, j1 by 3e-8, airy_ai by 1e-6), so float64 runs on
    the CPU."""
    import torch

    v = _val(node.args[-1])
    return v is not None and v.dtype != torch.float64


@reg("aten.i0.default", supports=_not_f64)
def i0(x):
    """Modified Bessel function of order 0 (Abramowitz and Stegun 9.8.1-2)."""
    x = _fl(x)
    a = np.abs(x)
    t = a / 3.75
    t2 = t * t
    small = 1.0 + t2 * (3.5156229 + t2 * (3.0899424 + t2 * (1.2067492 + t2 * (
        0.2659732 + t2 * (0.0360768 + t2 * 0.0045813)))))
    u = 3.75 / np.maximum(a, 3.75)
    big = (0.39894228 + u * (0.01328592 + u * (0.00225319 + u * (-0.00157565 + u * (
        0.00916281 + u * (-0.02057706 + u * (0.02635537 + u * (-0.01647633 + u * 0.00392377))))))))
    big = big * np.exp(a) / np.sqrt(np.maximum(a, 3.75))
    return np.where(a < 3.75, small, big)


@reg("aten.fmin.default")
def fmin(x, y):
    return np.fmin(x, y)


@reg("aten.fmax.default")
def fmax(x, y):
    return np.fmax(x, y)


@reg("aten.ldexp.Tensor")
def ldexp(x, other):
    return _fl(x) * np.power(2.0, _fl(other))


# ---- scans -------------------------------------------------------------------

def _shifted(x: Any, s: int, axis: int, fill: Any) -> Any:
    """``x`` moved ``s`` places up ``axis``, the first ``s`` places ``fill``."""
    n = _shape(x)[axis]
    head = [slice(None)] * x.ndim
    head[axis] = slice(0, n - s)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (s, 0)
    return np.pad(x[tuple(head)], pad, constant_values=fill)


def _scan_max(x: Any, dim: int, largest: bool):
    """Running max (min) along ``dim`` and the index where it was last
    attained (NaN counts as the largest), by log2(n) doubling steps."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0:
        return x, ops.zeros((), np.dtype(np.int64))
    n = _shape(x)[dim]
    shape = [1] * x.ndim
    shape[dim] = n
    idx = np.broadcast_to(np.reshape(ops.arange(0, n, 1, dtype=np.int64), tuple(shape)), _shape(x))
    kind = _kind(x)
    fill = (-math.inf if largest else math.inf) if kind == "f" else (
        np.iinfo(x.dtype).min if largest else np.iinfo(x.dtype).max) if kind in "iu" \
        else (not largest)
    s = 1
    while s < n:
        pv, pi = _shifted(x, s, dim, fill), _shifted(idx, s, dim, -1)
        keep = (x >= pv) if largest else (x <= pv)
        if kind == "f":
            keep = (keep | np.isnan(x)) & ~(np.isnan(pv) & ~np.isnan(x))
        x, idx = np.where(keep, x, pv), np.where(keep, idx, pi)
        s *= 2
    return x, idx


@reg("aten.cummax.default")
def cummax(x, dim):
    return _scan_max(x, dim, True)


@reg("aten.cummin.default")
def cummin(x, dim):
    return _scan_max(x, dim, False)


@reg("aten.logcumsumexp.default")
def logcumsumexp(x, dim):
    x = _fl(x)
    if x.ndim == 0:
        return x
    dim = dim % x.ndim
    n, s = _shape(x)[dim], 1
    while s < n:
        x = np.logaddexp(x, _shifted(x, s, dim, -math.inf))
        s *= 2
    return x


# ---- sorting and order statistics ---------------------------------------------

def _sortable(node: Any) -> bool:
    v = _val(node.args[0])
    return v is not None and v.dim() >= 1 and v.dtype != _bool_dtype()


def _bool_dtype():
    import torch

    return torch.bool


def _sort(x, dim, descending):
    if x.ndim == 0:
        return x, ops.zeros((), np.dtype(np.int64))
    dim = dim % x.ndim
    vals, idx = ops.topk(x, _shape(x)[dim], axis=dim, is_ascend=not descending)
    return vals, idx.astype(np.int64)


@reg("aten.sort.default")
def sort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@reg("aten.sort.stable")
def sort_stable(x, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@reg("aten.kthvalue.default", supports=_sortable)
def kthvalue(x, k, dim=-1, keepdim=False):
    dim = dim % x.ndim
    vals, idx = ops.topk(x, k, axis=dim, is_ascend=True)
    sel = [slice(None)] * x.ndim
    sel[dim] = slice(k - 1, k)
    v, i = vals[tuple(sel)], idx[tuple(sel)].astype(np.int64)
    if not keepdim:
        v, i = np.squeeze(v, axis=dim), np.squeeze(i, axis=dim)
    return v, i


def _median(x, dim, keepdim, ignore_nan):
    n = _shape(x)[dim]
    vals, idx = ops.topk(x, n, axis=dim, is_ascend=True)
    if ignore_nan and _kind(x) == "f":
        cnt = np.sum(~np.isnan(x), axis=dim, keepdims=True)
        k = np.maximum((cnt - 1) // 2, 0)
    else:
        k = ops.full(_shape(x)[:dim] + (1,) + _shape(x)[dim + 1:], (n - 1) // 2, np.dtype(np.int64))
        if _kind(x) == "f":      # a NaN anywhere is the median (it sorts last)
            k = np.where(np.any(np.isnan(x), axis=dim, keepdims=True), n - 1, k)
    v = np.take_along_axis(vals, k, axis=dim)
    i = np.take_along_axis(idx, k, axis=dim).astype(np.int64)
    if not keepdim:
        v, i = np.squeeze(v, axis=dim), np.squeeze(i, axis=dim)
    return v, i


def _median_ok(node: Any) -> bool:
    v = _val(node.args[0])
    return v is not None and v.numel() > 0 and v.dtype != _bool_dtype()


@reg("aten.median.dim", supports=_median_ok)
def median_dim(x, dim=0, keepdim=False):
    if x.ndim == 0:
        return x, ops.zeros((), np.dtype(np.int64))
    return _median(x, dim % x.ndim, keepdim, False)


@reg("aten.nanmedian.dim", supports=_median_ok)
def nanmedian_dim(x, dim=0, keepdim=False):
    if x.ndim == 0:
        return x, ops.zeros((), np.dtype(np.int64))
    return _median(x, dim % x.ndim, keepdim, True)


@reg("aten.median.default", supports=_median_ok)
def median_all(x):
    return _median(np.reshape(x, (-1,)), 0, False, False)[0]


@reg("aten.nanmedian.default", supports=_median_ok)
def nanmedian_all(x):
    return _median(np.reshape(x, (-1,)), 0, False, True)[0]


def _searchsorted_ok(node: Any) -> bool:
    seq = _val(node.args[0])
    return seq is not None and seq.dim() >= 1


@reg("aten.searchsorted.Tensor", supports=_searchsorted_ok)
def searchsorted(sorted_sequence, x, out_int32=False, right=False, side=None, sorter=None):
    """Insertion points by counting: the boundaries below (or not above) each value."""
    right = right or side == "right"
    if sorter is not None:
        sorted_sequence = np.take_along_axis(sorted_sequence, sorter, axis=-1)
    seq = np.expand_dims(sorted_sequence, -2)            # (..., 1, M)
    if x.ndim == 0:
        v = np.reshape(x, (1, 1))
    else:
        v = np.expand_dims(x, -1)                         # (..., N, 1)
    # "not above" rather than "below": a NaN value goes after every boundary
    # (it is no boundary's lower), as the CPU's binary search places it
    below = ~(seq > v) if right else ~(seq >= v)
    cnt = np.sum(below.astype(np.int64), axis=-1)
    if x.ndim == 0:
        cnt = np.reshape(cnt, ())
    return cnt.astype(np.int32 if out_int32 else np.int64)


# ---- diagonals, strided views, unfold ---------------------------------------------

def _diag_geometry(shape: tuple, offset: int, dim1: int, dim2: int):
    nd = len(shape)
    d1, d2 = dim1 % nd, dim2 % nd
    rows, cols = shape[d1], shape[d2]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    n = max(0, min(rows - r0, cols - c0))
    return d1, d2, rows, cols, r0, c0, n


def _to_end(x, d1, d2):
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    return np.transpose(x, tuple(rest + [d1, d2])), rest


@reg("aten.diagonal.default", "aten.diagonal_copy.default")
def diagonal(x, offset=0, dim1=0, dim2=1):
    d1, d2, rows, cols, r0, c0, n = _diag_geometry(_shape(x), offset, dim1, dim2)
    t, rest = _to_end(x, d1, d2)
    lead = _shape(t)[:-2]
    if n == 0:
        return ops.zeros(lead + (0,), x.dtype)
    flat = np.reshape(t, lead + (rows * cols,))
    start = r0 * cols + c0
    return flat[..., start:start + (n - 1) * (cols + 1) + 1:cols + 1]


@reg("aten.diagonal_scatter.default")
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    d1, d2, rows, cols, r0, c0, n = _diag_geometry(_shape(x), offset, dim1, dim2)
    if n == 0:
        return np.copy(x)
    t, rest = _to_end(x, d1, d2)
    lead = _shape(t)[:-2]
    flat = np.copy(np.reshape(t, lead + (rows * cols,)))
    start = r0 * cols + c0
    flat[..., start:start + (n - 1) * (cols + 1) + 1:cols + 1] = src
    back = np.reshape(flat, _shape(t))
    perm = rest + [d1, d2]
    inv = [perm.index(i) for i in range(x.ndim)]
    return np.transpose(back, tuple(inv))


def _within(v: Any, size: Any, stride: Any, offset: Any) -> bool:
    """Whether a strided view of contiguous ``v`` (storage offset 0) reads only
    ``v``'s own elements (not the rest of a larger base storage)."""
    if not (v is not None and v.is_contiguous() and v.storage_offset() == 0):
        return False
    size, stride = list(size), list(stride)
    if not all(isinstance(s, int) for s in size + stride + [offset or 0]):
        return False
    if any(n == 0 for n in size):
        return True
    hi = (offset or 0) + sum((n - 1) * s for n, s in zip(size, stride) if s > 0)
    lo = (offset or 0) + sum((n - 1) * s for n, s in zip(size, stride) if s < 0)
    return lo >= 0 and hi < v.numel()


def _strided_ok(node: Any) -> bool:
    """as_strided over a contiguous input, within its elements: the view's
    elements are then a fixed gather from the flattened input."""
    return _within(_val(node.args[0]), _arg(node, 1, "size"), _arg(node, 2, "stride"),
                   _arg(node, 3, "storage_offset"))


def _strided_index(size, stride, offset):
    idx = np.asarray(offset or 0, dtype=np.int64)
    for i, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[i] = n
        idx = idx + np.arange(n, dtype=np.int64).reshape(shape) * s
    return np.broadcast_to(idx, tuple(size))


@reg("aten.as_strided.default", "aten.as_strided_copy.default", supports=_strided_ok)
def as_strided(x, size, stride, storage_offset=None):
    idx = _strided_index(size, stride, storage_offset)
    if idx.size == 0:
        return ops.zeros(tuple(size), x.dtype)
    return np.take(np.reshape(x, (-1,)), idx)


def _strided_scatter_ok_args(node: Any) -> bool:
    """as_strided_scatter within a contiguous input, no element written twice."""
    v = _val(node.args[0])
    size, stride, off = _arg(node, 2, "size"), _arg(node, 3, "stride"), _arg(node, 4,
                                                                              "storage_offset")
    if not _within(v, size, stride, off):
        return False
    idx = _strided_index(list(size), list(stride), off or 0)
    flat = idx.reshape(-1)
    return len(set(flat.tolist())) == flat.size


@reg("aten.as_strided_scatter.default", supports=_strided_scatter_ok_args)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    idx = _strided_index(size, stride, storage_offset).reshape(-1)
    y = np.copy(np.reshape(x, (-1,)))
    if idx.size:
        y[idx] = np.reshape(src, (-1,))
    return np.reshape(y, _shape(x))


@reg("aten.unfold.default")
def unfold(x, dimension, size, step):
    if x.ndim == 0:
        return np.reshape(x, (1,))
    d = dimension % x.ndim
    n = (_shape(x)[d] - size) // step + 1
    idx = (np.arange(n, dtype=np.int64)[:, None] * step +
           np.arange(size, dtype=np.int64)[None, :])
    if idx.size == 0:
        return ops.zeros(_shape(x)[:d] + (n,) + _shape(x)[d + 1:] + (size,), x.dtype)
    got = np.take(x, idx, axis=d)
    return np.moveaxis(got, d + 1, -1)


# ---- masks ------------------------------------------------------------------------

@reg("aten.masked_scatter.default")
def masked_scatter(x, mask, source):
    """``source``'s elements, in order, into the places ``mask`` selects: the
    k-th selected place takes element k (a running count of the mask)."""
    shape = np.broadcast_shapes(_shape(x), _shape(mask))
    m = np.reshape(np.broadcast_to(mask, shape), (-1,))
    xf = np.reshape(np.broadcast_to(x, shape), (-1,))
    if m.size == 0:
        return np.reshape(xf, shape)
    pos = np.cumsum(m.astype(np.int32)) - 1
    src = np.reshape(source, (-1,))
    n = _shape(src)[0]
    # more places selected than source has elements: the CPU's error
    short = np.reshape(pos[-1] >= n, (1,))
    if n == 0:
        return ops.fail_if(np.reshape(xf, shape), short, _SHORT_SOURCE)
    taken = np.take(src, np.clip(pos, 0, n - 1))
    return ops.fail_if(np.reshape(np.where(m, taken, xf), shape), short, _SHORT_SOURCE)


_SHORT_SOURCE = "masked_scatter: Number of elements of source < number of ones in mask"


# ---- distances ----------------------------------------------------------------------

@reg("aten._cdist_forward.default")
def cdist(x1, x2, p, compute_mode=None):
    d = np.abs(np.expand_dims(_fl(x1), -2) - np.expand_dims(_fl(x2), -3))  # (..., P, R, M)
    if p == 0:
        return np.sum((d != 0).astype(d.dtype), axis=-1)
    if p == 1:
        return np.sum(d, axis=-1)
    if p == 2:
        return np.sqrt(np.sum(d * d, axis=-1))
    if p == math.inf:
        return np.max(d, axis=-1) if _shape(d)[-1] else np.sum(d, axis=-1)
    return np.power(np.sum(np.power(d, p), axis=-1), 1.0 / p)


@reg("aten.bucketize.Tensor")
def bucketize(x, boundaries, out_int32=False, right=False):
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)


@reg("aten.dist.default")
def dist(x, y, p=2):
    d = np.reshape(np.abs(_fl(x) - _fl(y)), (-1,))
    if p == 0:
        return np.sum((d != 0).astype(d.dtype))
    if p == math.inf:
        return np.max(d)
    if p == -math.inf:
        return np.min(d)
    if p == 1:
        return np.sum(d)
    if p == 2:
        return np.sqrt(np.sum(d * d))
    return np.power(np.sum(np.power(d, p)), 1.0 / p)


@reg("aten.linalg_cross.default")
def linalg_cross(x, y, dim=-1):
    """The cross product along ``dim`` (size 3; the other sizes broadcast). Half
    operands round each product to their dtype before the difference (rounded
    again by the node's cast), as PyTorch's CPU kernel computes in c10::Half /
    BFloat16 arithmetic; other dtypes compute in their own."""
    half = _half(x)

    def part(t, i):
        return t[_index(t.ndim, dim, slice(i, i + 1))]

    def prod(a, b):
        if not half:
            return a * b
        return (a.astype(np.float32) * b.astype(np.float32)).astype(x.dtype).astype(np.float32)

    comps = [prod(part(x, i), part(y, j)) - prod(part(x, j), part(y, i))
             for i, j in ((1, 2), (2, 0), (0, 1))]
    return np.concatenate(comps, axis=dim)


@reg("aten.angle.default", supports=lambda n: _val(n.args[0]) is not None and
     not _val(n.args[0]).is_complex())
def angle(x):
    """The argument of a real number: pi below zero, 0 elsewhere, NaN kept."""
    x = _fl(x)
    return np.where(x < 0, math.pi, np.where(np.isnan(x), x, np.zeros_like(x)))


@reg("aten.polygamma.default", supports=_not_f64)
def polygamma(n, x):
    """psi^(n)(x): n == 0 is digamma; n >= 1 shifts x up by 16 with the
    recurrence psi^(n)(x) = psi^(n)(x + 1) + (-1)^(n+1) n! / x^(n+1), then sums
    the asymptotic series (accurate for x > -6 at float32)."""
    if n == 0:
        return digamma(x)
    x = _fl(x)
    sign = 1.0 if n % 2 else -1.0
    fact = float(math.factorial(n))
    acc = np.zeros_like(x)
    xs = x
    for _ in range(16):
        acc = acc + np.power(xs, -(n + 1.0))
        xs = xs + 1.0
    inv = 1.0 / xs
    # (n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B2k (2k+n-1)!/(2k)! / x^(2k+n)
    series = math.factorial(n - 1) * np.power(inv, float(n)) + fact * 0.5 * np.power(inv, n + 1.0)
    for k, b in ((1, 1.0 / 6), (2, -1.0 / 30), (3, 1.0 / 42), (4, -1.0 / 30), (5, 5.0 / 66)):
        coef = b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
        series = series + coef * np.power(inv, float(2 * k + n))
    r = sign * (fact * acc + series)
    pole = (x <= 0) & (x == np.floor(x))
    return np.where(pole, math.inf if n % 2 else math.nan, r)


def _index_reduce_ok(node: Any) -> bool:
    v = _val(node.args[0])
    red = _arg(node, 4, "reduce")
    return v is not None and red in ("prod", "mean", "amax", "amin") and (
        red != "mean" or v.is_floating_point())


@reg("aten.index_reduce.default", supports=_index_reduce_ok)
def index_reduce(x, dim, index, source, reduce, include_self=True):
    """Reduction of the source slices sent to each index along ``dim``: a
    one-hot match of positions and indices, reduced over the indices."""
    if x.ndim == 0:
        x, source = np.reshape(x, (1,)), np.reshape(source, (1,))
        return np.reshape(index_reduce(x, 0, np.reshape(index, (-1,)), source, reduce,
                                       include_self), ())
    dim = dim % x.ndim
    n, k = _shape(x)[dim], _shape(index)[0] if len(_shape(index)) else 1
    xt = np.moveaxis(x, dim, -1)                                   # (..., N)
    st = np.expand_dims(np.moveaxis(source, dim, -1), -2)          # (..., 1, K)
    hot = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (n, 1)) == \
        np.reshape(index.astype(np.int64), (1, k))                 # (N, K)
    hit = np.any(hot, axis=1)                                      # (N,)
    kind = _kind(x)
    if reduce == "prod":
        r = np.prod(np.where(hot, st, np.ones_like(st)), axis=-1)
        out = r * xt if include_self else r
    elif reduce == "mean":
        cnt = np.sum(hot.astype(x.dtype), axis=1)
        r = np.sum(np.where(hot, st, np.zeros_like(st)), axis=-1)
        out = (r + xt) / (cnt + 1) if include_self else r / np.maximum(cnt, 1)
    else:
        big = math.inf if kind == "f" else np.iinfo(x.dtype).max
        fill = -big if reduce == "amax" else big
        pad = np.full((), fill, dtype=x.dtype) if kind != "f" else fill
        r = (np.max if reduce == "amax" else np.min)(np.where(hot, st, pad), axis=-1)
        out = ((np.maximum if reduce == "amax" else np.minimum)(r, xt) if include_self else r)
    out = np.where(hit, cast_like(out, x), xt)
    return np.moveaxis(out, -1, dim)


def cast_like(v: Any, like: Any) -> Any:
    return v if v.dtype == like.dtype else v.astype(like.dtype)


@reg("aten.put.default")
def put(x, index, source, accumulate=False):
    numel = int(np.prod(_shape(x)))
    flat = np.reshape(x, (-1,))
    if numel == 0 or int(np.prod(_shape(index))) == 0:
        return np.copy(x)
    idx = np.reshape(index, (-1,)).astype(np.int64)
    idx = np.where(idx < 0, idx + numel, idx)
    src = np.reshape(source, (-1,))
    y = np.copy(flat)
    if accumulate:
        np.add.at(y, idx, src)
    else:
        y[idx] = src
    return np.reshape(y, _shape(x))


@reg("aten.unbind_copy.int")
def unbind_copy(x, dim=0):
    dim = dim % x.ndim
    return [np.copy(np.take(x, i, axis=dim)) for i in range(_shape(x)[dim])]


@reg("aten.narrow_copy.default")
def narrow_copy(x, dim, start, length):
    dim = dim % x.ndim
    start = start % _shape(x)[dim] if start < 0 else start
    sel = [slice(None)] * x.ndim
    sel[dim] = slice(start, start + length)
    return np.copy(x[tuple(sel)])


@reg("aten.new_empty_strided.default")
def new_empty_strided(x, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return ops.zeros(tuple(size), dtype or x.dtype)


# ---- more special functions --------------------------------------------------------

def _bessel_i(x, order: int, scaled: bool):
    """I0 / I1 (Abramowitz and Stegun 9.8.1-4, relative error below 2.2e-7),
    ``scaled``: times exp(-|x|) (computed without overflow)."""
    x = _fl(x)
    a = np.abs(x)
    t = a / 3.75
    t2 = t * t
    if order == 0:
        small = 1.0 + t2 * (3.5156229 + t2 * (3.0899424 + t2 * (1.2067492 + t2 * (
            0.2659732 + t2 * (0.0360768 + t2 * 0.0045813)))))
        coef = (0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
                0.02635537, -0.01647633, 0.00392377)
    else:
        small = x * (0.5 + t2 * (0.87890594 + t2 * (0.51498869 + t2 * (0.15084934 + t2 * (
            0.02658733 + t2 * (0.00301532 + t2 * 0.00032411))))))
        coef = (0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
                -0.02895312, 0.01787654, -0.00420059)
    am = np.maximum(a, 3.75)
    u = 3.75 / am
    poly = coef[-1]
    for c in coef[-2::-1]:
        poly = poly * u + c
    big = poly / np.sqrt(am)                     # I(x) exp(-|x|) for |x| >= 3.75
    if order == 1:
        big = np.where(x < 0, -big, big)
    if scaled:
        return np.where(a < 3.75, small * np.exp(-a), big)
    return np.where(a < 3.75, small, big * np.exp(am))


@reg("aten.special_i0e.default", supports=_not_f64)
def i0e(x):
    return _bessel_i(x, 0, True)


@reg("aten.special_i1.default", "aten.special_modified_bessel_i1.default",
     supports=_not_f64)
def i1(x):
    return _bessel_i(x, 1, False)


@reg("aten.special_i1e.default", supports=_not_f64)
def i1e(x):
    return _bessel_i(x, 1, True)


@reg("aten.special_modified_bessel_i0.default", supports=_not_f64)
def modified_bessel_i0(x):
    return _bessel_i(x, 0, False)


@reg("aten.special_spherical_bessel_j0.default")
def spherical_bessel_j0(x):
    x = _fl(x)
    r = np.where(x == 0, 1.0, np.sin(x) / np.where(x == 0, 1.0, x))
    return np.where(np.isinf(x), 0.0, r)


@reg("aten.special_erfcx.default")
def erfcx(x):
    """exp(x^2) erfc(x), in float64 (erfc underflows where exp(x^2) overflows
    only beyond x = 26; the asymptotic series takes over from 25)."""
    xd = x.astype(np.float64) if hasattr(x, "dtype") else x
    near = np.exp(xd * xd) * ops.erfc(np.minimum(xd, 25.0))
    xa = np.maximum(xd, 25.0)
    inv2 = 1.0 / (xa * xa)
    far = (1.0 - 0.5 * inv2 * (1.0 - 1.5 * inv2 * (1.0 - 2.5 * inv2))) / (xa * 1.7724538509055159)
    return np.where(xd < 25.0, near, far)


@reg("aten.frexp.Tensor")
def frexp(x):
    """Mantissa in [0.5, 1) and exponent: floor(log2|x|) + 1, corrected by one
    where log2 rounded across a power of two; 0, inf and NaN keep e = 0."""
    xf = _fl(x)
    a = np.abs(xf)
    finite = np.isfinite(xf) & (xf != 0)
    safe = np.where(finite, a, 1.0)
    e = np.floor(np.log2(safe)) + 1.0
    m = safe / np.power(2.0, e)
    e = np.where(m >= 1.0, e + 1.0, np.where(m < 0.5, e - 1.0, e))
    m = safe / np.power(2.0, e)
    e = np.where(finite, e, 0.0)
    mant = np.where(finite, np.where(xf < 0, -m, m), xf)
    return mant, e.astype(np.int32)


# ---- scatter reductions, segments, histograms ------------------------------------------------

def _scatter_reduce_ok(node: Any) -> bool:
    v = _val(node.args[0])
    red = _arg(node, 4, "reduce") if "two" in str(node.target) else node.kwargs.get("reduce")
    return v is not None and v.dim() >= 1 and red in ("sum", "prod", "mean", "amax", "amin",
                                                       "add", "multiply") and (
        red != "mean" or v.is_floating_point())


def _scatter_reduce(x, dim, index, src, reduce, include_self):
    """One-hot over the target positions of each index along ``dim``, reduced
    over the index positions; only the index's leading block of x changes."""
    dim = dim % x.ndim
    ish = _shape(index)
    if 0 in ish:
        return np.copy(x)
    index = _in_range(index, _shape(x)[dim], dim)
    region = tuple(slice(0, n) if d != dim else slice(None) for d, n in enumerate(ish))
    xr = np.moveaxis(x[region], dim, -1)                                  # (..., N)
    n = _shape(xr)[-1]
    it = np.moveaxis(index.astype(np.int64), dim, -1)                      # (..., K)
    st = np.moveaxis(src[tuple(slice(0, k) for k in ish)], dim, -1)
    hot = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (n, 1)) == np.expand_dims(it, -2)
    sv = np.expand_dims(st, -2)                                            # (..., 1, K)
    hit = np.any(hot, axis=-1)                                             # (..., N)
    kind = _kind(x)
    if reduce in ("sum", "add", "mean"):
        r = np.sum(np.where(hot, sv, np.zeros_like(sv)), axis=-1)
        if reduce == "mean":
            cnt = np.sum(hot.astype(x.dtype), axis=-1)
            r = (r + xr) / (cnt + 1) if include_self else r / np.maximum(cnt, 1)
        elif include_self:
            r = r + xr
    elif reduce in ("prod", "multiply"):
        r = np.prod(np.where(hot, sv, np.ones_like(sv)), axis=-1)
        if include_self:
            r = r * xr
    else:
        big = math.inf if kind == "f" else np.iinfo(x.dtype).max
        pad = big if reduce == "amin" else -big
        pad = pad if kind == "f" else np.full((), pad, dtype=x.dtype)
        r = (np.max if reduce == "amax" else np.min)(np.where(hot, sv, pad), axis=-1)
        if include_self:
            r = (np.maximum if reduce == "amax" else np.minimum)(r, xr)
    out = np.where(hit, cast_like(r, x), xr)
    y = np.copy(x)
    y[region] = np.moveaxis(out, -1, dim)
    return y


@reg("aten.scatter_reduce.two", supports=_scatter_reduce_ok)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    return _scatter_reduce(x, dim, index, src, reduce, include_self)


@reg("aten.scatter.reduce", "aten.scatter.value_reduce", supports=_scatter_reduce_ok)
def scatter_with_reduce(x, dim, index, src, reduce):
    if not hasattr(src, "shape"):
        src = ops.full(_shape(index), src, x.dtype)
    return _scatter_reduce(x, dim, index, src, reduce, True)


def _segment_ok(node: Any) -> bool:
    data = _val(node.args[0])
    lengths, offsets = node.kwargs.get("lengths"), node.kwargs.get("offsets")
    seg = lengths if lengths is not None else offsets
    return (data is not None and node.kwargs.get("indices") is None and
            node.kwargs.get("axis", 0) == 0 and seg is not None and _val(seg) is not None
            and _val(seg).dim() == 1 and data.dim() >= 1 and data.is_floating_point())


@reg("aten.segment_reduce.default", supports=_segment_ok)
def segment_reduce(data, reduce, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """Reduction of consecutive segments of dim 0 (lengths or offsets): a
    one-hot of rows to segments, reduced over the rows."""
    if offsets is not None:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        ends = np.cumsum(lengths.astype(np.int64))
        starts = ends - lengths.astype(np.int64)
    s, n = _shape(starts)[0], _shape(data)[0]
    rows = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    hot = (rows >= np.reshape(starts.astype(np.int64), (s, 1))) & \
        (rows < np.reshape(ends.astype(np.int64), (s, 1)))                  # (S, N)
    rest = _shape(data)[1:]
    h = np.reshape(hot, (s, n) + (1,) * len(rest))
    d = np.expand_dims(_fl(data), 0)                                        # (1, N, ...)
    cnt = np.reshape(np.sum(hot.astype(d.dtype), axis=1), (s,) + (1,) * len(rest))
    if reduce in ("sum", "mean"):
        r = np.sum(np.where(h, d, np.zeros_like(d)), axis=1)
        if initial is not None:
            r = r + initial
        if reduce == "mean":
            r = np.where(cnt > 0, r / np.maximum(cnt, 1.0),
                         math.nan if initial is None else initial)
    elif reduce == "prod":
        r = np.prod(np.where(h, d, np.ones_like(d)), axis=1)
        if initial is not None:
            r = r * initial
    else:
        pad = -math.inf if reduce == "max" else math.inf
        r = (np.max if reduce == "max" else np.min)(np.where(h, d, pad), axis=1)
        if initial is not None:
            r = (np.maximum if reduce == "max" else np.minimum)(r, initial)
    return r


def _histc_ok(node: Any) -> bool:
    v = _val(node.args[0])
    return v is not None and v.is_floating_point()


@reg("aten.histc.default", supports=_histc_ok)
def histc(x, bins=100, min=0, max=0):
    """Counts of equal-width bins over [min, max] (the data's range when
    min == max); the top edge belongs to the last bin, values outside count
    nowhere."""
    xf = np.reshape(_fl(x), (-1,))
    if _shape(xf)[0] == 0:
        return ops.zeros((bins,), xf.dtype)
    lo, hi = min, max
    if lo == hi:
        lo, hi = np.min(xf), np.max(xf)
        same = lo == hi
        lo, hi = np.where(same, lo - 1.0, lo), np.where(same, hi + 1.0, hi)
    pos = np.floor((xf - lo) * bins / (hi - lo))
    pos = np.where(xf == hi, bins - 1.0, pos)
    inside = (xf >= lo) & (xf <= hi)
    hot = (np.reshape(pos, (1, -1)) == np.reshape(ops.arange(0, bins, 1, dtype=xf.dtype), (-1, 1))) \
        & np.reshape(inside, (1, -1))
    return np.sum(hot.astype(xf.dtype), axis=1)


# ---- products and distances ---------------------------------------------------------

@reg("aten._trilinear.default")
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    for d in expand1:
        i1 = np.expand_dims(i1, d)
    for d in expand2:
        i2 = np.expand_dims(i2, d)
    for d in expand3:
        i3 = np.expand_dims(i3, d)
    p = i1 * i2 * i3
    return np.sum(p, axis=tuple(sumdim)) if len(sumdim) else p


@reg("aten._pdist_forward.default")
def pdist(x, p=2.0):
    n = _shape(x)[0]
    pairs = [i * n + j for i in range(n) for j in range(i + 1, n)]
    if not pairs:
        return ops.zeros((0,), x.dtype)
    full = np.reshape(cdist(x, x, p), (-1,))
    return np.take(full, np.asarray(pairs, dtype=np.int64))


# ---- small dense linear algebra: Cholesky, triangular solves, LU determinants ----------------
#
# Unrolled over the (static) matrix size, batched over leading dims; up to
# _LINALG_MAX rows, beyond which the node stays on the CPU.

_LINALG_MAX = 32


def _square_float(i: int = 0):
    def ok(node: Any) -> bool:
        v = _val(node.args[i])
        return v is not None and v.dim() >= 2 and v.shape[-1] == v.shape[-2] and \
            v.shape[-1] <= _LINALG_MAX and v.is_floating_point()
    return ok


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _tri_solve(a, b, upper: bool, unit: bool = False):
    """x with a @ x = b for triangular a (..., n, n), b (..., n, k)."""
    n = _shape(a)[-1]
    rows = [None] * n
    order = range(n - 1, -1, -1) if upper else range(n)
    for i in order:
        r = b[..., i:i + 1, :]
        done = [k for k in (range(i + 1, n) if upper else range(i)) if rows[k] is not None]
        for k in done:
            r = r - a[..., i:i + 1, k:k + 1] * rows[k]
        rows[i] = r if unit else r / a[..., i:i + 1, i:i + 1]
    return np.concatenate(rows, axis=-2)


def _cholesky_lower(a):
    """L with L @ L^T = a; and the first leading minor (1-based) that is not
    positive definite, 0 when there is none."""
    n = _shape(a)[-1]
    cols = []
    bad = None
    for j in range(n):
        c = a[..., :, j:j + 1]
        for k in range(j):
            c = c - cols[k] * cols[k][..., j:j + 1, :]
        d = c[..., j:j + 1, :]
        fail = np.reshape(~(d > 0), _shape(d)[:-2])
        bad = np.where(fail, j + 1, 0) if bad is None else np.where((bad == 0) & fail, j + 1, bad)
        rows = np.reshape(ops.arange(0, n, 1, dtype=np.int32), (n, 1))
        col = np.where(rows > j, c / np.sqrt(d), np.where(rows == j, np.sqrt(d), 0.0))
        cols.append(col.astype(c.dtype))
    return np.concatenate(cols, axis=-1), bad.astype(np.int32)


@reg("aten.linalg_cholesky_ex.default", supports=_square_float())
def linalg_cholesky_ex(a, upper=False, check_errors=False):
    af = _fl(a)
    if _shape(af)[-1] == 0:
        return np.copy(af), ops.zeros(_shape(af)[:-2], np.dtype(np.int32))
    lo, info = _cholesky_lower(af)
    return (_mT(lo) if upper else lo), info


@reg("aten.cholesky.default", supports=_square_float())
def cholesky(a, upper=False):
    return linalg_cholesky_ex(a, upper)[0]


@reg("aten.cholesky_inverse.default", supports=_square_float())
def cholesky_inverse(l_, upper=False):
    lf = _fl(l_)
    if _shape(lf)[-1] == 0:
        return np.copy(lf)
    lo = _mT(lf) if upper else lf
    eye = np.broadcast_to(ops.eye(_shape(lo)[-1], dtype=lo.dtype), _shape(lo))
    inv = _tri_solve(lo, eye, upper=False)               # L^-1
    return np.matmul(_mT(inv), inv)


@reg("aten.cholesky_solve.default", supports=_square_float(1))
def cholesky_solve(b, l_, upper=False):
    bf, lf = _fl(b), _fl(l_)
    lo = _mT(lf) if upper else lf
    shape = np.broadcast_shapes(_shape(bf)[:-2], _shape(lo)[:-2])
    bf = np.broadcast_to(bf, shape + _shape(bf)[-2:])
    lo = np.broadcast_to(lo, shape + _shape(lo)[-2:])
    if 0 in _shape(bf):
        return ops.zeros(_shape(bf), bf.dtype)
    y = _tri_solve(lo, bf, upper=False)
    return _tri_solve(_mT(lo), y, upper=True)


@reg("aten.linalg_solve_triangular.default", supports=_square_float())
def linalg_solve_triangular(a, b, upper, left=True, unitriangular=False):
    af, bf = _fl(a), _fl(b)
    if not left:           # x a = b  <=>  a^T x^T = b^T
        af, bf, upper = _mT(af), _mT(bf), not upper
    shape = np.broadcast_shapes(_shape(af)[:-2], _shape(bf)[:-2])
    af = np.broadcast_to(af, shape + _shape(af)[-2:])
    bf = np.broadcast_to(bf, shape + _shape(bf)[-2:])
    if 0 in _shape(bf):
        x = ops.zeros(_shape(bf), bf.dtype)
    else:
        x = _tri_solve(af, bf, upper, unitriangular)
    return _mT(x) if not left else x


@reg("aten.triangular_solve.default", supports=_square_float(1))
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    af = _fl(a)
    if transpose:
        af, upper = _mT(af), not upper
    x = linalg_solve_triangular(af, b, upper=upper, unitriangular=unitriangular)
    return x, np.copy(a)


def _lu_rect(a):
    """Partial-pivoting LU of (..., m, n) as LAPACK's getrf: (packed LU, 1-based
    int32 pivots (..., min(m, n)), int32 info: the first zero pivot, 1-based, else
    0, parity of the row swaps). A zero pivot column is left unscaled."""
    m, n = _shape(a)[-2:]
    u = a
    rows = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    cols = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    pivots, info, odd = [], None, None
    for k in range(min(m, n)):
        p = np.argmax(np.abs(u[..., k:, k]), axis=-1).astype(np.int64) + k      # (...)
        pe = np.expand_dims(np.expand_dims(p, -1), -1)                           # (..., 1, 1)
        row_p = np.take_along_axis(u, np.broadcast_to(pe, _shape(u)[:-2] + (1, n)), axis=-2)
        row_k = u[..., k:k + 1, :]
        u = np.where(rows == k, row_p, np.where(rows == pe, row_k, u))
        pivots.append(np.expand_dims(p + 1, -1))
        swap = p != k
        odd = swap if odd is None else (odd != swap)
        piv = u[..., k:k + 1, k:k + 1]
        zero = np.reshape(piv == 0, _shape(piv)[:-2])
        info = np.where(zero, k + 1, 0) if info is None else \
            np.where((info == 0) & zero, k + 1, info)
        safe = np.where(piv == 0, 1.0, piv)
        l_ = np.where(piv == 0, 0.0, u[..., :, k:k + 1] / safe)                 # (..., m, 1)
        below = rows > k
        u = u - np.where(below & (cols > k), l_ * u[..., k:k + 1, :], 0.0)
        u = np.where(below & (cols == k), l_, u)
    i32 = np.dtype(np.int32)
    return u, np.concatenate(pivots, axis=-1).astype(i32), info.astype(i32), odd


def _lu(a):
    """Partial-pivoting LU of a square (..., n, n) as LAPACK's getrf: (packed LU,
    1-based int32 pivots, parity of the row swaps)."""
    u, pivots, _, odd = _lu_rect(a)
    return u, pivots, odd


def _diag(x):
    n = _shape(x)[-1]
    flat = np.reshape(x, _shape(x)[:-2] + (n * n,))
    return flat[..., ::n + 1]


@reg("aten._linalg_det.default", supports=_square_float())
def linalg_det(a):
    if _shape(a)[-1] == 0:
        return (ops.ones(_shape(a)[:-2], _fl(a).dtype), np.copy(_fl(a)),
                ops.zeros(_shape(a)[:-1], np.dtype(np.int32)))
    lu, piv, odd = _lu(_fl(a))
    d = np.prod(_diag(lu), axis=-1)
    return np.where(odd, -d, d), lu, piv


@reg("aten._linalg_slogdet.default", supports=_square_float())
def linalg_slogdet(a):
    if _shape(a)[-1] == 0:
        f = _fl(a)
        return (ops.ones(_shape(a)[:-2], f.dtype), ops.zeros(_shape(a)[:-2], f.dtype), np.copy(f),
                ops.zeros(_shape(a)[:-1], np.dtype(np.int32)))
    lu, piv, odd = _lu(_fl(a))
    dg = _diag(lu)
    sign = np.prod(np.sign(dg), axis=-1)
    sign = np.where(odd, -sign, sign)
    return sign, np.sum(np.log(np.abs(dg)), axis=-1), lu, piv
