"""Reductions: sum, prod, max, min, mean, var, std, any, all, argmax, argmin, cumsum,
cumprod, count_nonzero (axis None / int / negative / tuple, keepdims)."""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import accumulate_dtype, filled, reduce_np, reduced_shape
from nkipy.core.ops._core import nkipy_op, reject_kwargs, to_value, wrap, write_out
from nkipy.core.ops._elementwise import apply_ufunc

__all__ = ["sum", "prod", "max", "min", "amax", "amin", "mean", "var", "std", "any", "all",
           "argmax", "argmin", "cumsum", "cumprod", "count_nonzero"]


def _check(name: str, kwargs: dict) -> None:
    reject_kwargs(name, kwargs)


def _apply_initial(r: Value, initial: Any, op: np.ufunc) -> Any:
    if initial is None or initial is np._NoValue:  # type: ignore[attr-defined]
        return wrap(r)
    return apply_ufunc(op, [wrap(r), np.asarray(initial).astype(r.dtype)])


@nkipy_op(cpu=np.sum)
def sum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
        initial: Any = None, **kwargs: Any) -> Any:
    _check("sum", kwargs)
    v = to_value(a)
    dt = _dt.check_supported(dtype) if dtype is not None else accumulate_dtype(v.dtype)
    r = reduce_np("reduce_sum", B.cast(v, dt), axis, keepdims, 0)
    return write_out(out, _apply_initial(r, initial, np.add))


@nkipy_op(cpu=np.prod)
def prod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         initial: Any = None, **kwargs: Any) -> Any:
    _check("prod", kwargs)
    v = to_value(a)
    dt = _dt.check_supported(dtype) if dtype is not None else accumulate_dtype(v.dtype)
    r = reduce_np("reduce_prod", B.cast(v, dt), axis, keepdims, 1)
    return write_out(out, _apply_initial(r, initial, np.multiply))


def _minmax(name: str, a: Any, axis: Any, out: Any, keepdims: bool, initial: Any,
            kwargs: dict) -> Any:
    _check(name, kwargs)
    v = to_value(a)
    is_max = name == "max"
    if v.dtype == B.BOOL:
        op = "reduce_any" if is_max else "reduce_all"
    else:
        op = "reduce_max" if is_max else "reduce_min"
    if v.size == 0 and initial is not None:
        axes = B.normalize_axes(axis, v.ndim)
        shape = reduced_shape(v.shape, axes, keepdims)
        return write_out(out, wrap(filled(shape, initial, v.dtype)))
    r = reduce_np(op, v, axis, keepdims, None)
    return write_out(out, _apply_initial(r, initial, np.maximum if is_max else np.minimum))


@nkipy_op(cpu=np.max)
def max(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = None,
        **kwargs: Any) -> Any:
    return _minmax("max", a, axis, out, keepdims, initial, kwargs)


@nkipy_op(cpu=np.min)
def min(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, initial: Any = None,
        **kwargs: Any) -> Any:
    return _minmax("min", a, axis, out, keepdims, initial, kwargs)


amax = max
amin = min


def _to_bool(v: Value) -> Value:
    return B.cast(v, B.BOOL)


@nkipy_op(cpu=np.any)
def any(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
    _check("any", kwargs)
    r = reduce_np("reduce_any", _to_bool(to_value(a)), axis, keepdims, False)
    return write_out(out, wrap(r))


@nkipy_op(cpu=np.all)
def all(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False, **kwargs: Any) -> Any:
    _check("all", kwargs)
    r = reduce_np("reduce_all", _to_bool(to_value(a)), axis, keepdims, True)
    return write_out(out, wrap(r))


def _mean_dtypes(v: Value, dtype: Any) -> tuple[np.dtype, np.dtype]:
    """(compute dtype, result dtype) of mean/var like NumPy (float32 for halves)."""
    if dtype is not None:
        dt = _dt.check_supported(dtype)
        return (B.FLOAT32 if dt.itemsize == 2 and _dt.is_float(dt) else dt), dt
    if not _dt.is_float(v.dtype):
        return B.FLOAT32, B.FLOAT32
    if v.dtype.itemsize == 2:
        return B.FLOAT32, v.dtype
    return v.dtype, v.dtype


def _count(v: Value, axes: tuple) -> int:
    n = 1
    for a in axes:
        n *= v.shape[a]
    return n


def _mean_value(v: Value, axis: Any, keepdims: bool, cdt: np.dtype) -> Value:
    axes = B.normalize_axes(axis, v.ndim)
    x = B.cast(v, cdt)
    s = reduce_np("reduce_sum", x, axes, keepdims, 0)
    n = _count(v, axes)
    return B.binary("div", s, B.const(np.asarray(n).astype(cdt)))


@nkipy_op(cpu=np.mean)
def mean(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         **kwargs: Any) -> Any:
    _check("mean", kwargs)
    v = to_value(a)
    cdt, rdt = _mean_dtypes(v, dtype)
    return write_out(out, wrap(B.cast(_mean_value(v, axis, keepdims, cdt), rdt)))


def _var_value(v: Value, axis: Any, ddof: int, keepdims: bool, cdt: np.dtype) -> Value:
    axes = B.normalize_axes(axis, v.ndim)
    x = B.cast(v, cdt)
    m = _mean_value(v, axes, True, cdt)
    d = B.binary("sub", x, m)
    ss = reduce_np("reduce_sum", B.binary("mul", d, d), axes, keepdims, 0)
    n = builtins.max(_count(v, axes) - ddof, 0)
    return B.binary("div", ss, B.const(np.asarray(n).astype(cdt)))


@nkipy_op(cpu=np.var)
def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, **kwargs: Any) -> Any:
    _check("var", kwargs)
    v = to_value(a)
    cdt, rdt = _mean_dtypes(v, dtype)
    return write_out(out, wrap(B.cast(_var_value(v, axis, ddof, keepdims, cdt), rdt)))


@nkipy_op(cpu=np.std)
def std(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, **kwargs: Any) -> Any:
    _check("std", kwargs)
    v = to_value(a)
    cdt, rdt = _mean_dtypes(v, dtype)
    r = B.unary("sqrt", _var_value(v, axis, ddof, keepdims, cdt))
    return write_out(out, wrap(B.cast(r, rdt)))


def _arg(op: str, a: Any, axis: Any, out: Any, keepdims: bool) -> Any:
    v = to_value(a)
    if v.dtype == B.BOOL:
        v = B.cast(v, np.dtype(np.uint8))
    if axis is None:
        if v.size == 0:
            raise ValueError(f"attempt to get {op} of an empty sequence")
        flat = B.reshape(v, (v.size,))
        r = B.emit1(op, [flat], {"axis": 0, "keepdims": False}, (), B.index_dtype(v.size)) \
            if v.size > 1 else B.const(np.int32(0))
        if keepdims:
            r = B.reshape(r, (1,) * v.ndim)
        return write_out(out, wrap(r))
    ax = B.normalize_axis(axis, v.ndim)
    if v.shape[ax] == 0:
        raise ValueError(f"attempt to get {op} of an empty sequence")
    shape = reduced_shape(v.shape, (ax,), keepdims)
    if v.shape[ax] == 1:
        return write_out(out, wrap(filled(shape, 0, B.INT32)))
    r = B.emit1(op, [v], {"axis": ax, "keepdims": bool(keepdims)}, shape,
                B.index_dtype(v.shape[ax]))
    return write_out(out, wrap(r))


@nkipy_op(cpu=np.argmax)
def argmax(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index (int32; int64 over 2**31 or more elements) of the first maximum; NaN
    counts as the maximum."""
    return _arg("argmax", a, axis, out, keepdims)


@nkipy_op(cpu=np.argmin)
def argmin(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index (int32; int64 over 2**31 or more elements) of the first minimum; NaN
    counts as the minimum."""
    return _arg("argmin", a, axis, out, keepdims)


def _cum(op: str, a: Any, axis: Any, dtype: Any, out: Any) -> Any:
    v = to_value(a)
    dt = _dt.check_supported(dtype) if dtype is not None else accumulate_dtype(v.dtype)
    v = B.cast(v, dt)
    if axis is None:
        v = B.reshape(v, (v.size,))
        ax = 0
    else:
        ax = B.normalize_axis(axis, v.ndim)
    if v.shape[ax] <= 1:
        return write_out(out, wrap(v))
    return write_out(out, wrap(B.emit1(op, [v], {"axis": ax}, v.shape, v.dtype)))


@nkipy_op(cpu=np.cumsum)
def cumsum(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    return _cum("cumsum", a, axis, dtype, out)


@nkipy_op(cpu=np.cumprod)
def cumprod(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
    return _cum("cumprod", a, axis, dtype, out)


@nkipy_op(cpu=np.count_nonzero)
def count_nonzero(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
    v = B.cast(_to_bool(to_value(a)), accumulate_dtype(B.BOOL))
    return wrap(reduce_np("reduce_sum", v, axis, keepdims, 0))

