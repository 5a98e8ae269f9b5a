"""Dtypes of the nkipy kernel language and NumPy-compatible type promotion.

The kernel language has the dtypes of :data:`nkipy.core.ir.SUPPORTED_DTYPES`:
float32, float16, bfloat16 (from ``ml_dtypes``), int8/16/32, uint8/16/32 and
bool. There are no 64-bit types: 64-bit kernel inputs are narrowed to 32 bits
with a warning (as in the original NKIPy), and a 64-bit *result* of NumPy's
type promotion (``int8 / int8`` is float64 in NumPy, ``bool + 1`` is int64) is
narrowed to its 32-bit counterpart.

Promotion follows NumPy 2 (NEP 50): arrays, NumPy scalars and Python bools are
"strong"; Python ``int`` and ``float`` scalars are "weak" and take the kind of
the strong operands where it can hold them (``int8_array + 1`` is int8,
``int8_array + 1.5`` is float64 -> float32, ``float16_array * 2.0`` is
float16). Ufuncs then pick their loop exactly as NumPy does
(``ufunc.resolve_dtypes``), so ``np.exp(int8)`` is float16 and ``int / int`` is a
float, like NumPy. One deliberate deviation: ``bfloat16 <op> python float`` stays
bfloat16 (``ml_dtypes`` itself resolves it to float32, which would silently
double the size of every bf16 kernel).
"""
from __future__ import annotations

import contextlib
import contextvars
import warnings
from typing import Any, Iterable, Sequence

import numpy as np

from nkipy.core.ir import FLOAT8_DTYPES, FLOAT8_OPS, SUPPORTED_DTYPES, WIDE_DTYPES, bfloat16

__all__ = [
    "bfloat16", "SUPPORTED_DTYPES", "WIDE_DTYPES", "wide_dtypes", "keeps_wide",
    "torch_semantics", "zero_div_raises", "NARROWING",
    "narrow", "to_dtype", "check_supported", "is_float8", "check_float8_op",
    "sanitize_array", "Weak", "dtype_key", "result_type", "ufunc_dtypes", "is_float",
    "is_int", "is_bool", "is_signed", "can_cast_same_kind",
]

#: 64-bit dtype -> the 32-bit dtype kernels use instead.
NARROWING = {
    np.dtype("float64"): np.dtype("float32"),
    np.dtype("int64"): np.dtype("int32"),
    np.dtype("uint64"): np.dtype("uint32"),
}


_WIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("nkipy_wide_dtypes", default=False)


@contextlib.contextmanager
def wide_dtypes(enabled: bool = True):
    """Within the block, int64 and float64 are kernel dtypes computed as such
    (the C code uses ``int64_t`` and ``double``) instead of being narrowed to 32
    bits. A 64-bit dtype that NumPy's promotion produces from narrower operands
    only (``int32 / int32`` is float64 in NumPy) is still narrowed: only values
    that are 64-bit to begin with (inputs, explicit casts) stay 64-bit.
    torch.compile graphs are traced this way, so they compute what eager does."""
    token = _WIDE.set(enabled)
    try:
        yield
    finally:
        _WIDE.reset(token)


def keeps_wide() -> bool:
    """Whether 64-bit dtypes are kept (inside :func:`wide_dtypes`)."""
    return _WIDE.get()


_ZERO_DIV: contextvars.ContextVar[bool] = contextvars.ContextVar("nkipy_zero_div_raises",
                                                                 default=False)


@contextlib.contextmanager
def torch_semantics():
    """PyTorch's integer semantics for the kernels traced within the block:
    int64 and float64 computed as such (:func:`wide_dtypes`), and an integer
    division or remainder by zero is an error of the kernel's execution
    ("ZeroDivisionError", as eager PyTorch raises) instead of NumPy's 0."""
    token = _ZERO_DIV.set(True)
    try:
        with wide_dtypes():
            yield
    finally:
        _ZERO_DIV.reset(token)


def zero_div_raises() -> bool:
    """Whether integer division by zero is an error (inside :func:`torch_semantics`)."""
    return _ZERO_DIV.get()


def in_torch_semantics() -> bool:
    """Whether kernels are traced inside :func:`torch_semantics` (8-bit float
    casts then convert as PyTorch's CPU does)."""
    return _ZERO_DIV.get()


def to_dtype(dtype: Any) -> np.dtype:
    """``np.dtype(dtype)``, accepting Python types (``float`` -> float64, ...)."""
    if isinstance(dtype, str) and dtype == "bfloat16" and bfloat16 is not None:
        return bfloat16
    return np.dtype(dtype)


def narrow(dtype: Any) -> np.dtype:
    """The kernel dtype for ``dtype``: 64-bit types become 32-bit, others unchanged."""
    dt = to_dtype(dtype)
    if dt in WIDE_DTYPES and _WIDE.get():
        return dt
    return NARROWING.get(dt, dt)


def _narrow_promoted(dt: np.dtype, operands: Iterable[np.dtype]) -> np.dtype:
    """A promotion result, narrowed unless wide and some operand is 64-bit."""
    if dt in WIDE_DTYPES and _WIDE.get() and any(
            np.dtype(o).itemsize == 8 for o in operands):
        return dt
    return NARROWING.get(dt, dt)


def check_supported(dtype: Any, what: str = "value") -> np.dtype:
    """Narrows ``dtype`` and raises TypeError if kernels cannot hold it."""
    dt = narrow(dtype)
    if dt not in SUPPORTED_DTYPES and dt not in FLOAT8_DTYPES and \
            not (dt in WIDE_DTYPES and _WIDE.get()):
        names = ", ".join(d.name for d in SUPPORTED_DTYPES + FLOAT8_DTYPES)
        raise TypeError(f"nkipy kernels do not support dtype {dt} (for {what}); "
                        f"supported dtypes: {names} (64-bit types are narrowed to 32-bit)")
    return dt


def is_float8(dtype: Any) -> bool:
    """Whether ``dtype`` is one of the 8-bit floats (``FLOAT8_DTYPES``)."""
    try:
        return np.dtype(dtype) in FLOAT8_DTYPES
    except TypeError:
        return False


def check_float8_op(op: str, dtypes: Iterable[Any]) -> None:
    """TypeError when IR op ``op`` would compute on an 8-bit float: kernels
    store, convert and move them (``FLOAT8_OPS``), never round after an
    arithmetic op as NumPy's ml_dtypes does."""
    if op in FLOAT8_OPS:
        return
    for d in dtypes:
        if is_float8(d):
            raise TypeError(f"nkipy kernels do not compute on {np.dtype(d).name} ({op}): an "
                            f"8-bit float is only stored, converted and moved; convert it "
                            f"first (x.astype(np.float32)) and back after (.astype(...))")


def sanitize_array(arr: np.ndarray, name: str = "", stacklevel: int = 3) -> np.ndarray:
    """Returns ``arr`` narrowed to 32 bits (with a warning) if it is 64-bit.

    The same rule the tracer applies to kernel inputs; the runtime uses it to
    convert the arrays it is given.
    """
    target = NARROWING.get(arr.dtype)
    if target is None or (arr.dtype in WIDE_DTYPES and _WIDE.get()):
        return arr
    label = f" '{name}'" if name else ""
    warnings.warn(
        f"Input tensor{label} has dtype {arr.dtype}, which NeuronCores do not support; "
        f"casting it to {target}.", UserWarning, stacklevel=stacklevel)
    return arr.astype(target)


def is_float(dtype: Any) -> bool:
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt == bfloat16


def is_int(dtype: Any) -> bool:
    return np.dtype(dtype).kind in "iu"


def is_signed(dtype: Any) -> bool:
    return np.dtype(dtype).kind == "i"


def is_bool(dtype: Any) -> bool:
    return np.dtype(dtype).kind == "b"


def _kind_rank(dtype: np.dtype) -> int:
    """bool < integer < float (the order NumPy's same_kind casting allows)."""
    if is_bool(dtype):
        return 0
    if is_int(dtype):
        return 1
    return 2


def can_cast_same_kind(src: Any, dst: Any) -> bool:
    """NumPy's ``casting='same_kind'`` rule (used by in-place operators and ``out=``)."""
    s, d = np.dtype(src), np.dtype(dst)
    if s == d:
        return True
    if bfloat16 is not None and bfloat16 in (s, d):
        return _kind_rank(s) <= _kind_rank(d)
    return bool(np.can_cast(s, d, casting="same_kind"))


class Weak:
    """Marker for a weakly typed Python scalar operand (``int`` or ``float``)."""

    __slots__ = ("value",)

    def __init__(self, value: int | float) -> None:
        self.value = value

    @property
    def pytype(self) -> type:
        return float if isinstance(self.value, float) else int

    def __repr__(self) -> str:
        return f"Weak({self.value!r})"


def dtype_key(x: Any) -> np.dtype | Weak:
    """The promotion key of an operand: a (strong) dtype or a :class:`Weak` scalar.

    Python bools are strong ``bool`` (NumPy treats them as the lowest kind, so the
    result is the same); Python ints and floats are weak; NumPy scalars, arrays,
    lists and tracer tensors are strong.
    """
    if isinstance(x, Weak):
        return x
    if isinstance(x, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(x, (int, float)) and not isinstance(x, np.generic):
        return Weak(x)
    if isinstance(x, complex):
        raise TypeError("nkipy kernels do not support complex numbers")
    if isinstance(x, type) and issubclass(x, np.generic):
        return np.dtype(x)
    dt = getattr(x, "dtype", None)
    if dt is not None:
        return to_dtype(dt)
    return np.asarray(x).dtype


def _adopt_weak(strong: list[np.dtype], weak: Weak) -> np.dtype:
    """The dtype a weak Python scalar takes next to the strong operands (NEP 50)."""
    if not strong:
        return np.dtype(np.float64 if weak.pytype is float else np.int64)
    if weak.pytype is float:
        floats = [d for d in strong if is_float(d)]
        if floats:
            return _strong_result(floats)
        return np.dtype(np.float64)
    # weak int: any numeric strong dtype holds it; next to bool only it is int64
    numeric = [d for d in strong if not is_bool(d)]
    if numeric:
        return _strong_result(numeric)
    return np.dtype(np.int64)


def _strong_result(dtypes: Sequence[np.dtype]) -> np.dtype:
    """``np.result_type`` of strong dtypes, with bfloat16 pairs NumPy lacks."""
    dts = list(dict.fromkeys(np.dtype(d) for d in dtypes))
    if len(dts) == 1:
        return dts[0]
    try:
        return np.result_type(*dts)
    except TypeError:
        pass
    if bfloat16 is not None and bfloat16 in dts:
        # ml_dtypes has no common type of bfloat16 with float16 / wide ints;
        # its ufunc loops compute these in float32 (float64 for int32/uint32).
        others = [d for d in dts if d != bfloat16]
        wide = any(d.itemsize >= 4 for d in others)
        return np.dtype(np.float64 if wide and not any(is_float(d) for d in others)
                        else np.float32)
    raise TypeError(f"no common dtype for {', '.join(str(d) for d in dts)}")


def _strong_list(keys: Iterable[np.dtype | Weak]) -> list[np.dtype]:
    keys = list(keys)
    strong = [k for k in keys if not isinstance(k, Weak)]
    out = []
    for k in keys:
        out.append(_adopt_weak(strong, k) if isinstance(k, Weak) else k)
    return out


def check_weak_fits(weak: Weak, dtype: np.dtype) -> None:
    """NumPy 2 raises OverflowError when a Python int does not fit the array's dtype."""
    if isinstance(weak.value, int) and is_int(dtype):
        info = np.iinfo(dtype)
        if not info.min <= weak.value <= info.max:
            raise OverflowError(f"Python integer {weak.value} out of bounds for {np.dtype(dtype)}")


def result_type(*operands: Any, narrow_result: bool = True,
                check_overflow: bool = True) -> np.dtype:
    """NumPy 2 ``result_type`` of operands (arrays, tracers, dtypes, Python scalars).

    Python ints/floats are weak; a 64-bit result is narrowed unless told otherwise.
    A weak int that the result cannot hold raises OverflowError (as NumPy 2's
    operators do) unless ``check_overflow`` is false (``np.where`` casts it unsafely).
    """
    keys = [o if isinstance(o, np.dtype) else dtype_key(o) for o in operands]
    strong = _strong_list(keys)
    dt = _strong_result(strong)
    for k in keys:
        if isinstance(k, Weak) and check_overflow:
            check_weak_fits(k, dt)
    return _narrow_promoted(dt, strong) if narrow_result else dt


_COMPARISONS = frozenset({np.equal, np.not_equal, np.less, np.less_equal, np.greater,
                          np.greater_equal})


def ufunc_dtypes(ufunc: np.ufunc, operands: Sequence[Any]) -> tuple[list[np.dtype], np.dtype]:
    """(operand loop dtypes, result dtype) of ``ufunc`` applied to ``operands``.

    Chosen as NumPy 2 would (weak Python scalars, then the ufunc's own loop
    selection), then narrowed to 32 bits. Raises NumPy's TypeError for
    combinations NumPy rejects (``bool - bool``, ``~float``, ...).
    """
    keys = [o if isinstance(o, np.dtype) else dtype_key(o) for o in operands]
    if ufunc in _COMPARISONS:
        # NumPy 2 compares with out-of-range Python ints exactly (uint8_array > -1)
        strong0 = [k for k in keys if not isinstance(k, Weak)]
        fixed = []
        for k in keys:
            if isinstance(k, Weak) and isinstance(k.value, int) and strong0 and \
                    all(is_int(d) for d in strong0):
                adopted = _adopt_weak(strong0, k)
                info = np.iinfo(adopted)
                if not info.min <= k.value <= info.max:
                    k = np.min_scalar_type(k.value)  # type: ignore[assignment]
            fixed.append(k)
        keys = fixed
    strong = _strong_list(keys)
    # (a weak float next to bfloat16 adopts bfloat16 here, so bf16 * 0.5 stays bf16)
    try:
        resolved = ufunc.resolve_dtypes(tuple(strong) + (None,) * ufunc.nout)
    except TypeError:
        raise
    except Exception as exc:  # pragma: no cover - NumPy internal errors
        raise TypeError(str(exc)) from exc
    ins = [_narrow_promoted(d, strong) for d in resolved[:ufunc.nin]]
    out = _narrow_promoted(resolved[ufunc.nin], strong)
    for k, d in zip(keys, ins):
        if isinstance(k, Weak):
            check_weak_fits(k, d)
    return ins, out
