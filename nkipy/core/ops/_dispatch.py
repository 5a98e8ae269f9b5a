"""NumPy -> nkipy dispatch for tracer tensors.

``__array_ufunc__`` and ``__array_function__`` of :class:`NKIPyTensorRef` land
here; the tables map NumPy's functions onto the ops. A NumPy function that is
not in the tables raises :class:`NKIPyUnsupportedError` naming it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ops import _builder as B
from nkipy.core.ops import creation, indexing, linalg, reduce, transform, unary
from nkipy.core.ops._core import (NKIPyTensorRef, NKIPyUnsupportedError, assign_all, is_tracer,
                                  operand_key, to_value, unsupported, wrap, write_out)
from nkipy.core.ops._elementwise import UFUNCS, apply_ufunc
from nkipy.core.trace import NKIPyTracingError, current_context


def _check_tracing(args: Any) -> None:
    if current_context() is None:
        raise NKIPyTracingError(
            "a traced tensor was used after its kernel's trace finished; tracer tensors "
            "cannot be kept and reused outside the kernel")


# -- ufuncs -------------------------------------------------------------------

_REDUCE_METHODS: dict[np.ufunc, Callable] = {
    np.add: reduce.sum, np.multiply: reduce.prod, np.maximum: reduce.max,
    np.minimum: reduce.min, np.logical_and: reduce.all, np.logical_or: reduce.any,
}
_ACCUMULATE_METHODS: dict[np.ufunc, Callable] = {np.add: reduce.cumsum,
                                                 np.multiply: reduce.cumprod}


def array_ufunc(ufunc: np.ufunc, method: str, inputs: tuple, kwargs: dict) -> Any:
    _check_tracing(inputs)
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    dtype = kwargs.pop("dtype", None)
    if method == "__call__":
        if ufunc is np.matmul:
            _reject(ufunc, kwargs)
            return linalg.matmul(*inputs, out=out, dtype=dtype)
        if ufunc not in UFUNCS:
            raise unsupported(f"np.{ufunc.__name__}")
        _reject(ufunc, kwargs)
        return apply_ufunc(ufunc, list(inputs), dtype=dtype, out=out)
    if method == "reduce":
        fn = _REDUCE_METHODS.get(ufunc)
        if fn is None:
            raise unsupported(f"np.{ufunc.__name__}.reduce")
        axis = kwargs.pop("axis", 0)
        keepdims = kwargs.pop("keepdims", False)
        _reject(ufunc, kwargs, ("initial",))
        extra = {"dtype": dtype} if dtype is not None and fn in (reduce.sum, reduce.prod) else {}
        if "initial" in kwargs:
            extra["initial"] = kwargs["initial"]
        return fn(inputs[0], axis=axis, out=out, keepdims=keepdims, **extra)
    if method == "accumulate":
        fn = _ACCUMULATE_METHODS.get(ufunc)
        if fn is None:
            raise unsupported(f"np.{ufunc.__name__}.accumulate")
        axis = kwargs.pop("axis", 0)
        _reject(ufunc, kwargs)
        return fn(inputs[0], axis=axis, dtype=dtype, out=out)
    if method == "outer":
        a, b = inputs
        va, vb = to_value(a), to_value(b)
        ra = wrap(B.reshape(va, va.shape + (1,) * vb.ndim))
        if ufunc.nin != 2:
            raise unsupported(f"np.{ufunc.__name__}.outer")
        return apply_ufunc(ufunc, [ra, b], dtype=dtype, out=out)
    if method == "at" and ufunc is np.add:
        _reject(ufunc, kwargs)
        if dtype is not None:
            raise unsupported("np.add.at(dtype=...)")
        x, index = inputs[0], inputs[1]
        values = inputs[2] if len(inputs) > 2 else 1
        indexing.add_at(x, index, values)
        return None
    raise unsupported(f"np.{ufunc.__name__}.{method}")


def _reject(ufunc: np.ufunc, kwargs: dict, allowed: tuple = ()) -> None:
    for k, v in kwargs.items():
        if k in allowed:
            continue
        if k == "where" and v is True:
            continue
        if k == "casting" and v in ("same_kind", "unsafe"):
            continue
        if k in ("order", "subok") and v in ("K", "C", True):
            continue
        raise unsupported(f"np.{ufunc.__name__}({k}=...)")


# -- operators ------------------------------------------------------------------

_OPERAND_TYPES = (NKIPyTensorRef, np.ndarray, np.generic, bool, int, float, list, tuple)


def operator(name: str, self: NKIPyTensorRef, other: Any, reflected: bool) -> Any:
    if not isinstance(other, _OPERAND_TYPES):
        return NotImplemented
    _check_tracing((self, other))
    args = [other, self] if reflected else [self, other]
    if name == "matmul":
        return linalg.matmul(*args)
    if name == "power" and not reflected:
        fast = _fast_power(self, other)
        if fast is not None:
            return fast
    if name in ("left_shift", "right_shift"):
        raise unsupported(f"the {'<<' if name == 'left_shift' else '>>'} operator (np.{name})",
                          "use multiplication / floor division by powers of two")
    return apply_ufunc(getattr(np, name), args)


_FAST_POWERS = {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal", 1.0: None}


def _fast_power(x: NKIPyTensorRef, exponent: Any) -> Any:
    """``x ** 2`` / ``** 0.5`` / ``** -1`` / ``** 1`` as NumPy's operator computes them
    (square, sqrt, reciprocal, copy) for float results and ``** 2`` for integers."""
    if not isinstance(exponent, (int, float, np.integer, np.floating)) or \
            isinstance(exponent, (bool, np.bool_)):
        return None
    e = float(exponent)
    if e not in _FAST_POWERS:
        return None
    ins, res = _dt.ufunc_dtypes(np.power, [x.dtype, operand_key(exponent)])
    is_float = _dt.is_float(res)
    if not is_float and e != 2.0:
        return None
    v = to_value(x, ins[0])
    op = _FAST_POWERS[e]
    r = v if op is None else B.unary(op, v)
    return wrap(B.cast(r, res))


def inplace_operator(name: str, self: NKIPyTensorRef, other: Any) -> Any:
    r = operator(name, self, other, False)
    if r is NotImplemented:
        return r
    if not _dt.can_cast_same_kind(r.dtype, self.dtype):
        raise TypeError(f"Cannot cast ufunc '{name}' output from dtype('{r.dtype}') to "
                        f"dtype('{self.dtype}') with casting rule 'same_kind'")
    if r.shape != self.shape:
        raise ValueError(f"non-broadcastable output operand with shape {self.shape} doesn't "
                         f"match the broadcast shape {r.shape}")
    assign_all(self, r)
    return self


# -- functions -------------------------------------------------------------------

def _shape(a: Any) -> tuple:
    return tuple(a.shape) if is_tracer(a) else np.shape(a)


def _ndim(a: Any) -> int:
    return len(_shape(a))


def _size(a: Any, axis: Any = None) -> int:
    s = _shape(a)
    if axis is None:
        return int(np.prod(s, dtype=np.int64))
    return s[axis]


def _result_type(*args: Any) -> np.dtype:
    return _dt.result_type(*[operand_key(a) if not isinstance(a, (np.dtype, type)) else
                             np.dtype(a) for a in args])


def _isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    diff = apply_ufunc(np.absolute, [apply_ufunc(np.subtract, [a, b])])
    tol = apply_ufunc(np.add, [atol, apply_ufunc(np.multiply, [rtol, apply_ufunc(np.absolute, [b])])])
    r = apply_ufunc(np.logical_or, [apply_ufunc(np.less_equal, [diff, tol]),
                                    apply_ufunc(np.equal, [a, b])])
    if equal_nan:
        both = apply_ufunc(np.logical_and, [apply_ufunc(np.isnan, [a]), apply_ufunc(np.isnan, [b])])
        r = apply_ufunc(np.logical_or, [r, both])
    return r


def _data_dependent(name: str) -> Callable:
    def fn(*a: Any, **k: Any) -> Any:
        raise NKIPyTracingError(f"np.{name} has a data-dependent result (shape or Python value) "
                                "and cannot be traced; use masks with np.where")
    return fn


def _not_supported(name: str, hint: str = "") -> Callable:
    def fn(*a: Any, **k: Any) -> Any:
        raise unsupported(f"np.{name}", hint)
    return fn


FUNCTIONS: dict[Any, Callable] = {
    # reductions
    np.sum: reduce.sum, np.prod: reduce.prod, np.max: reduce.max, np.amax: reduce.max,
    np.min: reduce.min, np.amin: reduce.min, np.mean: reduce.mean, np.var: reduce.var,
    np.std: reduce.std, np.any: reduce.any, np.all: reduce.all, np.argmax: reduce.argmax,
    np.argmin: reduce.argmin, np.cumsum: reduce.cumsum, np.cumprod: reduce.cumprod,
    np.count_nonzero: reduce.count_nonzero,
    # linear algebra
    np.dot: linalg.dot, np.vdot: linalg.vdot, np.inner: linalg.inner, np.outer: linalg.outer,
    np.trace: linalg.trace, np.linalg.norm: linalg.norm,
    # shapes
    np.reshape: transform.reshape, np.ravel: transform.ravel, np.transpose: transform.transpose,
    np.swapaxes: transform.swapaxes, np.moveaxis: transform.moveaxis,
    np.expand_dims: transform.expand_dims, np.squeeze: transform.squeeze,
    np.concatenate: transform.concatenate, np.stack: transform.stack,
    np.hstack: transform.hstack, np.vstack: transform.vstack, np.split: transform.split,
    np.array_split: transform.array_split, np.copy: transform.copy, np.repeat: transform.repeat,
    np.tile: transform.tile, np.broadcast_to: transform.broadcast_to,
    np.copyto: transform.copyto, np.pad: transform.pad, np.diff: transform.diff,
    np.flip: transform.flip, np.fliplr: transform.fliplr, np.flipud: transform.flipud,
    np.roll: transform.roll, np.atleast_1d: transform.atleast_1d,
    np.atleast_2d: transform.atleast_2d, np.atleast_3d: transform.atleast_3d,
    # creation
    np.zeros_like: creation.zeros_like, np.ones_like: creation.ones_like,
    np.empty_like: creation.empty_like, np.full_like: creation.full_like,
    np.tril: creation.tril, np.triu: creation.triu, np.diag: creation.diag,
    # indexing and selection
    np.where: indexing.where, np.take: indexing.take,
    np.take_along_axis: indexing.take_along_axis,
    np.put_along_axis: indexing.np_put_along_axis,
    np.clip: unary.clip, np.round: unary.round_, np.around: unary.round_,
    np.isclose: _isclose,
    # static queries
    np.shape: _shape, np.ndim: _ndim, np.size: _size, np.result_type: _result_type,
    # data-dependent
    np.nonzero: _data_dependent("nonzero"), np.argwhere: _data_dependent("argwhere"),
    np.flatnonzero: _data_dependent("flatnonzero"), np.unique: _data_dependent("unique"),
    np.allclose: _data_dependent("allclose"), np.array_equal: _data_dependent("array_equal"),
    # known unsupported, with hints
    np.sort: _not_supported("sort", "use nkipy.core.ops.topk(x, k=x.shape[axis], axis=axis)"),
    np.argsort: _not_supported("argsort", "use nkipy.core.ops.topk (its indices)"),
    np.einsum: _not_supported("einsum", "use np.matmul / transpose / reshape"),
}
for _name in ("permute_dims", "concat", "astype"):
    if hasattr(np, _name):
        FUNCTIONS[getattr(np, _name)] = {"permute_dims": transform.transpose,
                                        "concat": transform.concatenate,
                                        "astype": transform.astype}[_name]
if hasattr(np, "matrix_transpose"):
    FUNCTIONS[np.matrix_transpose] = lambda x: transform.swapaxes(x, -1, -2)


def array_function(func: Any, args: tuple, kwargs: dict) -> Any:
    _check_tracing(args)
    impl = FUNCTIONS.get(func)
    if impl is None:
        mod = getattr(func, "__module__", "numpy") or "numpy"
        prefix = "np.linalg." if "linalg" in mod else "np."
        raise unsupported(f"{prefix}{getattr(func, '__name__', func)}")
    return impl(*args, **kwargs)


__all__ = ["array_ufunc", "array_function", "operator", "inplace_operator", "FUNCTIONS",
           "NKIPyUnsupportedError", "write_out"]
