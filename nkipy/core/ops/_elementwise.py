"""Lowering NumPy ufuncs onto the IR's elementwise ops.

``apply_ufunc(np.add, [x, 1.0])`` picks the operand and result dtypes as NumPy 2
would (``nkipy.core.dtypes.ufunc_dtypes``), casts the operands, and emits the IR
ops. Composite functions (``logaddexp``, ``sinh``, ...) on float16/bfloat16 are
computed in float32 and rounded once, like NumPy's own half-precision loops.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._core import (NKIPyTensorRef, operand_key, to_value, unsupported, wrap,
                                  write_out)

Lowering = Callable[[Sequence[Value], np.dtype], Value]


def _is_bool(v: Value) -> bool:
    return v.dtype == B.BOOL


def _is_float(v: Value) -> bool:
    return _dt.is_float(v.dtype)


def _c(x: float, like: Value) -> Value:
    return B.const(np.asarray(x).astype(like.dtype))


def _in_f32(fn: Callable[..., Value]) -> Callable[..., Value]:
    """Runs a composite in float32 for half-precision operands, rounding once at the end."""

    def run(*vals: Value) -> Value:
        dt = vals[0].dtype
        if dt.itemsize == 2 and _dt.is_float(dt):
            return B.cast(fn(*[B.cast(v, B.FLOAT32) for v in vals]), dt)
        return fn(*vals)

    return run


# -- binary lowerings ----------------------------------------------------

def _bin(op: str, bool_op: str | None = None) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        a, b = vals
        if bool_op is not None and _is_bool(a):
            return B.binary(bool_op, a, b)
        return B.binary(op, a, b)
    return lower


def _logical(op: str) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        a, b = (B.cast(v, B.BOOL) for v in vals)
        return B.binary(op, a, b)
    return lower


@_in_f32
def _logaddexp_f(a: Value, b: Value) -> Value:
    m = B.binary("maximum", a, b)
    d = B.unary("abs", B.binary("sub", a, b))
    r = B.binary("add", m, B.unary("log1p", B.unary("exp", B.unary("neg", d))))
    # equal operands (incl. +-inf): x + log(2)
    same = B.binary("eq", a, b)
    return B.where(same, B.binary("add", a, _c(math.log(2.0), a)), r)


def _fminmax(op: str) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        a, b = vals
        if _is_bool(a):
            return B.binary("logical_or" if op == "maximum" else "logical_and", a, b)
        r = B.binary(op, a, b)
        if not _is_float(a):
            return r
        r = B.where(B.unary("isnan", b), a, r)
        return B.where(B.unary("isnan", a), b, r)
    return lower


@_in_f32
def _arctan2_f(y: Value, x: Value) -> Value:
    """atan2 from atan with NumPy's quadrant, signed-zero and infinity rules."""
    pi, half, quarter = _c(math.pi, y), _c(math.pi / 2, y), _c(math.pi / 4, y)
    zero, one = _c(0.0, y), _c(1.0, y)
    neg_pi = B.unary("neg", pi)

    def lt(a: Value, b: Value) -> Value:
        return B.binary("lt", a, b)

    def sel(c: Value, a: Value, b: Value) -> Value:
        return B.where(c, a, b)

    base = B.unary("arctan", B.binary("div", y, x))
    x_lt0, y_ge0 = lt(x, zero), B.binary("ge", y, zero)
    r = sel(x_lt0, sel(y_ge0, B.binary("add", base, pi), B.binary("sub", base, pi)), base)
    # x == 0 (y != 0): +-pi/2
    r = sel(B.binary("eq", x, zero), sel(B.binary("gt", y, zero), half, B.unary("neg", half)), r)
    # y == +-0: +-0 for x >= +0, +-pi for x <= -0 (signs of zeros seen through 1/0)
    x_negish = B.binary("logical_or", x_lt0, lt(B.binary("div", one, x), zero))
    y_negzero = lt(B.binary("div", one, y), zero)
    r = sel(B.binary("eq", y, zero), sel(x_negish, sel(y_negzero, neg_pi, pi), y), r)
    # both infinite: +-pi/4 or +-3pi/4
    inf = _c(np.inf, y)
    both_inf = B.binary("logical_and", B.binary("eq", B.unary("abs", x), inf),
                        B.binary("eq", B.unary("abs", y), inf))
    q = sel(x_lt0, B.binary("mul", quarter, _c(3.0, y)), quarter)
    r = sel(both_inf, sel(lt(y, zero), B.unary("neg", q), q), r)
    # a NaN operand gives NaN (the x == 0 and y == 0 rules above would not)
    nan = B.binary("logical_or", B.unary("isnan", x), B.unary("isnan", y))
    return sel(nan, B.binary("add", x, y), r)


def _fmod(vals: Sequence[Value], out: np.dtype) -> Value:
    """C's fmod (the result has the dividend's sign). Floats: libm's exact
    fmod (``x - trunc(x / y) * y`` loses every digit once x / y passes 2**24).
    Integers: from the floored remainder."""
    a, b = vals
    if _is_float(a):
        return B.binary("fmod", a, b)
    r = B.binary("mod", a, b)
    zero = _c(0, r)
    differ = B.binary("ne", B.binary("lt", r, zero), B.binary("lt", a, zero))
    return B.where(B.binary("logical_and", B.binary("ne", r, zero), differ),
                   B.binary("sub", r, b), r)


def _float_only(name: str, fn: Callable[..., Value]) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        return fn(*vals)
    lower.__name__ = name
    return lower


BINARY_UFUNCS: dict[np.ufunc, Lowering] = {
    np.add: _bin("add", "logical_or"),
    np.subtract: _bin("sub"),
    np.multiply: _bin("mul", "logical_and"),
    np.true_divide: _bin("div"),
    np.floor_divide: _bin("floor_div"),
    np.remainder: _bin("mod"),
    np.power: _bin("pow"),
    np.maximum: _bin("maximum", "logical_or"),
    np.minimum: _bin("minimum", "logical_and"),
    np.fmax: _fminmax("maximum"),
    np.fmin: _fminmax("minimum"),
    np.bitwise_and: _bin("bitwise_and", "logical_and"),
    np.bitwise_or: _bin("bitwise_or", "logical_or"),
    np.bitwise_xor: _bin("bitwise_xor", "logical_xor"),
    np.logical_and: _logical("logical_and"),
    np.logical_or: _logical("logical_or"),
    np.logical_xor: _logical("logical_xor"),
    np.equal: _bin("eq"),
    np.not_equal: _bin("ne"),
    np.less: _bin("lt"),
    np.less_equal: _bin("le"),
    np.greater: _bin("gt"),
    np.greater_equal: _bin("ge"),
    np.logaddexp: _float_only("logaddexp", _logaddexp_f),
    np.arctan2: _float_only("arctan2", _arctan2_f),
    np.hypot: _bin("hypot"),
    np.fmod: _fmod,
    np.copysign: _bin("copysign"),
}


# -- unary lowerings -----------------------------------------------------

def _un(op: str) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        return B.unary(op, vals[0])
    return lower


def _float_un(op: str) -> Lowering:
    """Float ops that are identities on integers and bools (ceil, floor, trunc)."""
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        v = vals[0]
        return B.unary(op, v) if _is_float(v) else v
    return lower


def _abs(vals: Sequence[Value], out: np.dtype) -> Value:
    v = vals[0]
    if _is_bool(v) or v.dtype.kind == "u":
        return v
    return B.unary("abs", v)


def _invert(vals: Sequence[Value], out: np.dtype) -> Value:
    v = vals[0]
    return B.unary("logical_not", v) if _is_bool(v) else B.unary("bitwise_not", v)


def _logical_not(vals: Sequence[Value], out: np.dtype) -> Value:
    return B.unary("logical_not", B.cast(vals[0], B.BOOL))


def _float_pred(op: str, int_result: bool) -> Lowering:
    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        v = vals[0]
        if not _is_float(v):
            return B.broadcast_to(B.const(np.bool_(int_result)), v.shape)
        if op == "isinf":
            return B.binary("eq", B.unary("abs", v), _c(np.inf, v))
        return B.unary(op, v)
    return lower


def _signbit(vals: Sequence[Value], out: np.dtype) -> Value:
    """The sign bit: set for -0.0 and a negative NaN too (``x < 0`` is not)."""
    v = vals[0]
    if _is_float(v) or v.dtype.kind == "i":
        return B.unary("signbit", v)
    return B.broadcast_to(B.const(np.bool_(False)), v.shape)


def _reciprocal(vals: Sequence[Value], out: np.dtype) -> Value:
    v = vals[0]
    if _is_float(v):
        return B.unary("reciprocal", v)
    # NumPy's integer reciprocal truncates 1/x: x for x in {1, -1}, 0 otherwise
    one = _c(1, v)
    if v.dtype.kind == "u":
        return B.where(B.binary("eq", v, one), v, _c(0, v))
    return B.where(B.binary("eq", B.unary("abs", v), one), v, _c(0, v))


def _positive(vals: Sequence[Value], out: np.dtype) -> Value:
    return vals[0]


def _composite(fn: Callable[[Value], Value]) -> Lowering:
    f = _in_f32(fn)

    def lower(vals: Sequence[Value], out: np.dtype) -> Value:
        return f(vals[0])
    return lower


def _exp2(v: Value) -> Value:
    return B.binary("pow", B.broadcast_to(_c(2.0, v), v.shape), v)


def _log10(v: Value) -> Value:
    return B.binary("div", B.unary("log", v), _c(math.log(10.0), v))


def _arcsin(v: Value) -> Value:
    one = _c(1.0, v)
    s = B.unary("sqrt", B.binary("mul", B.binary("sub", one, v), B.binary("add", one, v)))
    return B.unary("arctan", B.binary("div", v, s))


def _arccos(v: Value) -> Value:
    one = _c(1.0, v)
    r = B.unary("sqrt", B.binary("div", B.binary("sub", one, v), B.binary("add", one, v)))
    return B.binary("mul", _c(2.0, v), B.unary("arctan", r))


def _scale(k: float) -> Callable[[Value], Value]:
    return lambda v: B.binary("mul", v, _c(k, v))


UNARY_UFUNCS: dict[np.ufunc, Lowering] = {
    np.negative: _un("neg"),
    np.positive: _positive,
    np.absolute: _abs,
    np.fabs: _abs,
    np.exp: _un("exp"),
    np.expm1: _un("expm1"),
    np.log: _un("log"),
    np.log1p: _un("log1p"),
    np.log2: _un("log2"),
    np.sqrt: _un("sqrt"),
    np.square: _un("square"),
    np.reciprocal: _reciprocal,
    np.sin: _un("sin"),
    np.cos: _un("cos"),
    np.tan: _un("tan"),
    np.arctan: _un("arctan"),
    np.arcsinh: _un("arcsinh"),
    np.arccosh: _un("arccosh"),
    np.arctanh: _un("arctanh"),
    np.tanh: _un("tanh"),
    np.ceil: _float_un("ceil"),
    np.floor: _float_un("floor"),
    np.trunc: _float_un("trunc"),
    np.rint: _un("rint"),
    np.sign: _un("sign"),
    np.invert: _invert,
    np.logical_not: _logical_not,
    np.isnan: _float_pred("isnan", False),
    np.isfinite: _float_pred("isfinite", True),
    np.isinf: _float_pred("isinf", False),
    np.exp2: _composite(_exp2),
    np.log10: _composite(_log10),
    np.sinh: _un("sinh"),
    np.cosh: _un("cosh"),
    np.signbit: _signbit,
    np.arcsin: _composite(_arcsin),
    np.arccos: _composite(_arccos),
    np.deg2rad: _composite(_scale(math.pi / 180.0)),
    np.rad2deg: _composite(_scale(180.0 / math.pi)),
}
UNARY_UFUNCS[np.radians] = UNARY_UFUNCS[np.deg2rad]
UNARY_UFUNCS[np.degrees] = UNARY_UFUNCS[np.rad2deg]

UFUNCS: dict[np.ufunc, Lowering] = {**BINARY_UFUNCS, **UNARY_UFUNCS}


def apply_ufunc(ufunc: np.ufunc, operands: Sequence[Any], dtype: Any = None,
                out: Any = None) -> NKIPyTensorRef:
    """Traces ``ufunc(*operands)`` (NumPy 2 promotion, narrowed to 32 bits)."""
    lower = UFUNCS.get(ufunc)
    if lower is None:
        raise unsupported(f"np.{ufunc.__name__}")
    if len(operands) != ufunc.nin:
        raise TypeError(f"{ufunc.__name__}() takes {ufunc.nin} positional arguments, "
                        f"got {len(operands)}")
    keys = [operand_key(o) for o in operands]
    if dtype is not None:
        dt = _dt.check_supported(dtype)
        ins, res = _dt.ufunc_dtypes(ufunc, [dt] * ufunc.nin)
    else:
        ins, res = _dt.ufunc_dtypes(ufunc, keys)
    for d in ins:
        _dt.check_supported(d, f"np.{ufunc.__name__}")
    vals = [to_value(o, d) for o, d in zip(operands, ins)]
    v = lower(vals, res)
    if v.dtype != res:
        v = B.cast(v, res)
    return write_out(out, wrap(v))
