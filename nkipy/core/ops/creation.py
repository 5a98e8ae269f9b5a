"""Creation ops: constant, zeros, ones, full, *_like, tril, triu, diag, eye, arange.

Inside a traced kernel these make traced tensors (so they can be written with
``x[i] = ...``). NumPy's own ``np.zeros``/``np.arange``/... called inside a kernel
make NumPy arrays, which become constants of the graph where they are used.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import take_value
from nkipy.core.ops._core import is_tracer, nkipy_op, to_value, unsupported, wrap

__all__ = ["constant", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
           "full_like", "tril", "triu", "diag", "eye", "identity", "arange"]


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _filled(shape: Any, value: Any, dtype: Any) -> Any:
    if is_tracer(value):
        v = to_value(value, dtype)
        return wrap(B.broadcast_to(v, _shape(shape)))
    dt = _dt.check_supported(dtype)
    return wrap(B.broadcast_to(B.const(np.asarray(value).astype(dt)), _shape(shape)))


def _default_dtype(value: Any, dtype: Any) -> np.dtype:
    if dtype is not None:
        return _dt.narrow(dtype)
    if is_tracer(value):
        return value.dtype
    if isinstance(value, (np.ndarray, np.generic)):
        return _dt.narrow(value.dtype)
    dt = np.asarray(value).dtype     # Python scalars: 32-bit, as NumPy's weak scalars
    return _dt.NARROWING.get(dt, dt)


@nkipy_op(cpu=lambda value, dtype=None: np.asarray(value, dtype=dtype))
def constant(value: Any, dtype: Any = None) -> Any:
    """A tensor holding ``value`` (baked into the kernel)."""
    if is_tracer(value):
        return wrap(to_value(value, dtype))
    arr = np.asarray(value, dtype=dtype)
    return wrap(B.const(arr))


@nkipy_op(cpu=lambda shape, dtype=np.float32: np.zeros(shape, dtype=dtype))
def zeros(shape: Any, dtype: Any = np.float32) -> Any:
    return _filled(shape, 0, dtype)


@nkipy_op(cpu=lambda shape, dtype=np.float32: np.ones(shape, dtype=dtype))
def ones(shape: Any, dtype: Any = np.float32) -> Any:
    return _filled(shape, 1, dtype)


@nkipy_op(cpu=lambda shape, dtype=np.float32: np.empty(shape, dtype=dtype))
def empty(shape: Any, dtype: Any = np.float32) -> Any:
    """Like zeros (a traced kernel's fresh tensors are always initialised)."""
    return _filled(shape, 0, dtype)


@nkipy_op(cpu=lambda shape, fill_value, dtype=None: np.full(shape, fill_value, dtype=dtype))
def full(shape: Any, fill_value: Any, dtype: Any = None) -> Any:
    return _filled(shape, fill_value, _default_dtype(fill_value, dtype))


def _like(a: Any, dtype: Any, shape: Any) -> tuple[tuple[int, ...], np.dtype]:
    v = to_value(a)
    return (_shape(shape) if shape is not None else v.shape,
            _dt.narrow(dtype) if dtype is not None else v.dtype)


@nkipy_op(cpu=np.zeros_like)
def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True,
               shape: Any = None, **kw: Any) -> Any:
    s, d = _like(a, dtype, shape)
    return _filled(s, 0, d)


@nkipy_op(cpu=np.ones_like)
def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: bool = True,
              shape: Any = None, **kw: Any) -> Any:
    s, d = _like(a, dtype, shape)
    return _filled(s, 1, d)


@nkipy_op(cpu=np.empty_like)
def empty_like(prototype: Any, dtype: Any = None, order: str = "K", subok: bool = True,
               shape: Any = None, **kw: Any) -> Any:
    """Like zeros_like (contents are zero in traced kernels)."""
    s, d = _like(prototype, dtype, shape)
    return _filled(s, 0, d)


@nkipy_op(cpu=np.full_like)
def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K", subok: bool = True,
              shape: Any = None, **kw: Any) -> Any:
    s, d = _like(a, dtype, shape)
    return _filled(s, fill_value, d)


def _tri_mask(n: int, m: int, k: int, lower: bool) -> Value:
    row = B.iota((n, m), 0)
    col = B.iota((n, m), 1)
    d = B.binary("sub", col, row)
    return B.binary("le" if lower else "ge", d, B.const(np.int32(k)))


def _tri(m: Any, k: int, lower: bool) -> Any:
    v = to_value(m)
    if v.ndim < 2:
        raise ValueError("input array must be at least 2-d")
    mask = _tri_mask(v.shape[-2], v.shape[-1], int(k), lower)
    zero = B.const(np.zeros((), v.dtype))
    return wrap(B.where(mask, v, zero))


@nkipy_op(cpu=np.tril)
def tril(m: Any, k: int = 0) -> Any:
    """Lower triangle (elements above the k-th diagonal zeroed)."""
    return _tri(m, k, True)


@nkipy_op(cpu=np.triu)
def triu(m: Any, k: int = 0) -> Any:
    """Upper triangle (elements below the k-th diagonal zeroed)."""
    return _tri(m, k, False)


@nkipy_op(cpu=np.diag)
def diag(v: Any, k: int = 0) -> Any:
    """1-D input: a 2-D matrix with v on diagonal k; 2-D input: its k-th diagonal."""
    x = to_value(v)
    k = int(k)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        vv = B.pad(x, [(0, abs(k))], 0)
        if k >= 0:
            b = B.broadcast_to(B.reshape(vv, (n, 1)), (n, n))
        else:
            b = B.broadcast_to(B.reshape(vv, (1, n)), (n, n))
        row = B.iota((n, n), 0)
        col = B.iota((n, n), 1)
        mask = B.binary("eq", B.binary("sub", col, row), B.const(np.int32(k)))
        return wrap(B.where(mask, b, B.const(np.zeros((), x.dtype))))
    if x.ndim == 2:
        n, m = x.shape
        rows = np.arange(max(0, -k), n)
        cols = rows + k
        ok = (cols >= 0) & (cols < m)
        flat_idx = (rows[ok] * m + cols[ok]).astype(np.int32)
        return wrap(take_value(B.reshape(x, (x.size,)), B.const(flat_idx), 0))
    raise ValueError("Input must be 1- or 2-d.")


@nkipy_op(cpu=np.eye)
def eye(N: int, M: Any = None, k: int = 0, dtype: Any = np.float32) -> Any:
    m = N if M is None else M
    dt = _dt.check_supported(dtype)
    mask = B.binary("eq", B.binary("sub", B.iota((N, m), 1), B.iota((N, m), 0)),
                    B.const(np.int32(k)))
    return wrap(B.cast(mask, dt))


@nkipy_op(cpu=np.identity)
def identity(n: int, dtype: Any = np.float32) -> Any:
    return eye(n, dtype=dtype)


@nkipy_op(cpu=np.arange)
def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Any:
    """``np.arange`` as a traced tensor (an iota when start/step are integers)."""
    if any(is_tracer(x) for x in (start, stop, step)):
        raise unsupported("arange with traced bounds", "bounds must be static")
    if stop is None:
        start, stop = 0, start
    ints = all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
               for x in (start, stop, step))
    if ints and step != 0:
        # the size and dtype without materialising the range (it may be huge)
        size = len(range(int(start), int(stop), int(step)))
        ref = np.arange(start, start + step * min(size, 1), step, dtype=dtype)
    else:
        ref = np.arange(start, stop, step, dtype=dtype)
        size = ref.size
    dt = _dt.check_supported(ref.dtype)
    if size and float(start) == int(start) and float(step) == int(step) and dt.kind in "iu":
        # int32 indices unless a value or the index itself leaves int32's range:
        # then 64-bit ones (a 64-bit dtype only), never silently wrapping
        last = int(start) + int(step) * (size - 1)
        lim = np.iinfo(np.int32)
        fits32 = all(lim.min <= int(x) <= lim.max for x in (start, last, step, size - 1))
        if not fits32 and dt.itemsize < 8:
            raise ValueError(f"arange({start}, {stop}, {step}): values or indices outside "
                             f"int32 need a 64-bit dtype (int64 under wide dtypes); the "
                             f"kernel dtype is {dt}")
        ity = np.int32 if fits32 else np.int64
        i = B.iota((size,), 0, np.dtype(ity))
        if step != 1:
            i = B.binary("mul", i, B.const(ity(step)))
        if start != 0:
            i = B.binary("add", i, B.const(ity(start)))
        return wrap(B.cast(i, dt))
    if ref.size != size:   # a float dtype over integer bounds: the values themselves
        ref = np.arange(start, stop, step, dtype=dtype)
    return wrap(B.const(ref.astype(dt)))
