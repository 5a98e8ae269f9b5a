"""Binary elementwise ops: arithmetic, comparisons, logical and bitwise ops."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from nkipy.core.ops._core import nkipy_op, reject_kwargs
from nkipy.core.ops._elementwise import apply_ufunc

__all__ = [
    "add", "subtract", "multiply", "divide", "true_divide", "power", "maximum", "minimum",
    "fmax", "fmin", "bitwise_and", "bitwise_or", "bitwise_xor", "equal", "not_equal", "greater",
    "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
    "logaddexp", "remainder", "mod", "floor_divide", "arctan2", "hypot", "fmod", "copysign",
]


def _make(ufunc: np.ufunc, name: str) -> Callable:
    def traced(x: Any, y: Any, out: Any = None, dtype: Any = None, **kwargs: Any) -> Any:
        reject_kwargs(name, kwargs)
        return apply_ufunc(ufunc, [x, y], dtype=dtype, out=out)

    traced.__name__ = name
    traced.__doc__ = f"``np.{ufunc.__name__}``: NumPy semantics (NumPy 2 type promotion)."
    return nkipy_op(cpu=ufunc, name=name)(traced)


add = _make(np.add, "add")
subtract = _make(np.subtract, "subtract")
multiply = _make(np.multiply, "multiply")
divide = _make(np.divide, "divide")
true_divide = divide
power = _make(np.power, "power")
maximum = _make(np.maximum, "maximum")
minimum = _make(np.minimum, "minimum")
fmax = _make(np.fmax, "fmax")
fmin = _make(np.fmin, "fmin")
bitwise_and = _make(np.bitwise_and, "bitwise_and")
bitwise_or = _make(np.bitwise_or, "bitwise_or")
bitwise_xor = _make(np.bitwise_xor, "bitwise_xor")
equal = _make(np.equal, "equal")
not_equal = _make(np.not_equal, "not_equal")
greater = _make(np.greater, "greater")
greater_equal = _make(np.greater_equal, "greater_equal")
less = _make(np.less, "less")
less_equal = _make(np.less_equal, "less_equal")
logical_and = _make(np.logical_and, "logical_and")
logical_or = _make(np.logical_or, "logical_or")
logical_xor = _make(np.logical_xor, "logical_xor")
logaddexp = _make(np.logaddexp, "logaddexp")
remainder = _make(np.remainder, "remainder")
mod = remainder
floor_divide = _make(np.floor_divide, "floor_divide")
arctan2 = _make(np.arctan2, "arctan2")
hypot = _make(np.hypot, "hypot")
fmod = _make(np.fmod, "fmod")
copysign = _make(np.copysign, "copysign")
