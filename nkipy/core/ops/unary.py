"""Unary elementwise ops, ``clip``, ``round`` and the nkipy extras sigmoid/erf/erfc/lgamma/rsqrt."""
from __future__ import annotations

import builtins
from typing import Any, Callable

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core import interp as _interp
from nkipy.core.ops import _builder as B
from nkipy.core.ops._core import (nkipy_op, operand_key, reject_kwargs, to_value, unsupported,
                                  wrap, write_out)
from nkipy.core.ops._elementwise import apply_ufunc

__all__ = [
    "abs", "absolute", "fabs", "exp", "exp2", "log", "log10", "sqrt", "square", "negative",
    "positive", "reciprocal", "sin", "cos", "tan", "arctan", "arcsin", "arccos", "sinh", "cosh",
    "tanh", "ceil", "floor", "rint", "trunc", "sign", "invert", "bitwise_not", "logical_not",
    "clip", "log1p", "log2", "expm1", "round_", "round", "around", "isnan", "isfinite", "isinf",
    "deg2rad", "rad2deg", "sigmoid", "erf", "rsqrt", "arcsinh", "arccosh", "arctanh", "erfc",
    "lgamma", "signbit",
]


def _make(ufunc: np.ufunc, name: str) -> Callable:
    def traced(x: Any, out: Any = None, dtype: Any = None, **kwargs: Any) -> Any:
        reject_kwargs(name, kwargs)
        return apply_ufunc(ufunc, [x], dtype=dtype, out=out)

    traced.__name__ = name
    traced.__doc__ = f"``np.{ufunc.__name__}``: NumPy semantics."
    return nkipy_op(cpu=ufunc, name=name)(traced)


abs = _make(np.absolute, "abs")
absolute = abs
fabs = _make(np.fabs, "fabs")
exp = _make(np.exp, "exp")
exp2 = _make(np.exp2, "exp2")
log = _make(np.log, "log")
log10 = _make(np.log10, "log10")
sqrt = _make(np.sqrt, "sqrt")
square = _make(np.square, "square")
negative = _make(np.negative, "negative")
positive = _make(np.positive, "positive")
reciprocal = _make(np.reciprocal, "reciprocal")
sin = _make(np.sin, "sin")
cos = _make(np.cos, "cos")
tan = _make(np.tan, "tan")
arctan = _make(np.arctan, "arctan")
arcsinh = _make(np.arcsinh, "arcsinh")
arccosh = _make(np.arccosh, "arccosh")
arctanh = _make(np.arctanh, "arctanh")
arcsin = _make(np.arcsin, "arcsin")
arccos = _make(np.arccos, "arccos")
sinh = _make(np.sinh, "sinh")
cosh = _make(np.cosh, "cosh")
signbit = _make(np.signbit, "signbit")
tanh = _make(np.tanh, "tanh")
ceil = _make(np.ceil, "ceil")
floor = _make(np.floor, "floor")
rint = _make(np.rint, "rint")
trunc = _make(np.trunc, "trunc")
sign = _make(np.sign, "sign")
invert = _make(np.invert, "invert")
bitwise_not = invert
logical_not = _make(np.logical_not, "logical_not")
log1p = _make(np.log1p, "log1p")
log2 = _make(np.log2, "log2")
expm1 = _make(np.expm1, "expm1")
isnan = _make(np.isnan, "isnan")
isfinite = _make(np.isfinite, "isfinite")
isinf = _make(np.isinf, "isinf")
deg2rad = _make(np.deg2rad, "deg2rad")
rad2deg = _make(np.rad2deg, "rad2deg")


def _clip_cpu(x: Any, a_min: Any = None, a_max: Any = None, out: Any = None, **kw: Any) -> Any:
    if "min" in kw:
        a_min = kw.pop("min")
    if "max" in kw:
        a_max = kw.pop("max")
    return np.clip(x, a_min, a_max, out=out, **kw)


@nkipy_op(cpu=_clip_cpu)
def clip(x: Any, a_min: Any = None, a_max: Any = None, out: Any = None, **kwargs: Any) -> Any:
    """``np.clip``: ``minimum(maximum(x, a_min), a_max)``; NaN propagates."""
    if "min" in kwargs:
        a_min = kwargs.pop("min")
    if "max" in kwargs:
        a_max = kwargs.pop("max")
    reject_kwargs("clip", kwargs)
    if a_min is None and a_max is None:
        r = wrap(to_value(x))
        return write_out(out, r)
    dt = _dt.result_type(*[operand_key(o) for o in (x, a_min, a_max) if o is not None],
                         check_overflow=False)
    if _dt.is_int(dt):  # Python int bounds beyond the dtype's range clip nothing (NumPy 2)
        info = np.iinfo(dt)
        a_min, a_max = (builtins.min(builtins.max(b, info.min), info.max)
                        if isinstance(b, int) and not isinstance(b, bool) else b
                        for b in (a_min, a_max))
    r: Any = wrap(to_value(x, dt))
    if a_min is not None:
        r = apply_ufunc(np.maximum, [r, _cast_operand(a_min, dt)])
    if a_max is not None:
        r = apply_ufunc(np.minimum, [r, _cast_operand(a_max, dt)])
    return write_out(out, r)


def _cast_operand(v: Any, dt: np.dtype) -> Any:
    return wrap(to_value(v, dt))


def _round_cpu(x: Any, decimals: int = 0, out: Any = None) -> Any:
    return np.round(x, decimals, out=out)


@nkipy_op(cpu=_round_cpu, name="round_")
def round_(x: Any, decimals: int = 0, out: Any = None) -> Any:
    """``np.round``: half to even; ``decimals`` scales by 10**decimals like NumPy."""
    v = to_value(x)
    if not _dt.is_float(v.dtype):
        if decimals >= 0:
            return write_out(out, wrap(v))
        raise unsupported("np.round of integers with negative decimals")
    if decimals == 0:
        return write_out(out, wrap(B.unary("rint", v)))
    scale = 10.0 ** builtins.abs(decimals)
    if decimals > 0:
        r = apply_ufunc(np.true_divide, [apply_ufunc(np.rint, [apply_ufunc(
            np.multiply, [wrap(v), scale])]), scale])
    else:
        r = apply_ufunc(np.multiply, [apply_ufunc(np.rint, [apply_ufunc(
            np.true_divide, [wrap(v), scale])]), scale])
    return write_out(out, r)


round = round_
around = round_


def _float_unary(name: str, ir_op: str, cpu: Callable[[np.ndarray], np.ndarray],
                 doc: str) -> Callable:
    def cpu_impl(x: Any) -> np.ndarray:
        x = np.asarray(x)
        dt = _dt.ufunc_dtypes(np.exp, [x.dtype])[1] if not _dt.is_float(x.dtype) else x.dtype
        return cpu(x.astype(dt))

    def traced(x: Any) -> Any:
        key = operand_key(x)
        dt = _dt.ufunc_dtypes(np.exp, [key])[1]
        v = to_value(x, dt)
        return wrap(B.unary(ir_op, v))

    traced.__name__ = name
    traced.__doc__ = doc
    return nkipy_op(cpu=cpu_impl, name=name)(traced)


sigmoid = _float_unary("sigmoid", "sigmoid", _interp.np_sigmoid,
                       "Logistic sigmoid ``1 / (1 + exp(-x))`` (nkipy extra).")
erf = _float_unary("erf", "erf", _interp.np_erf, "The error function (nkipy extra).")
rsqrt = _float_unary("rsqrt", "rsqrt", _interp.np_rsqrt, "``1 / sqrt(x)`` (nkipy extra).")
erfc = _float_unary("erfc", "erfc", _interp.np_erfc,
                    "The complementary error function ``1 - erf(x)``, accurate where erf "
                    "is near 1 (nkipy extra).")
lgamma = _float_unary("lgamma", "lgamma", _interp.np_lgamma,
                      "``log|gamma(x)|``, +inf at the poles 0, -1, -2, ... (nkipy extra).")
