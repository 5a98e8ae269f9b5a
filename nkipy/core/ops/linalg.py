"""Linear algebra: matmul, dot, outer, trace, norm (vector and matrix norms)."""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import accumulate_dtype, reduce_np
from nkipy.core.ops._core import (nkipy_op, operand_key, reject_kwargs, to_value, unsupported, wrap,
                                  write_out)
from nkipy.core.ops._elementwise import apply_ufunc
from nkipy.core.ops.transform import moveaxis, ravel

__all__ = ["matmul", "dot", "outer", "trace", "norm", "vdot", "inner"]


def _matmul_values(a: Value, b: Value) -> Value:
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand {} does not have enough dimensions".format(
            0 if a.ndim == 0 else 1))
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        a = B.reshape(a, (1,) + a.shape)
    if squeeze_b:
        b = B.reshape(b, b.shape + (1,))
    is_bool = a.dtype == B.BOOL
    if is_bool:
        a, b = B.cast(a, B.INT32), B.cast(b, B.INT32)
    r = B.matmul(a, b)
    if is_bool:
        r = B.binary("ne", r, B.const(np.int32(0)))
    shape = r.shape
    if squeeze_a and squeeze_b:
        shape = shape[:-2]
    elif squeeze_a:
        shape = shape[:-2] + shape[-1:]
    elif squeeze_b:
        shape = shape[:-1]
    return B.reshape(r, shape)


def _matmul_dtypes(a: Any, b: Any) -> list[np.dtype]:
    """Operand dtypes of a matrix product: NumPy's, except bfloat16 @ bfloat16 stays
    bfloat16 (ml_dtypes computes it in float32 and returns float32)."""
    ka, kb = operand_key(a), operand_key(b)
    if isinstance(ka, np.dtype) and isinstance(kb, np.dtype) and ka == kb == _dt.bfloat16:
        return [ka, kb]
    return _dt.ufunc_dtypes(np.matmul, [ka, kb])[0]


@nkipy_op(cpu=np.matmul)
def matmul(x1: Any, x2: Any, out: Any = None, dtype: Any = None, **kwargs: Any) -> Any:
    """``np.matmul`` (``@``): batch dims broadcast; 1-D operands are vectors."""
    reject_kwargs("matmul", kwargs)
    if dtype is not None:
        dt = _dt.check_supported(dtype)
        ins = [dt, dt]
    else:
        ins = _matmul_dtypes(x1, x2)
    a, b = to_value(x1, ins[0]), to_value(x2, ins[1])
    return write_out(out, wrap(_matmul_values(a, b)))


@nkipy_op(cpu=np.dot)
def dot(a: Any, b: Any, out: Any = None) -> Any:
    """``np.dot``: products for scalars, matmul for vectors/matrices, and for N-D
    ``sum(a[..., :] * b[..., :, m])`` over the last axis of ``a`` and the
    second-to-last of ``b``."""
    ins = _matmul_dtypes(a, b)
    x, y = to_value(a, ins[0]), to_value(b, ins[1])
    if x.ndim == 0 or y.ndim == 0:
        return write_out(out, apply_ufunc(np.multiply, [wrap(x), wrap(y)]))
    if y.ndim <= 2 or x.ndim == 1:
        return write_out(out, wrap(_matmul_values(x, y)))
    k = x.shape[-1]
    if y.shape[-2] != k:
        raise ValueError(f"shapes {x.shape} and {y.shape} not aligned: {k} (dim {x.ndim - 1}) "
                         f"!= {y.shape[-2]} (dim {y.ndim - 2})")
    a2 = B.reshape(x, (x.size // k if k else int(np.prod(x.shape[:-1])), k))
    perm = (y.ndim - 2,) + tuple(d for d in range(y.ndim) if d != y.ndim - 2)
    b2 = B.transpose(y, perm)
    b2 = B.reshape(b2, (k, y.size // k if k else int(np.prod(b2.shape[1:]))))
    r = _matmul_values(a2, b2)
    return write_out(out, wrap(B.reshape(r, x.shape[:-1] + y.shape[:-2] + y.shape[-1:])))


@nkipy_op(cpu=np.vdot)
def vdot(a: Any, b: Any) -> Any:
    return dot(ravel(a), ravel(b))


@nkipy_op(cpu=np.inner)
def inner(a: Any, b: Any) -> Any:
    """``np.inner``: sum over the last axes."""
    x, y = to_value(a), to_value(b)
    if x.ndim == 0 or y.ndim == 0:
        return dot(a, b)
    if y.ndim == 1:
        return dot(a, b)
    return dot(a, moveaxis(wrap(y), -1, -2))


@nkipy_op(cpu=np.outer)
def outer(a: Any, b: Any, out: Any = None) -> Any:
    x, y = to_value(a), to_value(b)
    x = B.reshape(x, (x.size, 1))
    y = B.reshape(y, (1, y.size))
    return write_out(out, apply_ufunc(np.multiply, [wrap(x), wrap(y)]))


@nkipy_op(cpu=np.trace)
def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: Any = None) -> Any:
    """Sum along the ``offset`` diagonal of the (axis1, axis2) planes."""
    v = to_value(a)
    if v.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    i, j = B.normalize_axis(axis1, v.ndim), B.normalize_axis(axis2, v.ndim)
    if i == j:
        raise ValueError("axis1 and axis2 cannot be the same")
    perm = tuple(d for d in range(v.ndim) if d not in (i, j)) + (i, j)
    t = B.transpose(v, perm)
    n, m = t.shape[-2], t.shape[-1]
    dt = _dt.check_supported(dtype) if dtype is not None else accumulate_dtype(v.dtype)
    t = B.cast(t, dt)
    mask = B.binary("eq", B.binary("sub", B.iota((n, m), 1), B.iota((n, m), 0)),
                    B.const(np.int32(offset)))
    z = B.where(mask, t, B.const(np.zeros((), dt)))
    axes = (t.ndim - 2, t.ndim - 1)
    if t.size == 0:
        return write_out(out, wrap(B.broadcast_to(B.const(np.zeros((), dt)), t.shape[:-2])))
    return write_out(out, wrap(B.reduce("reduce_sum", z, axes, False)))


def _norm_dtypes(dt: np.dtype) -> tuple[np.dtype, np.dtype]:
    """(compute, result) dtypes of np.linalg.norm (non-inexact inputs become float)."""
    if dt == np.float16:
        return B.FLOAT32, dt
    return B.FLOAT32, B.FLOAT32


@nkipy_op(cpu=np.linalg.norm)
def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:
    """``np.linalg.norm``: vector norms (any p, inf, -inf, 0) and matrix norms
    ('fro', 1, -1, inf, -inf). Spectral (2, -2) and nuclear norms are unsupported."""
    v = to_value(x)
    cdt, rdt = _norm_dtypes(v.dtype)
    v = B.cast(v, cdt)
    if axis is None:
        if ord is None or (ord == "fro" and v.ndim == 2):
            r = _vec_norm(B.reshape(v, (v.size,)), 2, (0,), False)
            if keepdims:
                r = B.reshape(r, (1,) * v.ndim)
            return wrap(B.cast(r, rdt))
        if v.ndim == 1:
            axis = (0,)
        elif v.ndim == 2:
            axis = (0, 1)
        else:
            raise ValueError("Improper number of dimensions to norm.")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nax = tuple(B.normalize_axis(a, v.ndim) for a in axes)
    if len(nax) == 1:
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        return wrap(B.cast(_vec_norm(v, 2 if ord is None else ord, nax, keepdims), rdt))
    if len(nax) != 2 or nax[0] == nax[1]:
        raise ValueError("Improper number of dimensions to norm.")
    return wrap(B.cast(_mat_norm(v, ord, nax, keepdims), rdt))


def _abs(v: Value) -> Value:
    return B.unary("abs", v)


def _vec_norm(v: Value, ord: Any, axes: tuple, keepdims: bool) -> Value:
    if ord == np.inf:
        return reduce_np("reduce_max", _abs(v), axes, keepdims, 0)
    if ord == -np.inf:
        return reduce_np("reduce_min", _abs(v), axes, keepdims, None)
    if ord == 0:
        nz = B.cast(B.cast(v, B.BOOL), v.dtype)
        return reduce_np("reduce_sum", nz, axes, keepdims, 0)
    if ord == 1:
        return reduce_np("reduce_sum", _abs(v), axes, keepdims, 0)
    if ord == 2:
        return B.unary("sqrt", reduce_np("reduce_sum", B.binary("mul", v, v), axes, keepdims, 0))
    p = float(ord)
    s = reduce_np("reduce_sum", B.binary("pow", _abs(v), B.const(np.asarray(p, v.dtype))),
                  axes, keepdims, 0)
    return B.binary("pow", s, B.const(np.asarray(1.0 / p, v.dtype)))


def _mat_norm(v: Value, ord: Any, axes: tuple, keepdims: bool) -> Value:
    r_ax, c_ax = axes
    if ord is None or ord == "fro":
        r = B.unary("sqrt", reduce_np("reduce_sum", B.binary("mul", v, v), tuple(sorted(axes)),
                                      keepdims, 0))
        return r
    if ord in (1, -1, np.inf, -np.inf):
        sum_ax, red_ax = (r_ax, c_ax) if ord in (1, -1) else (c_ax, r_ax)
        s = reduce_np("reduce_sum", _abs(v), (sum_ax,), True, 0)
        op = "reduce_max" if ord in (1, np.inf) else "reduce_min"
        r = reduce_np(op, s, (red_ax,), True, None)
        if not keepdims:
            r = B.reshape(r, [d for i, d in enumerate(r.shape) if i not in axes])
        return r
    if ord in (2, -2, "nuc"):
        raise unsupported(f"np.linalg.norm(ord={ord!r}) of a matrix (needs an SVD)")
    raise ValueError("Invalid norm order for matrices.")
